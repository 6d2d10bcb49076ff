"""Pause after failures: N consecutive failed slots (after their retries)
disable the task with a note; a success resets the count; enabling clears it."""

from __future__ import annotations

import pytest
from engine_procs import Engine, wait_for

from helpers import cli, cli_json, rig
from tickui.model import retries
from tickui.store.queue import Queued


def test_counting_is_by_final_outcome():
    assert retries.count_failures(0, "failed", 3) == (1, False)
    assert retries.count_failures(2, "failed", 3) == (3, True)
    assert retries.count_failures(5, "failed", 3) == (6, True)
    assert retries.count_failures(2, "succeeded", 3) == (0, False)
    assert retries.count_failures(2, "cancelled", 3) == (2, False)
    assert retries.count_failures(2, "skipped", 3) == (2, False)
    assert retries.count_failures(9, "failed", None) == (10, False)
    note = retries.pause_note(3, "EXIT_NONZERO")
    assert note == "paused after 3 consecutive failures (last: EXIT_NONZERO)"


async def _run_retries(r) -> None:
    """Step the clock to each queued retry in turn and run it, until none is left."""
    while queued := [o for o in await r.store.queued_of() if o.retry_at is not None]:
        r.clock.advance(max(0, queued[0].retry_at - r.clock.now()) / 1_000_000)
        await r.tick()
        await r.settle()


async def _run_slots(r, count: int, seconds: float = 1) -> None:
    for _ in range(count):
        await r.tick(seconds)
        await r.settle()


