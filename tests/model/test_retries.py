"""Retries and the queued-occurrence core they share with buffer_one and
backfill: the schedule's pure logic, and the engine on real SQLite with real processes
steered by a manual clock."""

from __future__ import annotations

import time

import pytest

from helpers import T0, cli, cli_json, rig
from tickui.common.errors import BadInput
from tickui.common.timeutil import MICROS, iso
from tickui.model import retries
from tickui.model.queueing import plan_queued
from tickui.model.spec import build_spec
from tickui.store import LeaseLost
from tickui.store.queue import Queued

S = MICROS


# ---- the schedule: pure -----------------------------------------------------------------


def test_delays_double_up_to_the_cap_with_a_stable_jitter_of_at_most_ten_percent():
    base, cap = 10 * S, 100 * S
    for first in (1, 7, 12345):
        got = [retries.delay(n, base, cap, first) for n in range(1, 8)]
        raw = [10, 20, 40, 80, 100, 100, 100]
        for delay, whole in zip(got, raw, strict=True):
            assert 0.9 * whole * S <= delay <= whole * S
        assert got == [retries.delay(n, base, cap, first) for n in range(1, 8)]  # stable
    spread = {retries.delay(1, base, cap, first) for first in range(200)}
    assert len(spread) > 150, "the jitter does not depend on the occurrence"
    assert min(spread) < 9.2 * S and max(spread) > 9.8 * S  # it uses the whole 10%


def test_a_huge_attempt_number_stays_at_the_cap():
    assert 0.9 * 3600 * S <= retries.delay(100, 10 * S, 3600 * S, 1) <= 3600 * S


def test_only_failures_for_a_named_reason_are_retried():
    on = retries.DEFAULT_ON
    assert retries.retryable("failed", "EXIT_NONZERO", on)
    assert retries.retryable("failed", "KILLED", on)
    assert retries.retryable("failed", "TIMEOUT", on)
    assert retries.retryable("failed", "INTERRUPTED", on)
    assert not retries.retryable("failed", "DISPATCH_FAILED", on)
    assert retries.retryable("failed", "DISPATCH_FAILED", ("dispatch",))
    assert not retries.retryable("failed", "TIMEOUT", ("exit",))
    # Runs on workers: a lost worker interrupted its run; no start in time is a dispatch.
    assert retries.retryable("failed", "WORKER_LOST", ("interrupted",))
    assert not retries.retryable("failed", "WORKER_LOST", ("exit", "timeout"))
    for code in ("DISPATCH_TIMEOUT", "DEADLINE"):
        assert retries.retryable("failed", code, ("dispatch",))
        assert not retries.retryable("failed", code, on)
    for state in ("cancelled", "skipped", "succeeded"):
        assert not retries.retryable(state, "EXIT_NONZERO", retries.REASONS)


def test_next_retry_until_the_attempts_run_out():
    policy = retries.Policy(retries=2, delay=10 * S)
    first = retries.next_retry(policy, "failed", "EXIT_NONZERO", 1, 5, T0)
    second = retries.next_retry(policy, "failed", "EXIT_NONZERO", 2, 5, T0)
    assert first is not None and 9 * S <= first - T0 <= 10 * S
    assert second is not None and 18 * S <= second - T0 <= 20 * S
    assert retries.next_retry(policy, "failed", "EXIT_NONZERO", 3, 5, T0) is None
    assert retries.next_retry(policy, "cancelled", None, 1, 5, T0) is None


def test_texts():
    assert retries.attempt_text(2, 3) == "attempt 2/4"
    assert retries.attempt_text(1, 0) == ""
    assert retries.wait_text(T0 + 40 * S, T0) == "next in 40s"
    assert retries.wait_text(T0 + 39_500_000, T0) == "next in 40s"
    assert retries.wait_text(T0, T0) == "due"
    assert retries.wait_text(T0 + 917_275, T0) == "next in 918ms"  # not 0.917275s


# ---- the spec -------------------------------------------------------------------------


def _spec(**fields):
    return build_spec({"name": "t", "every": "1m", "command": ["true"], **fields}, T0)


