"""Backfill: one occurrence of kind `backfill` per slot in (from, to],
run in order under the task's overlap policy. Pure slot computation, then the real
engine with a manual clock and real processes, then the CLI."""

from __future__ import annotations

import hashlib
import itertools
import time
from pathlib import Path

import pytest
from engine_procs import Engine, wait_for

from helpers import T0, cli, cli_json, rig
from tickui.common.errors import BadInput
from tickui.common.timeutil import MICROS, iso, parse_instant
from tickui.model.backfill import DEFAULT_MAX, MAX_MAX, backfill_slots
from tickui.model.occurrence import TERMINAL
from tickui.schedules.triggers import cron, interval, once

S = MICROS
M = 60 * S


# ---- slots ----------------------------------------------------------------------------------


def test_slots_are_the_half_open_range_oldest_first() -> None:
    every = interval(M, T0)
    assert backfill_slots(every, T0, T0 + 3 * M, T0 + 10 * M, 100) == [
        T0 + M,
        T0 + 2 * M,
        T0 + 3 * M,
    ]  # a slot at `from` is not in (from, to]; one at `to` is


def test_an_empty_range_and_a_range_with_no_slot_are_refused() -> None:
    every = interval(M, T0)
    with pytest.raises(BadInput, match="empty"):
        backfill_slots(every, T0, T0, T0 + M, 100)
    with pytest.raises(BadInput, match="no slot"):
        backfill_slots(every, T0 + 1, T0 + M - 1, T0 + 10 * M, 100)


def test_cron_slots_in_their_zone() -> None:
    daily = cron("30 2 * * *", "Europe/Berlin")
    start = parse_instant("2027-03-26T00:00:00Z")
    end = parse_instant("2027-03-30T00:00:00Z")
    got = [iso(s) for s in backfill_slots(daily, start, end, end, 100)]
    # 2027-03-28 02:30 does not exist in Berlin (clocks go forward): fired at 03:00 CEST.
    assert got == [
        "2027-03-26T01:30:00+00:00",
        "2027-03-27T01:30:00+00:00",
        "2027-03-28T01:00:00+00:00",
        "2027-03-29T00:30:00+00:00",
    ]


def test_bad_ranges_are_refused_naming_the_flag() -> None:
    every = interval(M, T0)
    with pytest.raises(BadInput) as caught:
        backfill_slots(every, T0 + M, T0, T0 + 2 * M, 100)
    assert caught.value.field == "--from" and "after --to" in caught.value.message
    with pytest.raises(BadInput) as caught:
        backfill_slots(every, T0, T0 + 5 * M, T0 + 4 * M, 100)
    assert caught.value.field == "--to" and "future" in caught.value.message
    with pytest.raises(BadInput) as caught:
        backfill_slots(every, T0, T0 + 101 * M, T0 + 200 * M, DEFAULT_MAX)
    assert caught.value.field == "--max" and "101 slots" in caught.value.message
    assert len(backfill_slots(every, T0, T0 + 100 * M, T0 + 200 * M, DEFAULT_MAX)) == 100
    with pytest.raises(BadInput, match="out of range"):
        backfill_slots(every, T0, T0 + M, T0 + M, MAX_MAX + 1)


def test_an_interval_backfills_before_its_anchor_on_the_same_grid() -> None:
    every = interval(M, T0 + 20 * S)  # a task made at T0 + 20 s
    got = backfill_slots(every, T0 - 3 * M, T0 + M, T0 + 2 * M, 100)
    assert got == [T0 - 3 * M + 20 * S + k * M for k in range(4)]


def test_a_one_time_task_backfills_its_one_slot() -> None:
    at = once(T0 + M, T0)
    assert backfill_slots(at, T0, T0 + 2 * M, T0 + 3 * M, 100) == [T0 + M]


# ---- the engine runs them -------------------------------------------------------------------


