"""The engine on each store (a real SQLite file, a real PostgreSQL database) with real
subprocesses, steered by a manual clock."""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
from pathlib import Path

import pytest

from helpers import T0, rig, wait_for
from tickui.common.timeutil import MICROS
from tickui.engine import EngineChange, RunNowRefused
from tickui.model.occurrence import RUN_FAILED
from tickui.model.planning import DueTask, Plan, Planned
from tickui.store import LeaseLost, NewEvent

SLOW = [sys.executable, "-c", "import time; time.sleep(30)"]


async def test_each_slot_runs_once_and_settles_from_events(store_target, tmp_path):
    out = tmp_path / "out.txt"
    async with rig(store_target) as r:
        await r.add(
            "hello", every="1s", command=["sh", "-c", f"echo $TICKUI_SCHEDULED_FOR >> {out}"]
        )
        await r.engine.start()
        await r.settle()
        for _ in range(4):
            await r.tick(1)
            await r.settle()
        runs = await r.history("hello")
        assert [o.scheduled_for for o in runs] == [T0 + k * MICROS for k in range(5)]
        assert all(o.state == "succeeded" and o.exit_code == 0 for o in runs), [
            (o.state, o.exit_code, o.error_code, o.detail) for o in runs
        ]
        assert all(o.claimed_at <= o.accepted_at <= o.started_at <= o.finished_at for o in runs), [
            (o.claimed_at, o.accepted_at, o.started_at, o.finished_at) for o in runs
        ]
        assert len(out.read_text().splitlines()) == 5
        task = await r.store.get_task("hello")
        assert task.next_run_at == T0 + 5 * MICROS