def test_spec_defaults_and_values():
    spec = _spec()
    assert (spec.retries, spec.retry_delay, spec.retry_max_delay) == (0, 10 * S, 3600 * S)
    assert spec.retry_on == ("exit", "timeout", "interrupted") and spec.pause_after is None
    spec = _spec(retries="3", retry_delay="2s", retry_max_delay="1m", retry_on="dispatch,exit")
    assert (spec.retries, spec.retry_delay, spec.retry_max_delay) == (3, 2 * S, 60 * S)
    assert spec.retry_on == ("exit", "dispatch")
    assert _spec(retry_on=["timeout"], pause_after=3).pause_after == 3
    assert _spec(retry_delay="2h").retry_max_delay == 7200 * S  # the max follows a long delay


def test_a_definition_without_the_new_fields_keeps_its_hash():
    """Tasks stored before retries existed hash the same, so a sync does not see them all
    as changed (which would bump every generation)."""
    import hashlib
    import json
    from dataclasses import asdict

    spec = _spec()
    data = asdict(spec)
    for key in ("enabled", *retries_keys()):
        data.pop(key)
    old = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    assert spec.definition_hash() == old
    assert _spec(retries=1).definition_hash() != old


def retries_keys():
    return ("retries", "retry_delay", "retry_max_delay", "retry_on", "pause_after")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("retries", "-1"),
        ("retries", "101"),
        ("retries", "3.5"),
        ("retries", "nan"),
        ("retries", True),
        ("retry_delay", "0s"),
        ("retry_delay", "50ms"),
        ("retry_delay", "8d"),
        ("retry_delay", "soon"),
        ("retry_max_delay", "8d"),
        ("retry_on", "exit,bogus"),
        ("retry_on", ""),
        ("retry_on", []),
        ("retry_on", 3),
        ("pause_after", "0"),
        ("pause_after", "1001"),
        ("pause_after", "x"),
    ],
)
def test_bad_values_name_their_field(field, value):
    with pytest.raises(BadInput) as caught:
        _spec(**{field: value})
    assert caught.value.field == field


def test_a_max_delay_under_the_delay_is_refused():
    with pytest.raises(BadInput) as caught:
        _spec(retry_delay="1m", retry_max_delay="10s")
    assert caught.value.field == "retry_max_delay"


# ---- the queued-occurrence core --------------------------------------------------------


async def _queue(r, name: str, *slots: int, kind: str = "scheduled", **fields) -> list[int]:
    task = await r.store.get_task(name)
    items = [Queued(task.id, name, kind, slot, task.generation, **fields) for slot in slots]
    return await r.store.queue_occurrences(items, r.clock.now())


async def test_queued_rows_start_oldest_first_one_at_a_time_under_forbid(store_target, tmp_path):
    out, lock = tmp_path / "out.txt", tmp_path / "running"
    # a run that finds another one's lock says so: overlap is seen whatever the timing
    script = (f"if [ -e {lock} ]; then echo OVERLAP >> {out}; fi; touch {lock}; sleep 0.1;"
              f" rm -f {lock}; echo $TICKUI_SCHEDULED_FOR >> {out}")  # fmt: skip
    cmd = ["sh", "-c", script]
    async with rig(store_target) as r:
        await r.add("q", every="1h", command=cmd, anchor="2027-01-15T09:00:00Z")
        await r.engine.start()
        ids = await _queue(r, "q", T0 - 2 * S, T0 - 3 * S, T0 - S, kind="backfill")
        assert len(ids) == 3
        assert await _queue(r, "q", T0 - S, kind="backfill") == []  # a slot is queued once
        for _ in range(3):
            await r.tick(0.1)
            assert len(await r.store.active_occurrences()) <= 1  # (a quick one may be done)
            await r.settle()
        runs = await r.history("q")
        assert [(o.scheduled_for, o.state) for o in runs] == [
            (T0 - 2 * S, "succeeded"),
            (T0 - 3 * S, "succeeded"),
            (T0 - S, "succeeded"),
        ]
        starts = sorted(runs, key=lambda o: o.started_at)
        assert [o.scheduled_for for o in starts] == [T0 - 3 * S, T0 - 2 * S, T0 - S]
        assert out.read_text().split() == [iso(T0 - k * S) for k in (3, 2, 1)]


