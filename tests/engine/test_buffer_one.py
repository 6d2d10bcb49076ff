"""Overlap `buffer_one`: while a run is active the next slot waits
(state `queued`) and starts as soon as the run ends; at most one waits; a further slot is
skipped `concurrency_buffer_full`. Pure decisions with a manual clock, then real
processes."""

from __future__ import annotations

import itertools

import pytest

from helpers import T0 as RIG_T0
from helpers import cli, cli_json, rig
from tickui.common.timeutil import MICROS, iso, parse_instant
from tickui.model.planning import DueTask, Planned, _overlap, plan_task
from tickui.model.spec import build_spec
from tickui.schedules.triggers import interval

S = MICROS
MS = 1_000
T0 = parse_instant("2026-05-05T10:00:00Z")
GRACE = 5 * S


def _due(next_run_at: int, every: int = S, concurrency: str = "buffer_one") -> DueTask:
    return DueTask(
        id=1,
        name="b",
        schedule=interval(every, T0),
        next_run_at=next_run_at,
        misfire="run_once",
        concurrency=concurrency,
    )


def _claimed(*slots: int) -> list[Planned]:
    return [Planned(slot, "claimed") for slot in slots]


def _states(planned: list[Planned]) -> list[tuple[str, str | None]]:
    return [(p.state, p.detail) for p in planned]


FULL = "concurrency_buffer_full"


def test_idle_runs_the_slot() -> None:
    planned, cancel = _overlap("buffer_one", _claimed(T0), active=False)
    assert _states(planned) == [("claimed", None)] and cancel is False


def test_active_buffers_one_slot() -> None:
    planned, cancel = _overlap("buffer_one", _claimed(T0), active=True)
    assert _states(planned) == [("queued", None)] and cancel is False  # never replaces


def test_a_slot_waiting_already_fills_the_buffer() -> None:
    planned, _ = _overlap("buffer_one", _claimed(T0), active=True, waiting=True)
    assert _states(planned) == [("skipped", FULL)]
    # Nothing active but an older slot waits (it starts first): the new one is skipped too.
    planned, _ = _overlap("buffer_one", _claimed(T0), active=False, waiting=True)
    assert _states(planned) == [("skipped", FULL)]


def test_several_due_slots_one_runs_one_waits_the_rest_skip() -> None:
    slots = [T0, T0 + S, T0 + 2 * S, T0 + 3 * S]
    planned, _ = _overlap("buffer_one", _claimed(*slots), active=False)
    assert [p.scheduled_for for p in planned] == slots
    assert _states(planned) == [
        ("claimed", None),
        ("queued", None),
        ("skipped", FULL),
        ("skipped", FULL),
    ]
    planned, _ = _overlap("buffer_one", _claimed(*slots), active=True)
    assert _states(planned) == [("queued", None)] + [("skipped", FULL)] * 3


def test_misfire_rows_keep_their_detail_and_other_policies_are_unchanged() -> None:
    late = [Planned(T0, "skipped", covers=3, missed=3, detail="misfire_skipped: 3 missed")]
    planned, _ = _overlap("buffer_one", late + _claimed(T0 + 3 * S), active=True)
    assert _states(planned) == [("skipped", "misfire_skipped: 3 missed"), ("queued", None)]
    coalesced = [Planned(T0, "claimed", covers=4, missed=3, detail="misfire_coalesced: 3 missed")]
    planned, _ = _overlap("buffer_one", coalesced, active=True, waiting=True)
    assert _states(planned) == [("skipped", f"{FULL} (misfire_coalesced: 3 missed)")]
    assert planned[0].covers == 4 and planned[0].missed == 3
    for policy in ("forbid", "allow", "replace"):  # `waiting` is buffer_one's alone
        assert _overlap(policy, _claimed(T0), True, True) == _overlap(policy, _claimed(T0), True)


def test_plan_task_under_buffer_one() -> None:
    due = _due(T0 + S)
    plan = plan_task(due, T0 + S, GRACE, active=True)
    assert _states(plan.occurrences) == [("queued", None)]
    assert plan.next_run_at == T0 + 2 * S and not plan.cancel_active
    plan = plan_task(due, T0 + S, GRACE, active=False)
    assert _states(plan.occurrences) == [("claimed", None)]