async def test_ten_slots_of_an_every_minute_task_run_ten_times_in_order_under_forbid(
    store_target,
    tmp_path: Path,
) -> None:
    out = tmp_path / "out.txt"
    cmd = ["sh", "-c", f'echo "$TICKUI_SCHEDULED_FOR" >> {out}; sleep 0.2']
    now = T0 + 30 * M + 30 * S  # between two slots: nothing scheduled is due
    async with rig(store_target, start=now) as r:
        # The grid is on whole minutes; the next scheduled slot is in the future.
        await r.add("m", every="1m", command=cmd, anchor=iso(T0), concurrency="forbid")
        slots = backfill_slots((await r.store.get_task("m")).schedule, T0, T0 + 10 * M, now, 100)
        ids, had = await r.store.queue_backfill("m", slots, now)
        assert len(ids) == 10 and had == []
        await r.engine.start()
        for _ in range(10):
            await r.tick(0.001)
            active = await r.store.active_occurrences()
            assert len(active) == 1 and active[0].kind == "backfill"  # one after another
            await r.settle()
        await r.tick(0.001)
        assert await r.store.active_occurrences() == []
        runs = [o for o in await r.history("m") if o.kind == "backfill"]
    assert [o.state for o in runs] == ["succeeded"] * 10
    assert [o.scheduled_for for o in runs] == slots
    assert [o.started_at for o in runs] == sorted(o.started_at for o in runs)
    assert out.read_text().split() == [iso(s) for s in slots]  # TICKUI_SCHEDULED_FOR


async def test_allow_runs_them_side_by_side(store_target, tmp_path: Path) -> None:
    now = T0 + 30 * M + 30 * S  # between two slots: nothing scheduled is due
    async with rig(store_target, start=now) as r:
        await r.add("a", every="1m", command=["sleep", "0.5"], anchor=iso(T0), concurrency="allow")
        slots = backfill_slots((await r.store.get_task("a")).schedule, T0, T0 + 3 * M, now, 100)
        await r.store.queue_backfill("a", slots, now)
        await r.engine.start()
        await r.tick(0.001)
        assert len(await r.store.active_occurrences()) == 3
        await r.settle()


async def test_a_slot_with_a_scheduled_run_is_not_run_again(store_target, tmp_path: Path) -> None:
    async with rig(store_target, start=T0 + 1) as r:
        await r.add("m", every="1m", anchor=iso(T0))
        await r.engine.start()
        await r.tick(M / S)  # the scheduled slot T0 + 1m runs
        await r.settle()
        slots = [T0 + M, T0 + 2 * M]
        ids, had = await r.store.queue_backfill("m", slots, T0 + 2 * M + 1)
        assert had == [T0 + M] and len(ids) == 1
        # Queued twice: once.
        again, had = await r.store.queue_backfill("m", slots, T0 + 2 * M + 1)
        assert again == [] and had == slots


async def test_cancel_cancels_the_queued_ones_and_they_can_be_queued_again(
    store_target,
    tmp_path: Path,
) -> None:
    async with rig(store_target, start=T0 + 10 * M) as r:
        await r.add("m", every="1m", anchor=iso(T0))
        slots = [T0 + M, T0 + 2 * M, T0 + 3 * M]
        await r.store.queue_backfill("m", slots, r.clock.now())
        assert await r.store.cancel_backfill("m", r.clock.now()) == 3
        states = {o.state for o in await r.history("m")}
        assert states == {"cancelled"}
        ids, had = await r.store.queue_backfill("m", slots, r.clock.now())
        assert len(ids) == 3 and had == []
        assert {o.state for o in await r.history("m")} == {"queued"}
        await r.store.set_enabled("m", False, r.clock.now())
        with pytest.raises(BadInput, match="disabled"):
            await r.store.queue_backfill("m", slots, r.clock.now())