async def test_queued_rows_start_together_under_allow(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add("q", every="1h", command=["sleep", "0.3"], concurrency="allow")
        await r.engine.start()
        await r.settle()
        await _queue(r, "q", T0 - 2 * S, T0 - S, kind="backfill")
        await r.tick(0.1)
        states = [o.state for o in await r.history("q") if o.kind == "backfill"]
        assert states and all(s in ("claimed", "accepted", "running") for s in states), states
        await r.settle()


async def test_a_queued_row_waits_for_its_time_and_is_skipped_past_the_grace(
    store_target, tmp_path
):
    async with rig(store_target, misfire_grace=5 * S) as r:
        await r.add("q", every="1h", anchor="2027-01-15T09:00:00Z")
        await r.engine.start()
        soon, late = await _queue(r, "q", T0 - 60 * S, T0 - 50 * S, retry_at=T0 + 10 * S)
        await r.tick(5)
        assert {o.id: o.state for o in await r.history("q")} == {soon: "queued", late: "queued"}
        r.clock.advance(20)  # both are 15 s past their retry_at: missed
        await r.tick()
        rows = {o.id: o for o in await r.history("q")}
        assert rows[soon].state == rows[late].state == "skipped"
        assert rows[soon].detail.startswith("misfire_skipped: queued run due 15s ago")


async def test_queued_rows_are_cancelled_when_their_task_is_disabled_or_removed(
    store_target, tmp_path
):
    async with rig(store_target) as r:
        await r.add("a", every="1h", anchor="2027-01-15T09:00:00Z")
        await r.add("b", every="1h", anchor="2027-01-15T09:00:00Z")
        await r.engine.start()
        (a,) = await _queue(r, "a", T0, retry_at=T0 + 3600 * S)
        (b,) = await _queue(r, "b", T0, retry_at=T0 + 3600 * S)
        await r.store.set_enabled("a", False, r.clock.now())
        await r.store.remove_task("b")
        await r.tick(1)
        rows = {o.id: o for o in await r.history()}
        assert (rows[a].state, rows[a].detail) == ("cancelled", "task disabled")
        assert (rows[b].state, rows[b].detail) == ("cancelled", "task removed")


async def test_a_queued_row_is_taken_once_and_only_under_the_lease(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add("q", every="1h", anchor="2027-01-15T09:00:00Z")
        await r.engine.start()
        (occ_id,) = await _queue(r, "q", T0, retry_at=T0 + 3600 * S)
        token = r.engine._lease.token
        with pytest.raises(LeaseLost):
            await r.store.take_queued([occ_id], [], [], "someone-else", token, r.clock.now())
        first = await r.store.take_queued([occ_id], [], [], r.engine.owner, token, r.clock.now())
        again = await r.store.take_queued([occ_id], [], [], r.engine.owner, token, r.clock.now())
        assert [o.id for o in first] == [occ_id] and first[0].state == "claimed"
        assert first[0].command_id == f"cmd-{occ_id}"
        assert again == []
        await r.store.requeue([occ_id])
        assert (await r.store.get_occurrence(occ_id)).state == "queued"


def test_plan_queued_is_pure_overlap_logic():
    from tickui.model.records import Occurrence, Task

    spec = _spec()
    task = Task(1, "t", spec, "cli", True, None, 1, T0, T0, T0, None, None)
    rows = [
        Occurrence(10, 1, "t", "scheduled", T0 - 2 * S, "queued", T0, generation=1),
        Occurrence(11, 1, "t", "scheduled", T0 - S, "queued", T0, generation=1),
        Occurrence(12, 1, "t", "scheduled", T0, "queued", T0, generation=0),
    ]
    plan = plan_queued(rows, {1: task}, {}, T0, 5 * S)
    assert plan.start == [10] and plan.waiting == [11] and plan.cancel == [(12, "task changed")]
    assert plan_queued(rows, {1: task}, {1: 1}, T0, 5 * S).start == []
    late = plan_queued(rows[:1], {1: task}, {}, T0 + 10 * S, 5 * S)
    assert late.start == [] and late.skip[0][0] == 10
    waited = plan_queued(rows[:1], {1: task}, {}, T0 + 10 * S, 5 * S, {10})
    assert waited.start == [10]


# ---- retries in the engine ----------------------------------------------------------------


def _fails_twice(tmp_path) -> list[str]:
    """A command that fails on its first two runs and succeeds on the third."""
    count = tmp_path / "count"
    script = f"n=$(cat {count} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {count}; [ $n -ge 3 ]"
    return ["sh", "-c", script]


async def _step_to(r, moment: int) -> None:
    r.clock.advance((moment - r.clock.now()) / S)
    await r.tick()


async def test_a_command_failing_twice_then_succeeding_runs_three_attempts(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add(
            "flaky", every="1h", command=_fails_twice(tmp_path), retries="3", retry_delay="10s"
        )
        await r.engine.start()
        await r.settle()
        first, retry = await r.history("flaky")
        assert (first.state, first.error_code, first.attempt) == ("failed", "EXIT_NONZERO", 1)
        assert (retry.state, retry.attempt, retry.retry_of) == ("queued", 2, first.id)
        assert retry.scheduled_for == first.scheduled_for and retry.kind == "scheduled"
        delay1 = retry.retry_at - first.finished_at
        assert 9 * S <= delay1 <= 10 * S
        await _step_to(r, retry.retry_at - 1000)  # a millisecond early: it waits
        assert (await r.store.get_occurrence(retry.id)).state == "queued"
        await _step_to(r, retry.retry_at)
        await r.settle()
        second = await r.store.get_occurrence(retry.id)
        assert second.state == "failed" and second.started_at >= retry.retry_at
        third = (await r.history("flaky"))[-1]
        assert (third.state, third.attempt, third.retry_of) == ("queued", 3, first.id)
        delay2 = third.retry_at - second.finished_at
        assert 18 * S <= delay2 <= 20 * S and 1.8 <= delay2 / delay1 <= 2.23
        await _step_to(r, third.retry_at)
        await r.settle()
        runs = await r.history("flaky")
        assert [(o.attempt, o.state) for o in runs] == [
            (1, "failed"),
            (2, "failed"),
            (3, "succeeded"),
        ]
        data = runs[2].to_json()
        assert data["attempt"] == 3 and data["retry_of"] == first.id and data["retry_at"]
        await r.tick(3600)
        await r.settle()
        assert (await r.history("flaky"))[-1].attempt == 1  # the next slot starts again at 1


async def test_retries_run_out_and_cancelled_runs_are_not_retried(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add("bad", every="1h", command=["false"], retries="1", retry_delay="1s")
        await r.add("slow", every="1h", command=["sleep", "30"], retries="2")
        await r.engine.start()
        slow = next(o for o in await r.history() if o.task == "slow")
        await r.engine.cancel(slow.id)
        await r.settle()
        await r.tick(1)
        await r.settle()
        await r.tick(1)
        await r.settle()
        bad = await r.history("bad")
        assert [(o.attempt, o.state) for o in bad] == [(1, "failed"), (2, "failed")]
        assert [o.state for o in await r.history("slow")] == ["cancelled"]


async def test_a_failure_not_named_in_retry_on_is_not_retried(store_target, tmp_path):
    async with rig(store_target) as r:
        missing = str(tmp_path / "no-such-program")
        await r.add("nodispatch", every="1h", command=[missing], retries="2")
        await r.add("dispatch", every="1h", command=[missing], retries="1", retry_on="dispatch")
        await r.engine.start()
        await r.settle()
        assert [o.state for o in await r.history("nodispatch")] == ["failed"]
        assert [o.state for o in await r.history("dispatch")] == ["failed", "queued"]


async def test_a_retry_goes_first_and_the_slot_due_with_it_obeys_forbid(store_target, tmp_path):
    async with rig(store_target) as r:
        marker = tmp_path / "ran"
        # The first run fails at once; later runs take a while.
        script = f"if [ -e {marker} ]; then sleep 0.3; else touch {marker}; exit 1; fi"
        await r.add("t", every="2s", command=["sh", "-c", script], retries="1", retry_delay="1s")
        await r.engine.start()
        await r.settle()
        await r.tick(2)  # the retry (due at ~1 s) and the next slot are both due
        rows = sorted(await r.history("t"), key=lambda o: (o.scheduled_for, o.attempt))
        assert [(o.scheduled_for, o.attempt, o.state) for o in rows] == [
            (T0, 1, "failed"),
            (T0, 2, "running"),
            (T0 + 2 * S, 1, "skipped"),
        ]
        assert rows[2].detail == "concurrency_forbid"
        await r.settle()
        assert (await r.store.get_occurrence(rows[1].id)).state == "succeeded"


async def test_a_retry_due_while_a_run_is_active_waits_for_it_under_forbid(store_target, tmp_path):
    async with rig(store_target, misfire_grace=1 * S) as r:
        marker = tmp_path / "ran"
        script = f"if [ -e {marker} ]; then sleep 1.5; else touch {marker}; exit 1; fi"
        await r.add("t", every="1h", command=["sh", "-c", script], retries="1", retry_delay="1s")
        await r.engine.start()
        await r.settle()
        await r.engine.run_now("t")  # a manual run is active when the retry comes due
        retry = next(o for o in await r.history("t") if o.state == "queued")
        for _ in range(4):  # 4 s: past the grace, but it was held back, not missed
            await r.tick(1)
            assert len(await r.store.active_occurrences()) <= 1
        assert (await r.store.get_occurrence(retry.id)).state == "queued"
        await r.settle()
        await r.tick(0.1)
        await r.settle()
        assert (await r.store.get_occurrence(retry.id)).state == "succeeded"


# ---- the command line and tickui.toml ------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (["--retries", "-1"], "retries"),
        (["--retries", "101"], "retries"),
        (["--retries", "２"], "retries"),  # a full-width digit
        (["--retry-delay", "0s"], "retry_delay"),
        (["--retry-delay", "8d"], "retry_delay"),
        (["--retry-delay=-5s"], "retry_delay"),
        (["--retry-max-delay", "99ms"], "retry_max_delay"),
        (["--retry-delay", "1m", "--retry-max-delay", "30s"], "retry_max_delay"),
        (["--retry-on", "exit,oops"], "retry_on"),
        (["--retry-on", ""], "retry_on"),
        (["--pause-after", "0"], "pause_after"),
        (["--pause-after", "1001"], "pause_after"),
        (["--pause-after", "nan"], "pause_after"),
    ],
)
def test_bad_flags_exit_2_in_one_line_and_write_nothing(tmp_path, flags, field):
    db = tmp_path / "t.db"
    result = cli("task", "add", "x", "--every", "1m", *flags, "--", "true", db=db)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and field in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not db.exists()


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("retries = -1", "retries"),
        ("retries = 1000", "retries"),
        ("retries = 2.5", "retries"),
        ("retries = '3'", None),  # a text of digits is read as the number
        ("retry_delay = 10", "retry_delay"),
        ("retry_delay = '0s'", "retry_delay"),
        ("retry_max_delay = '30d'", "retry_max_delay"),
        ("retry_on = ['exit', 'weather']", "retry_on"),
        ("retry_on = []", "retry_on"),
        ("retry_on = 7", "retry_on"),
        ("pause_after = 0", "pause_after"),
        ("pause_after = true", "pause_after"),
    ],
)
def test_bad_toml_keys_exit_2_in_one_line_and_write_nothing(tmp_path, line, field):
    config, db = tmp_path / "tickui.toml", tmp_path / "t.db"
    config.write_text(f"[[task]]\nname = 'x'\nevery = '1m'\ncommand = ['true']\n{line}\n")
    result = cli("--config", str(config), "task", "add", "y", "--every", "1m", "--", "true", db=db)
    if field is None:
        assert result.returncode == 0, result.stderr
        return
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and field in result.stderr, result.stderr
    assert "line 5" in result.stderr
    assert not db.exists()