def simulate(run_for: int, every: int, until: int, step: int = 100 * MS) -> list[tuple]:
    """A 'manual clock' model of the engine around the pure decisions: each scan (every
    `step`) first starts the waiting slot when nothing runs (the queued scan), then plans
    the due slots with plan_task/_overlap. Returns (slot, state, start, end) per slot."""
    due = _due(T0 + every, every, "allow")  # the due slots; buffer_one decides below
    rows: dict[int, list] = {}
    running: list[int] = []  # slots running now
    queue: list[int] = []
    now = T0
    while now <= until:
        for slot in list(running):  # runs that ended by now
            if rows[slot][3] <= now:
                running.remove(slot)
                if queue:  # the engine scans at once when a run ends (within 100 ms)
                    nxt = queue.pop(0)
                    rows[nxt][1:4] = ["running", rows[slot][3], rows[slot][3] + run_for]
                    running.append(nxt)
        plan = plan_task(due, now, GRACE, active=bool(running))
        planned, _ = _overlap("buffer_one", plan.occurrences, bool(running), bool(queue))
        for item in planned:
            rows[item.scheduled_for] = [item.scheduled_for, item.state, None, None, item.detail]
            if item.state == "claimed":
                rows[item.scheduled_for][1:4] = ["running", now, now + run_for]
                running.append(item.scheduled_for)
            elif item.state == "queued":
                queue.append(item.scheduled_for)
        if plan.next_run_at is not None:
            due.next_run_at = plan.next_run_at
        now += step
    return [tuple(rows[slot]) for slot in sorted(rows)]


def test_a_3s_task_every_1s_never_overlaps_and_runs_the_buffered_slot_at_the_end() -> None:
    rows = simulate(run_for=3 * S, every=S, until=T0 + 20 * S)
    ran = [r for r in rows if r[1] == "running"]
    skipped = [r for r in rows if r[1] == "skipped"]
    assert len(ran) >= 6 and skipped and all(r[4] == FULL for r in skipped)
    for before, after in itertools.pairwise(ran):
        assert after[2] >= before[3]  # never side by side
    # After the first run each run starts exactly when the one before ended: the buffered
    # slot, with no gap.
    assert all(after[2] == before[3] for before, after in itertools.pairwise(ran))
    # Slots run in order; every slot is either run or skipped, none lost, none twice.
    assert [r[0] for r in ran] == sorted(r[0] for r in ran)
    assert len(rows) == len({r[0] for r in rows}) == 20


@pytest.mark.parametrize("value", ["buffer_one"])
def test_the_choice_is_accepted_by_spec_cli_and_toml(store_target, tmp_path, value) -> None:
    spec = build_spec({"name": "b", "every": "1s", "concurrency": value, "command": ["true"]}, T0)
    assert spec.concurrency == "buffer_one"
    db = store_target
    done = cli("task", "add", "b", "--every", "1s", "--concurrency", value, "--", "true", db=db)
    assert done.returncode == 0, done.stderr
    listed = cli("task", "list", db=db).stdout
    assert "buffer_one" in listed
    toml = tmp_path / "tickui.toml"
    toml.write_text(
        f'[[task]]\nname = "c"\nevery = "1s"\nconcurrency = "{value}"\ncommand = ["true"]\n'
    )
    from tickui.runtime import settings as config_mod

    assert config_mod.load(toml, T0).tasks[0].concurrency == "buffer_one"
    bad = cli(
        "task", "add", "d", "--every", "1s", "--concurrency", "buffer_two", "--", "true", db=db
    )
    assert bad.returncode == 2 and "buffer_one" in bad.stderr