# ---- the command line -----------------------------------------------------------------------


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_cli_backfill_queues_shows_in_history_and_cancels(store_target, tmp_path: Path) -> None:
    db = store_target
    add = ("task", "add", "m", "--every", "1m", "--anchor", "2020-01-01T00:00:00Z")
    assert cli(*add, "--", "true", db=db).returncode == 0
    rng = ("--from", "2024-01-01T00:00:00Z", "--to", "2024-01-01T00:10:00Z")
    done = cli("task", "backfill", "m", *rng, db=db)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("queued 10 backfill run(s) of m")
    rows = cli_json("history", "m", db=db)
    assert [(o["kind"], o["state"]) for o in rows] == [("backfill", "queued")] * 10
    assert rows[-1]["scheduled_for"] == "2024-01-01T00:01:00+00:00"
    done = cli("task", "backfill", "m", "--cancel", db=db)
    assert done.returncode == 0 and "cancelled 10" in done.stdout
    assert {o["state"] for o in cli_json("history", "m", db=db)} == {"cancelled"}


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--from", "2024-01-02T00:00:00Z", "--to", "2024-01-01T00:00:00Z"), "after --to"),
        (("--from", "2024-01-01T00:00:00Z", "--to", "2099-01-01T00:00:00Z"), "future"),
        (("--from", "2024-01-01T00:00:00Z", "--to", "2024-01-01T02:00:00Z"), "120 slots"),
        (
            ("--from", "2024-01-01T00:00:00Z", "--to", "2024-01-01T00:20:00Z", "--max", "5"),
            "20 slots, more than --max 5",
        ),
        (("--from", "2024-01-01T00:00:00Z", "--to", "x"), "--to"),
        (("--from", "2024-01-01T00:00:00Z"), "--to"),
        (("--from", "2024-01-01T00:00:00Z", "--to", "2024-01-01T00:02:00Z", "--max", "0"), "--max"),
        (("--cancel", "--from", "2024-01-01T00:00:00Z"), "alone"),
    ],
)
def test_cli_refusals_write_nothing(tmp_path: Path, args, words) -> None:
    db = tmp_path / "t.db"
    add = ("task", "add", "m", "--every", "1m", "--anchor", "2020-01-01T00:00:00Z")
    assert cli(*add, "--", "true", db=db).returncode == 0
    before = _digest(db)
    done = cli("task", "backfill", "m", *args, db=db)
    assert done.returncode == 2, done.stdout
    assert words in done.stderr and done.stderr.count("\n") == 1
    assert _digest(db) == before
    assert cli("task", "backfill", "nope", *args[:4], db=db).returncode == 2


def test_tickui_run_runs_a_cli_backfill_of_ten_slots_in_order_under_forbid(
    store_target,
    tmp_path: Path,
) -> None:
    """The whole path as a user takes it: a task added now, its last ten minutes
    backfilled, `tickui run` (real processes) runs them one after another, oldest first."""
    db, out = store_target, tmp_path / "out.txt"
    script = f'echo "$TICKUI_SCHEDULED_FOR $(date +%s.%N)" >> {out}; sleep 0.05'
    add = ("task", "add", "m", "--every", "1m", "--concurrency", "forbid")
    assert cli(*add, "--", "sh", "-c", script, db=db).returncode == 0
    now = time.time()
    start, end = iso(int((now - 11 * 60) * S)), iso(int((now - 60) * S))
    done = cli("task", "backfill", "m", "--from", start, "--to", end, db=db)
    assert done.returncode == 0 and "queued 10 backfill run(s)" in done.stdout, done.stderr
    engine = Engine(db, tmp_path / "engine.err")  # `tickui run`, until the ten are done
    try:
        wait_for(
            lambda: sum(
                o["kind"] == "backfill" and o["state"] in TERMINAL
                for o in cli_json("history", "m", db=db)
            ) == 10,
            60, "the ten backfill runs to end",
        )  # fmt: skip
        assert engine.stop() == 0, engine.stderr()
    finally:
        engine.kill()
    rows = list(reversed(cli_json("history", "m", db=db)))
    backfilled = [o for o in rows if o["kind"] == "backfill"]
    assert [o["state"] for o in backfilled] == ["succeeded"] * 10
    slots = [o["scheduled_for"] for o in backfilled]
    assert slots == sorted(slots)
    seen = [line.split() for line in out.read_text().splitlines()]
    ours = [(slot, float(at)) for slot, at in seen if slot in slots]
    assert [slot for slot, _ in ours] == slots  # started oldest first, each once
    for before, after in itertools.pairwise(backfilled):  # never side by side
        assert after["started_at"] >= before["finished_at"]