def test_toml_keys_are_taken(store_target, tmp_path):
    config, db = tmp_path / "tickui.toml", store_target
    config.write_text(
        "[[task]]\nname = 'x'\nevery = '1m'\ncommand = ['true']\nretries = 4\n"
        "retry_delay = '2s'\nretry_max_delay = '1m'\nretry_on = ['timeout']\npause_after = 5\n"
    )
    result = cli("--config", str(config), "run", "--for", "0.5", db=db)
    assert result.returncode == 0, result.stderr
    (shown,) = cli_json("task", "show", "x", db=db)
    assert (shown["retries"], shown["retry_delay"], shown["retry_max_delay"]) == (4, "2s", "1m")
    assert (shown["retry_on"], shown["pause_after"]) == (["timeout"], 5)


def test_history_and_show_say_the_attempt_and_the_pending_retry(store_target, tmp_path):
    db = store_target
    added = cli(
        "task", "add", "flaky", "--at", iso((int(time.time()) + 3) * S),
        "--retries", "3", "--retry-delay", "1m", "--", "false",
        db=db,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert cli("run", "--for", "4.5", db=db).returncode == 0
    first, pending = reversed(cli_json("history", "flaky", db=db))
    assert (first["state"], first["attempt"], first["retry_of"]) == ("failed", 1, None)
    assert (pending["state"], pending["attempt"], pending["retry_of"]) == ("queued", 2, first["id"])
    assert pending["retry_at"] > first["finished_at"]
    table = cli("history", "flaky", db=db).stdout.splitlines()
    assert "ATTEMPT" in table[0]
    assert "queued" in table[1] and "next in " in table[1] and table[1].endswith(" 2/4"), table
    assert "failed" in table[2] and " 1/4 " in table[2], table
    shown = cli("task", "show", "flaky", db=db).stdout
    assert "attempt 2/4, next in " in shown, shown
    (data,) = cli_json("task", "show", "flaky", db=db)
    assert data["pending"]["attempt"] == 2 and data["pending"]["retry_at"] == pending["retry_at"]


# ---- whole engines: kill -9, two engines ---------------------------------------------------


def _add(db, *args: str) -> None:
    added = cli("task", "add", *args, db=db)
    assert added.returncode == 0, added.stderr


def _retry_rows(db) -> list[dict]:
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    conn.row_factory = sqlite3.Row
    try:
        rows = conn.execute(
            "SELECT id, task, scheduled_for, state, attempt, retry_of, retry_at, owner,"
            " started_at, error_code FROM occurrences ORDER BY id"
        ).fetchall()
    finally:
        conn.close()
    return [dict(row) for row in rows]


def _lines(path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.mark.slow
def test_a_retry_pending_across_kill_9_runs_once_after_the_restart(tmp_path):
    from engine_procs import Engine
    from engine_procs import wait_for as poll_for

    db, out, marker = tmp_path / "t.db", tmp_path / "ran", tmp_path / "marker"
    script = f"echo $TICKUI_OCCURRENCE_ID >> {out}; [ -e {marker} ] || {{ touch {marker}; false; }}"
    at = iso((int(time.time()) + 3) * S)
    _add(db, "once", "--at", at, "--retries", "2", "--retry-delay", "3s", "--", "sh", "-c", script)
    first = Engine(db, tmp_path / "first.err")
    try:
        poll_for(lambda: any(r["state"] == "queued" for r in _retry_rows(db)), 20, "a queued retry")
        first.proc.kill()  # kill -9, the retry pending
        first.proc.wait(10)
    finally:
        first.kill()
    (failed, queued) = _retry_rows(db)
    assert (failed["state"], queued["state"], queued["attempt"]) == ("failed", "queued", 2)
    # Come back after the retry's time (it fell due while no engine ran), within the grace.
    time.sleep(max(0.0, queued["retry_at"] / S - time.time() + 1))
    second = Engine(db, tmp_path / "second.err")
    try:
        poll_for(lambda: _retry_rows(db)[1]["state"] == "succeeded", 20, "the retry to succeed")
        time.sleep(1.5)  # a few more scans: nothing runs it again
    finally:
        assert second.stop() == 0, second.stderr()
    rows = _retry_rows(db)
    assert [(r["attempt"], r["state"]) for r in rows] == [(1, "failed"), (2, "succeeded")]
    assert _lines(out) == [str(rows[0]["id"]), str(rows[1]["id"])]
    assert second.owns(rows[1]["owner"]) and rows[1]["started_at"] >= queued["retry_at"]


@pytest.mark.slow
def test_two_engines_never_run_one_retry_twice(tmp_path):
    from engine_procs import Engine, lease_owner
    from engine_procs import wait_for as poll_for

    db, out = tmp_path / "t.db", tmp_path / "ran"
    script = f"echo $TICKUI_OCCURRENCE_ID >> {out}; sleep 0.2; exit 1"
    anchor = iso((int(time.time()) + 3) * S)
    _add(
        db, "flaky", "--every", "2s", "--anchor", anchor, "--concurrency", "allow",
        "--retries", "3", "--retry-delay", "300ms", "--", "sh", "-c", script,
    )  # fmt: skip
    engines = [Engine(db, tmp_path / "a.err")]
    try:
        poll_for(lambda: engines[0].owns(lease_owner(db)), 15, "the first engine's lease")
        engines.append(Engine(db, tmp_path / "b.err"))
        poll_for(
            lambda: sum(r["attempt"] > 1 for r in _retry_rows(db) if r["started_at"]) >= 4,
            30,
            "retries run by the first engine",
        )
        assert engines[0].stop() == 0, engines[0].stderr()
        poll_for(lambda: engines[1].owns(lease_owner(db)), 15, "the standby to take over")
        poll_for(
            lambda: any(engines[1].owns(r["owner"]) and r["attempt"] > 1 for r in _retry_rows(db)),
            30,
            "a retry run by the second engine",
        )
        assert engines[1].stop() == 0, engines[1].stderr()
    finally:
        for engine in engines:
            engine.kill()
    rows = _retry_rows(db)
    ran = _lines(out)
    assert len(ran) == len(set(ran)), "an occurrence ran twice"
    started = [r for r in rows if r["started_at"] is not None]
    assert sorted(str(r["id"]) for r in started) == sorted(ran)
    keys = [(r["scheduled_for"], r["attempt"]) for r in rows if r["state"] != "skipped"]
    assert len(keys) == len(set(keys)), "an attempt of a slot exists twice"
    for row in rows:
        if row["attempt"] > 1:
            first = next(r for r in rows if r["id"] == row["retry_of"])
            assert first["scheduled_for"] == row["scheduled_for"] and first["attempt"] == 1


async def test_a_queued_retry_can_be_cancelled(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add("t", every="1h", command=["false"], retries=2, retry_delay="1m")
        await r.engine.start()
        await r.settle()
        _, retry = await r.history("t")
        assert retry.state == "queued"
        assert await r.engine.cancel(retry.id)
        assert (await r.store.get_occurrence(retry.id)).state == "cancelled"
        assert not await r.engine.cancel(retry.id)
        await r.tick(120)
        await r.settle()
        assert len(await r.history("t")) == 2  # a cancelled run is not retried


@pytest.mark.slow
def test_a_run_interrupted_by_kill_9_is_retried_once_after_the_restart(tmp_path):
    from engine_procs import Engine
    from engine_procs import wait_for as poll_for

    db, out, marker = tmp_path / "t.db", tmp_path / "ran", tmp_path / "marker"
    # The first run hangs (until the engine dies and the next one ends it); the retry ends.
    script = (
        f"echo $TICKUI_OCCURRENCE_ID >> {out}; [ -e {marker} ] || {{ touch {marker}; sleep 60; }}"
    )
    at = iso((int(time.time()) + 3) * S)
    _add(db, "once", "--at", at, "--retries", "1", "--retry-delay", "1s", "--", "sh", "-c", script)
    first = Engine(db, tmp_path / "first.err")
    try:
        poll_for(lambda: len(_lines(out)) == 1, 20, "the first run to start")
        first.proc.kill()
        first.proc.wait(10)
    finally:
        first.kill()
    second = Engine(db, tmp_path / "second.err")
    try:
        poll_for(
            lambda: [r["state"] for r in _retry_rows(db)] == ["failed", "succeeded"],
            20,
            "the interrupted run failed and its retry succeeded",
        )
        time.sleep(1.5)
    finally:
        assert second.stop() == 0, second.stderr()
    interrupted, retry = _retry_rows(db)
    assert interrupted["error_code"] == "INTERRUPTED"
    assert (retry["attempt"], retry["retry_of"]) == (2, interrupted["id"])
    assert _lines(out) == [str(interrupted["id"]), str(retry["id"])]


def test_the_retry_jitter_is_fixed_by_the_first_attempts_id_and_the_attempt_number():
    """README: each delay is shortened by a jitter of up to 10% fixed by the first
    attempt's id and the attempt number: one occurrence's attempts do not all lose the
    same fraction, and the same (id, attempt) always gives the same delay."""
    base, cap = 10 * S, 10**6 * 3600 * S  # no cap in reach: each delay is base * 2**(n-1)
    for first in range(1, 30):
        shortened = []
        for attempt in range(1, 9):
            raw = base * 2 ** (attempt - 1)
            got = retries.delay(attempt, base, cap, first)
            assert 0.9 * raw <= got <= raw, (first, attempt, got)
            assert got == retries.delay(attempt, base, cap, first)  # the same after a restart
            shortened.append(round((raw - got) / raw, 6))
        assert len(set(shortened)) >= 6, f"id {first}: every attempt loses {shortened}"