@pytest.mark.slow
def test_real_runs_a_3s_task_every_1s_never_overlap_and_the_buffered_slot_follows_at_once(
    tmp_path,
) -> None:
    """`tickui run` with real processes: each run writes its slot and the time it
    started and ended (from the process itself, not the engine)."""
    db, out = tmp_path / "t.db", tmp_path / "out.txt"
    script = (
        f'echo "start $TICKUI_SCHEDULED_FOR $(date +%s.%N)" >> {out}; sleep 3;'
        f' echo "end $TICKUI_SCHEDULED_FOR $(date +%s.%N)" >> {out}'
    )
    add = ("task", "add", "b", "--every", "1s", "--concurrency", "buffer_one")
    assert cli(*add, "--", "sh", "-c", script, db=db).returncode == 0
    done = cli("run", "--for", "11", db=db, timeout=60)
    assert done.returncode == 0, done.stderr
    times: dict[str, dict[str, float]] = {}
    for line in out.read_text().splitlines():
        what, slot, at = line.split()
        times.setdefault(slot, {})[what] = float(at)
    runs = sorted((t["start"], t.get("end"), slot) for slot, t in times.items())
    assert len(runs) >= 3, runs
    for (_, end, _), (start, _, _) in itertools.pairwise(runs):
        assert end is not None and start >= end, "two runs side by side"
    history = cli_json("history", "b", db=db)
    # Every run after the first is the buffered slot: the engine starts it as it sees the one
    # before end, not on a later tick (timed by the engine's own records: the processes'
    # clocks would add shell start-up and exit on a loaded machine)
    started = sorted((o for o in history if o["started_at"]), key=lambda o: o["started_at"])
    for before, after in itertools.pairwise(started):
        gap = (parse_instant(after["started_at"]) - parse_instant(before["finished_at"])) / MICROS
        # a tick is a second: a quarter of one tells "at once" from "on the next tick" for
        # three pairs in four (and the runs make several pairs), and leaves a loaded
        # machine's process start room
        assert 0 <= gap < 0.25, f"{after['scheduled_for']} started {gap:.3f} s after the run before"
    skipped = [o for o in history if o["state"] == "skipped"]
    assert skipped and {o["detail"] for o in skipped} == {FULL}
    assert sum(o["state"] == "queued" for o in history) <= 1
    ran = sorted(o["scheduled_for"] for o in history if o["started_at"])
    assert ran == sorted(slot for slot in times)  # the runs the processes saw, in slot order


async def test_with_retries_at_most_one_run_waits(store_target, tmp_path) -> None:
    """Found by an adversarial try: a buffered slot and a retry waited side by side. A
    waiting retry is the one that waits; a run ending failed while a slot waits is not
    retried (the waiting slot runs next)."""
    gate = tmp_path / "go"
    cmd = ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done; exit 1"]
    async with rig(store_target) as r:
        await r.add("b", every="1m", command=cmd, concurrency="buffer_one", anchor=iso(RIG_T0),
                    retries=2, retry_delay="5m")  # fmt: skip
        await r.engine.start()
        await r.tick(0.001)  # slot 0 runs (and waits on the gate)
        await r.tick(60)  # slot 60 waits: buffered
        await r.tick(1)
        assert [(o.kind, o.attempt) for o in await r.store.queued_of()] == [("scheduled", 1)]
        gate.touch()  # slot 0 fails: a slot waits already, so no retry
        await r.settle()
        waiting = await r.store.queued_of()
        assert [(o.scheduled_for, o.attempt) for o in waiting] == [(RIG_T0 + 60 * MICROS, 1)]
        await r.tick(0.001)  # slot 60 starts and fails: nothing waits, so it is retried
        await r.settle()
        (retry,) = await r.store.queued_of()
        assert (retry.scheduled_for, retry.attempt) == (RIG_T0 + 60 * MICROS, 2)
        await r.tick(59)  # slot 120 while the retry waits (5m): the buffer is full
        runs = await r.history("b")
        assert [(o.scheduled_for - RIG_T0) // MICROS for o in runs if o.attempt > 1] == [60]
        skipped = [o for o in runs if o.state == "skipped"]
        assert [o.detail for o in skipped] == ["concurrency_buffer_full"]
        assert len(await r.store.queued_of()) == 1