async def test_failure_codes_are_stored(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add("exit3", every="1m", command=["sh", "-c", "echo boom >&2; exit 3"])
        await r.add("nosuch", every="1m", command=[str(tmp_path / "missing-binary")])
        await r.add("slow", every="1m", timeout="300ms", command=SLOW)
        await r.engine.start()
        await r.settle()
        by_task = {o.task: o for o in await r.history()}
        assert by_task["exit3"].state == "failed"
        assert by_task["exit3"].error_code == "EXIT_NONZERO"
        assert by_task["exit3"].exit_code == 3
        assert "boom" in by_task["exit3"].detail
        assert by_task["nosuch"].error_code == "DISPATCH_FAILED"
        assert "No such file" in by_task["nosuch"].detail
        assert by_task["nosuch"].started_at is None
        assert by_task["slow"].error_code == "TIMEOUT"
        assert by_task["slow"].state == "failed"


async def test_finished_run_wakes_the_engine_without_a_tick(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add("quick", every="1h", command=["sh", "-c", "sleep 0.2"])
        settled = asyncio.Event()

        def on_change(change: EngineChange) -> None:
            if change.occurrences:
                settled.set()

        await r.engine.start()
        assert (await r.history())[0].state == "running"
        r.engine.subscribe(on_change)
        await asyncio.wait_for(settled.wait(), 5)
        assert (await r.history())[0].state == "succeeded"


async def test_terminal_states_never_change(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add("ok", every="1h")
        await r.engine.start()
        await r.settle()
        occ = (await r.history())[0]
        assert occ.state == "succeeded"
        late = NewEvent(
            r.clock.now(),
            RUN_FAILED,
            occ.command_id,
            occ.run_id,
            {"error_code": "EXIT_NONZERO", "exit_code": 9},
        )
        await r.store.append_events([late])
        await r.engine.reconcile()
        again = await r.store.get_occurrence(occ.id)
        assert again.state == "succeeded" and again.exit_code == 0


@pytest.mark.parametrize("policy", ["run_once", "skip", "run_all"])
async def test_misfire_after_downtime(tmp_path, policy):
    db = tmp_path / "t.db"
    async with rig(db) as r:
        await r.add("m", every="10s", misfire=policy, command=["true"])
        await r.engine.start()
        await r.settle()
    # Down for 60 s: the slots at +10 .. +60 passed without an engine; +60 is still on time.
    async with rig(db, start=T0 + 62 * MICROS) as r:
        await r.engine.start()
        await r.settle()
        runs = (await r.history("m"))[1:]
        task = await r.store.get_task("m")
        if policy != "run_all":
            assert task.next_run_at == T0 + 70 * MICROS
        if policy == "run_once":
            assert len(runs) == 1
            assert runs[0].scheduled_for == T0 + 60 * MICROS
            assert runs[0].covers == 6 and runs[0].missed == 5
            assert runs[0].state == "succeeded"
        elif policy == "skip":
            assert [(o.state, o.scheduled_for) for o in runs] == [
                ("skipped", T0 + 10 * MICROS),
                ("succeeded", T0 + 60 * MICROS),
            ]
            assert runs[0].missed == 5
        else:
            # forbid (the default) catches up one slot per scan, never two at once
            assert [o.scheduled_for for o in runs] == [T0 + 10 * MICROS]
            assert task.next_run_at == T0 + 20 * MICROS
            for _ in range(5):
                await r.tick(0)
                await r.settle()
            runs = (await r.history("m"))[1:]
            assert [o.scheduled_for for o in runs] == [T0 + k * 10 * MICROS for k in range(1, 7)]
            assert [o.detail for o in runs[:5]] == ["misfire_late"] * 5
            assert all(o.state == "succeeded" for o in runs)
            assert all(a.finished_at <= b.started_at for a, b in itertools.pairwise(runs))


async def test_run_all_caps_at_100(tmp_path):
    db = tmp_path / "t.db"
    async with rig(db) as r:
        await r.add("m", every="1s", misfire="run_all", concurrency="allow", command=["true"])
        await r.engine.start()
        await r.settle()
    async with rig(
        db, start=T0 + 300 * MICROS + 500_000, misfire_grace=0, tick_period=100_000
    ) as r:
        await r.engine.start()
        await r.settle(30)
        runs = (await r.history("m"))[1:]
        skipped = [o for o in runs if o.state == "skipped"]
        ran = [o for o in runs if o.state != "skipped"]
        assert len(ran) == 100
        assert [o.scheduled_for for o in ran] == [T0 + k * MICROS for k in range(201, 301)]
        assert len(skipped) == 1 and skipped[0].missed == 200


@pytest.mark.parametrize("policy", ["forbid", "allow", "replace"])
async def test_overlap_policies(store_target, tmp_path, policy):
    async with rig(store_target) as r:
        await r.add("slow", every="1s", concurrency=policy, command=SLOW)
        await r.engine.start()
        await r.tick(1)
        settled = {
            "forbid": ("running", "skipped"),
            "allow": ("running", "running"),
            "replace": ("cancelled", "running"),
        }[policy]

        async def both() -> bool:
            await r.engine.reconcile()
            return tuple(o.state for o in await r.history("slow")) == settled

        await wait_for(both, what=f"{settled}")
        first, second = await r.history("slow")
        if policy == "forbid":
            assert first.state == "running"
            assert second.state == "skipped" and second.detail == "concurrency_forbid"
        elif policy == "allow":
            assert first.state == "running" and second.state == "running"
        else:
            assert first.state == "cancelled" and first.detail == "replaced"
            assert second.state == "running"
            assert not _alive(first.pid)


def _claim_plan(task, slot: int) -> Plan:
    """A plan to run `slot` of `task`, made from the task as it was read."""
    due = DueTask(task.id, task.name, task.schedule, slot, "run_once", "forbid", 0, task.generation)
    return Plan(due, slot + MICROS, [Planned(slot, "claimed")])


async def _running_in(r, task: str) -> bool:
    """Whether `task`'s newest occurrence is running, after folding the events in."""
    await r.engine.reconcile()
    runs = await r.history(task)
    return bool(runs) and runs[-1].state == "running"


def _alive(pid: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, TypeError):
        return False
    return True


async def test_run_now_is_manual_and_does_not_move_the_schedule(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add("job", every="1h", command=["true"])
        await r.engine.start()
        await r.settle()
        before = await r.store.get_task("job")
        occ = await r.engine.run_now("job")
        await r.settle()
        after = await r.store.get_task("job")
        assert occ.kind == "manual"
        assert (await r.store.get_occurrence(occ.id)).state == "succeeded"
        assert after.next_run_at == before.next_run_at


async def test_run_now_refusals_are_typed_and_stored(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add("off", every="1h", disabled=True)
        await r.add("busy", every="1h", command=SLOW)
        await r.engine.start()
        with pytest.raises(RunNowRefused) as disabled:
            await r.engine.run_now("off")
        assert disabled.value.code == "TASK_DISABLED"
        with pytest.raises(RunNowRefused) as forbid:
            await r.engine.run_now("busy")
        assert forbid.value.code == "CONCURRENCY_FORBID"
        reasons = await r.store._all("SELECT task, outcome, reason FROM requests ORDER BY id")
        assert [(t, o) for t, o, _ in reasons] == [("off", "refused"), ("busy", "refused")]
        assert reasons[0][2].startswith("TASK_DISABLED")


async def test_run_now_request_from_another_process_is_picked_up(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add("job", every="1h")
        await r.engine.start()
        await r.settle()  # the first slot's run ends first: under `forbid` it would refuse
        task = await r.store.get_task("job")
        request = await r.store.add_request(task, "run_now", r.clock.now())
        await r.tick(1)
        outcome, occ_id, _ = await r.store.request(request)
        assert outcome == "started"
        assert (await r.store.get_occurrence(occ_id)).kind == "manual"


async def test_disabled_slots_are_not_misfires(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add("job", every="10s", misfire="run_all")
        await r.engine.start()
        await r.settle()
        await r.store.set_enabled("job", False, r.clock.now(), note="maintenance")
        assert (await r.store.get_task("job")).note == "maintenance"
        await r.tick(100)
        await r.store.set_enabled("job", True, r.clock.now())
        await r.tick(0)
        assert len(await r.history("job")) == 1
        await r.tick(10)
        await r.settle()
        runs = await r.history("job")
        assert [o.scheduled_for for o in runs] == [T0, T0 + 110 * MICROS]
        assert runs[-1].missed == 0


async def test_second_engine_is_standby_and_fencing_rejects_old_tokens(tmp_path):
    db = tmp_path / "t.db"
    async with rig(db) as a, rig(db) as b:
        await a.add("job", every="1s")
        await a.engine.start()
        await b.engine.start()
        assert a.engine.status().lease_state == "held"
        status = b.engine.status()
        assert status.lease_state == "standby" and status.holder == a.engine.owner
        assert status.result == "standby"
        old_token = a.engine._lease.token
        # a's lease runs out (say its process froze): b takes over with a new token.
        b.clock.advance(31)
        await b.engine.tick(b.clock.now())
        assert b.engine.status().lease_state == "held"
        assert b.engine._lease.token == old_token + 1
        task = await a.store.get_task("job")
        plan = _claim_plan(task, task.next_run_at)
        with pytest.raises(LeaseLost):
            await a.store.claim([plan], a.engine.owner, old_token, b.clock.now())


async def test_a_slot_is_never_claimed_twice(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add("job", every="1s")
        await r.engine.start()
        await r.settle()
        task = await r.store.get_task("job")
        token = r.engine._lease.token
        # Move the task back onto a slot that already ran (a clock stepped backwards).
        async with r.store._write():
            await r.store._conn.execute(
                "UPDATE tasks SET next_run_at = ?, due_at = ? WHERE id = ?", (T0, T0, task.id)
            )
        stale = await r.store.get_task("job")
        plan = _claim_plan(stale, T0)
        claimed = await r.store.claim([plan], r.engine.owner, token, r.clock.now())
        assert claimed == []
        assert [o.scheduled_for for o in await r.history("job")] == [T0]


async def test_a_generation_bump_voids_a_stale_plan(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add("job", every="1s")
        await r.engine.start()
        await r.settle()
        task = await r.store.get_task("job")
        async with r.store._write():
            await r.store._conn.execute(
                "UPDATE tasks SET generation = generation + 1 WHERE id = ?", (task.id,)
            )
        plan = _claim_plan(task, task.next_run_at)
        assert (
            await r.store.claim([plan], r.engine.owner, r.engine._lease.token, r.clock.now()) == []
        )


async def test_recovery_interrupts_runs_of_a_vanished_engine(tmp_path):
    db, began = tmp_path / "t.db", tmp_path / "began"
    async with rig(db) as a:
        slow = ["sh", "-c", f"touch {began}; exec sleep 30"]
        await a.add("slow", every="1h", command=slow)
        await a.engine.start()
        await wait_for(lambda: _running_in(a, "slow"), what="slow running")
        # "running" is recorded as the command is let go: a crash before it took the go
        # leaves a run that never began (recorded so). This one must have begun.
        await wait_for(began.exists, what="the command to begin")
        orphan = (await a.history("slow"))[0]
        assert orphan.state == "running" and _alive(orphan.pid)
        a.engine._running = False  # a "crash": nothing is stopped or released
        a.engine.dispatcher._runs.clear()
    async with rig(db, start=T0 + 31 * MICROS) as b:
        await b.engine.start()
        recovered = await b.store.get_occurrence(orphan.id)
        assert recovered.state == "failed" and recovered.error_code == "INTERRUPTED"
        # settled from the run's journal: its supervisor ended it (stopped with what was
        # left of the engine, or fenced), and said so
        assert recovered.detail.startswith(f"engine {orphan.owner} is gone; its run was ")
        await wait_for(lambda: not _alive(orphan.pid) or _zombie(orphan.pid), what="orphan gone")


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


async def test_stop_cancels_runs_after_the_grace(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add("slow", every="1h", command=SLOW)
        await r.engine.start()
        await wait_for(lambda: _running_in(r, "slow"), what="slow running")
        await r.engine.stop(grace=0.2)
        occ = (await r.history("slow"))[0]
        assert occ.state == "cancelled" and occ.detail == "engine_stopped"
        assert not _alive(occ.pid)
        assert (await r.store.lease()).expires_at <= r.clock.now()


async def test_history_is_pruned_with_events_and_logs(store_target, tmp_path):
    async with rig(store_target, keep=3, prune_every=0) as r:
        await r.add("job", every="1s", command=["sh", "-c", "echo hi"])
        await r.engine.start()
        await r.settle()
        for _ in range(6):
            await r.tick(1)
            await r.settle()
        await r.tick(0)
        runs = await r.history("job")
        assert [o.scheduled_for for o in runs] == [T0 + k * MICROS for k in (4, 5, 6)]
        logs = sorted(p.name for p in r.store.log_dir.iterdir() if p.suffix != ".lease")
        assert logs == sorted(f"{o.id}.{kind}" for o in runs for kind in ("journal", "log"))
        commands = {row[0] for row in await r.store._all("SELECT DISTINCT command_id FROM events")}
        assert commands == {o.command_id for o in runs}


async def test_runs_get_cwd_env_and_a_private_log_file(store_target, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    script = 'pwd; echo "$GREETING $TICKUI_TASK $TICKUI_KIND $TICKUI_SCHEDULED_FOR"'
    async with rig(store_target) as r:
        await r.add(
            "env",
            every="1h",
            cwd=str(work),
            env={"GREETING": "hello"},
            command=["sh", "-c", script],
        )
        await r.engine.start()
        await r.settle()
        (occ,) = await r.history("env")
        log = occ.log_path
        assert log and os.stat(log).st_mode & 0o077 == 0
        lines = Path(log).read_text().splitlines()
        assert lines == [str(work), "hello env scheduled 2027-01-15T08:00:00+00:00"]


async def test_a_user_can_cancel_a_running_occurrence(store_target, tmp_path):
    async with rig(store_target) as r:
        await r.add("slow", every="1h", command=SLOW)
        await r.engine.start()
        await wait_for(lambda: _running_in(r, "slow"), what="slow running")
        (occ,) = await r.history("slow")
        assert occ.state == "running"
        assert await r.engine.cancel(occ.id) is True
        (occ,) = await r.history("slow")
        assert occ.state == "cancelled" and occ.detail == "cancelled_by_user"
        assert not _alive(occ.pid)
        assert await r.engine.cancel(occ.id) is False  # nothing left to cancel


async def test_the_wal_is_checkpointed_after_a_burst_not_inside_it(tmp_path):
    """SQLite's own checkpoints (10 to 12 ms each) fell inside a burst's commits; the
    engine folds the WAL in at the first quiet scan after work, once."""
    async with rig(tmp_path / "t.db") as r:
        calls = []
        real = r.store.checkpoint

        async def checkpoint() -> None:
            calls.append(r.clock.now())
            await real()

        r.store.checkpoint = checkpoint  # type: ignore[method-assign]
        for n in range(20):
            await r.add(f"t{n}", every="1m")
        wal = (await r.store._one("PRAGMA wal_autocheckpoint"))[0]
        assert wal >= 10_000, "SQLite would checkpoint inside the burst's commits"
        await r.engine.start()
        await r.tick(0)
        await r.settle()
        assert calls == [], "checkpointed while there was work"
        await r.tick(1)  # quiet: every run has settled
        await r.tick(1)
        await r.tick(1)
        assert len(calls) == 1