async def test_a_cancelled_backfill_does_not_retry_its_run_in_flight(
    store_target, tmp_path: Path
) -> None:
    """Found by an adversarial try: --cancel cancelled the waiting slots, but the one
    running failed afterwards and was retried. Its backfill is cancelled: so is its retry."""
    gate = tmp_path / "go"
    cmd = ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done; exit 1"]
    now = T0 + 30 * M + 30 * S
    async with rig(store_target, start=now) as r:
        await r.add("m", every="1m", command=cmd, anchor=iso(T0), retries=2, retry_delay="1s")
        slots = backfill_slots((await r.store.get_task("m")).schedule, T0, T0 + 3 * M, now, 100)
        await r.store.queue_backfill("m", slots, now)
        await r.engine.start()
        await r.tick(0.001)
        (running,) = await r.store.active_occurrences()
        assert await r.store.cancel_backfill("m", r.clock.now()) == 2
        gate.touch()
        await r.settle()
        await r.tick(5)
        await r.settle()
        runs = [o for o in await r.history("m") if o.kind == "backfill"]
    assert [(o.id, o.state) for o in runs if o.attempt > 1] == [], "the cancelled one retried"
    assert [o.state for o in runs] == ["failed", "cancelled", "cancelled"]
    assert runs[0].id == running.id


async def test_a_backfill_run_of_a_live_backfill_is_retried(store_target, tmp_path: Path) -> None:
    cmd = ["sh", "-c", "exit 1"]
    now = T0 + 30 * M + 30 * S
    async with rig(store_target, start=now) as r:
        await r.add("m", every="1m", command=cmd, anchor=iso(T0), retries=1, retry_delay="1s")
        slots = backfill_slots((await r.store.get_task("m")).schedule, T0, T0 + M, now, 100)
        await r.store.queue_backfill("m", slots, now)
        await r.engine.start()
        await r.tick(0.001)
        await r.settle()
        (retry,) = await r.store.queued_of()
    assert (retry.kind, retry.attempt) == ("backfill", 2)


async def test_cancel_ends_the_running_backfill_run_through_the_engine(
    store_target, tmp_path: Path
) -> None:
    """`--cancel` from another process while the backfill's last slot runs: nothing waits,
    so the running one is the engine's to end; it ends cancelled and is never retried."""
    cmd = ["sh", "-c", "sleep 30; exit 1"]
    now = T0 + 30 * M + 30 * S
    db = store_target
    async with rig(db, start=now) as r:
        await r.add("m", every="1m", command=cmd, anchor=iso(T0), retries=2, retry_delay="1s")
        slots = backfill_slots((await r.store.get_task("m")).schedule, T0, T0 + M, now, 100)
        await r.store.queue_backfill("m", slots, now)
        await r.engine.start()
        await r.tick(0.001)
        (running,) = await r.store.active_occurrences()
        done = cli("task", "backfill", "m", "--cancel", db=db)
        assert done.returncode == 0, done.stderr
        assert "cancelled 0 queued" in done.stdout and "cancel the 1 running" in done.stdout
        await r.tick(0.001)  # the engine takes the request
        await r.settle()
        await r.tick(5)
        runs = await r.history("m")
    assert [(o.id, o.state, o.attempt) for o in runs] == [(running.id, "cancelled", 1)]


def test_max_goes_up_to_5000_and_no_further() -> None:
    """README: `--max` goes up to 5000; more is refused."""
    every = interval(60 * S, 0)
    start, now = 1_000 * 60 * S, 10_000 * 60 * S
    assert len(backfill_slots(every, start, start + 5000 * 60 * S, now, 5000)) == 5000
    with pytest.raises(BadInput) as refused:
        backfill_slots(every, start, start + 60 * S, now, 5001)
    assert refused.value.field == "--max" and "1 to 5000" in str(refused.value)