async def test_pause_after_3_disables_after_three_failed_slots(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add("bad", every="1s", command=["sh", "-c", "exit 4"], pause_after=3)
        await r.engine.start()
        await r.settle()
        await _run_slots(r, 1)
        task = await r.store.get_task("bad")
        assert task.enabled and await r.store.failures_of(task.id) == 2
        await _run_slots(r, 1)
        task = await r.store.get_task("bad")
        assert not task.enabled
        assert task.note == "paused after 3 consecutive failures (last: EXIT_NONZERO)"
        await _run_slots(r, 3)
        assert len(await r.history("bad")) == 3  # nothing more runs


async def test_a_success_resets_the_count(store_target, tmp_path):
    async with rig(store_target) as r:
        flag = tmp_path / "ok"
        script = f"[ -e {flag} ]"
        await r.add("t", every="1s", command=["sh", "-c", script], pause_after=2)
        await r.engine.start()
        await r.settle()
        task = await r.store.get_task("t")
        assert await r.store.failures_of(task.id) == 1
        flag.touch()
        await _run_slots(r, 1)
        assert await r.store.failures_of(task.id) == 0
        flag.unlink()
        await _run_slots(r, 1)
        assert (await r.store.get_task("t")).enabled  # 1 failure since the success
        await _run_slots(r, 1)
        assert not (await r.store.get_task("t")).enabled


async def test_a_slot_counts_once_after_its_last_attempt(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add("t", every="1h", command=["false"], retries=2, retry_delay="1s", pause_after=2)
        await r.engine.start()
        await r.settle()
        task = await r.store.get_task("t")
        assert await r.store.failures_of(task.id) == 0  # attempts 2 and 3 are to come
        assert [(o.attempt, o.state) for o in await r.history("t")] == [
            (1, "failed"),
            (2, "queued"),
        ]
        await _run_retries(r)
        assert [o.attempt for o in await r.history("t")] == [1, 2, 3]
        assert await r.store.failures_of(task.id) == 1
        assert (await r.store.get_task("t")).enabled
        await _run_slots(r, 1, 3600)  # the next slot, attempt 1: fails, a retry is queued
        assert (await r.store.get_task("t")).enabled
        await _run_retries(r)
        task = await r.store.get_task("t")
        assert not task.enabled and task.note.startswith("paused after 2 consecutive failures")
        assert [o.attempt for o in await r.history("t")] == [1, 2, 3, 1, 2, 3]


async def test_pausing_cancels_what_waits(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add("a", every="1h", command=["false"], retries=1, retry_delay="1m")
        await r.add("b", every="1h", command=["false"], pause_after=1)
        b = await r.store.get_task("b")
        later = r.clock.now() + 3600 * 1_000_000
        (waiting,) = await r.store.queue_occurrences(
            [Queued(b.id, "b", "backfill", r.clock.now() - 60_000_000, b.generation, later)],
            r.clock.now(),
        )
        await r.engine.start()
        await r.settle()
        b = await r.store.get_task("b")
        assert not b.enabled and await r.store.failures_of(b.id) == 1
        cancelled = await r.store.get_occurrence(waiting)
        assert (cancelled.state, cancelled.detail) == ("cancelled", "task paused")
        pending = [o for o in await r.history("a") if o.state == "queued"]
        assert len(pending) == 1  # a: no pause_after, its retry waits


@pytest.mark.parametrize("code", ["TIMEOUT"])
async def test_the_note_names_the_last_code(store_target, tmp_path, code):
    async with rig(store_target) as r:
        await r.add("slow", every="1h", command=["sleep", "30"], timeout="200ms", pause_after=1)
        await r.engine.start()
        await r.settle()
        task = await r.store.get_task("slow")
        assert task.note == f"paused after 1 consecutive failures (last: {code})"


@pytest.mark.slow
def test_the_pause_after_flag_on_a_real_engine(tmp_path):
    db = tmp_path / "t.db"
    added = cli("task", "add", "bad", "--every", "1s", "--pause-after", "3", "--", "false", db=db)
    assert added.returncode == 0, added.stderr
    engine = Engine(db, tmp_path / "engine.err")
    try:
        # until it pauses (three failed slots: about 3 s, longer on a loaded machine)
        wait_for(lambda: not cli_json("task", "list", db=db)[0]["enabled"], 60, "the pause")
        assert engine.stop() == 0, engine.stderr()
    finally:
        engine.kill()
    (task,) = cli_json("task", "list", db=db)
    assert task["enabled"] is False and task["pause_after"] == 3
    assert task["note"] == "paused after 3 consecutive failures (last: EXIT_NONZERO)"
    runs = cli_json("history", "bad", db=db)
    # (a slot due while a run still starts, or missed, on a loaded machine, is skipped with
    # its reason: not a failure)
    assert [o["state"] for o in runs if o["state"] != "skipped"] == ["failed"] * 3, runs
    assert all(o["detail"] for o in runs if o["state"] == "skipped"), runs
    shown = cli("task", "show", "bad", db=db).stdout
    assert "failures: 3" in shown


async def test_a_retry_skipped_as_missed_ends_its_slot_failed(store_target, tmp_path):
    async with rig(store_target, misfire_grace=2_000_000) as r:
        await r.add("t", every="1h", command=["false"], retries=1, retry_delay="1s", pause_after=1)
        await r.engine.start()
        await r.settle()
        task = await r.store.get_task("t")
        assert task.enabled and await r.store.failures_of(task.id) == 0
        await r.tick(30)  # the retry was due 29 s ago: missed (the engine was away)
        _first, retry = await r.history("t")
        assert retry.state == "skipped" and retry.detail.startswith("misfire_skipped: retry")
        task = await r.store.get_task("t")
        assert not task.enabled
        assert task.note == "paused after 1 consecutive failures (last: EXIT_NONZERO)"


async def test_enabling_a_paused_task_clears_its_count(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add("b", every="1s", command=["false"], pause_after=2)
        await r.engine.start()
        await r.settle()
        await r.tick(1)
        await r.settle()
        b = await r.store.get_task("b")
        assert not b.enabled and await r.store.failures_of(b.id) == 2
        enabled = await r.store.set_enabled("b", True, r.clock.now())
        assert enabled.enabled and enabled.note is None
        assert await r.store.failures_of(b.id) == 0
        await r.tick(1)  # one more failure after enabling: 1 of 2, still enabled
        await r.settle()
        assert (await r.store.get_task("b")).enabled
        assert await r.store.failures_of(b.id) == 1
