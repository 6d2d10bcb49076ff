"""Runtime events as ksadk's AgentControl writes them, settling occurrences the engine
dispatched (real SQLite file, manual clock, a dispatcher that only accepts).

ksadk's shape: the run's events name no command; `control.run_transition` carries the
command id as its `causation_id` (on the event, or in the payload with the run id), and
a failure nests its reason as `payload.error.{code, message}`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from helpers import T0, AcceptingDispatcher, Rig
from tickui.common.clock import ManualClock
from tickui.engine import EngineConfig, SchedulerEngine
from tickui.model.occurrence import DETAIL_MAX
from tickui.model.records import Occurrence
from tickui.store import NewEvent, Store

TRANSITION = "control.run_transition"


@asynccontextmanager
async def ksadk_rig(db: Path, **config) -> AsyncIterator[Rig]:
    store = await Store.open(db)
    clock = ManualClock(T0)
    engine = SchedulerEngine(store, AcceptingDispatcher(), clock, EngineConfig(**config))
    try:
        await engine.start()
        yield Rig(store, clock, engine)
    finally:
        await engine.stop(grace=0)
        await store.close()


async def accepted(r: Rig, name: str) -> Occurrence:
    """A manual run of a fresh task, dispatched and reconciled to `accepted`."""
    await r.add(name, every="1h")
    occ = await r.engine.run_now(name)
    await r.engine.reconcile()
    occ = await r.store.get_occurrence(occ.id)
    assert occ.state == "accepted" and occ.command_id
    return occ


async def report(r: Rig, *events: NewEvent) -> None:
    await r.store.append_events(list(events))
    await r.engine.reconcile()


def ev(r: Rig, type_: str, run_id: str | None, payload=None, causation: str | None = None):
    return NewEvent(r.clock.now(), type_, None, run_id, payload or {}, causation_id=causation)


async def test_nested_error_settles_failed_with_code_and_redacted_bounded_message(tmp_path):
    async with ksadk_rig(tmp_path / "t.db") as r:
        occ = await accepted(r, "agent")
        r.clock.advance(1)
        await report(r, ev(r, TRANSITION, "run-1", {"state": "running"}, occ.command_id))
        running = await r.store.get_occurrence(occ.id)
        assert (running.state, running.run_id, running.started_at) == (
            "running",
            "run-1",
            r.clock.now(),
        )
        r.clock.advance(2)
        message = "tool call failed: password=hunter2 " + "x" * 5000
        # The run's own events name only the run, as ksadk's do.
        await report(
            r, ev(r, "run.failed", "run-1", {"error": {"code": "TOOL_TIMEOUT", "message": message}})
        )
        done = await r.store.get_occurrence(occ.id)
        assert (done.state, done.error_code) == ("failed", "TOOL_TIMEOUT")
        assert done.detail.startswith("tool call failed: password=")
        assert "hunter2" not in done.detail
        assert len(done.detail) == DETAIL_MAX
        assert done.finished_at == r.clock.now()


async def test_causation_alone_binds_and_settles_an_unbound_run(tmp_path):
    async with ksadk_rig(tmp_path / "t.db") as r:
        occ = await accepted(r, "agent")
        other = await accepted(r, "other")
        # No transition seen: a completion naming a run and our command as its cause.
        await report(r, ev(r, "run.completed", "run-7", {}, occ.command_id))
        done = await r.store.get_occurrence(occ.id)
        assert (done.state, done.run_id, done.exit_code) == ("succeeded", "run-7", 0)
        assert (await r.store.get_occurrence(other.id)).state == "accepted"


async def test_causation_and_run_id_in_the_payload_and_canceled_ends_cancelled(tmp_path):
    async with ksadk_rig(tmp_path / "t.db") as r:
        occ = await accepted(r, "agent")
        payload = {"run_id": "run-2", "causation_id": occ.command_id, "state": "waiting"}
        await report(r, ev(r, TRANSITION, None, payload))
        bound = await r.store.get_occurrence(occ.id)
        assert (bound.state, bound.run_id) == ("running", "run-2")
        error = {"code": "USER_CANCELED", "message": "stopped from the console"}
        await report(r, ev(r, "run.canceled", "run-2", {"error": error}))
        done = await r.store.get_occurrence(occ.id)
        assert (done.state, done.error_code, done.detail) == (
            "cancelled",
            "USER_CANCELED",
            "stopped from the console",
        )


async def test_cancelled_spelling_and_flat_fields_still_settle(tmp_path):
    async with ksadk_rig(tmp_path / "t.db") as r:
        a = await accepted(r, "a")
        b = await accepted(r, "b")
        await report(
            r,
            ev(r, "run.cancelled", "run-a", {}, a.command_id),
            ev(
                r,
                "run.failed",
                "run-b",
                {"error_code": "EXIT_NONZERO", "detail": "exit 3", "exit_code": 3},
                b.command_id,
            ),
        )
        a, b = await r.store.get_occurrence(a.id), await r.store.get_occurrence(b.id)
        assert a.state == "cancelled"
        assert (b.state, b.error_code, b.detail, b.exit_code) == (
            "failed",
            "EXIT_NONZERO",
            "exit 3",
            3,
        )


async def test_queued_transition_binds_only_then_run_events_settle(tmp_path):
    async with ksadk_rig(tmp_path / "t.db") as r:
        occ = await accepted(r, "agent")
        await report(r, ev(r, TRANSITION, "run-q", {"state": "queued"}, occ.command_id))
        bound = await r.store.get_occurrence(occ.id)
        assert (bound.state, bound.run_id) == ("accepted", "run-q")
        # From here on the run id alone finds it; interrupted keeps the nested code.
        await report(
            r,
            ev(
                r, "run.interrupted", "run-q", {"error": {"code": "WORKER_LOST", "message": "gone"}}
            ),
        )
        done = await r.store.get_occurrence(occ.id)
        assert (done.state, done.error_code, done.detail) == ("failed", "WORKER_LOST", "gone")


async def test_unknown_types_foreign_causes_and_late_events_change_nothing(tmp_path):
    async with ksadk_rig(tmp_path / "t.db") as r:
        occ = await accepted(r, "agent")
        await report(
            r,
            ev(r, "run.completed", "run-x", {}, "somebody-elses-command"),
            ev(r, "run.progress", "run-1", {"step": 3}, occ.command_id),
            ev(r, "control.heartbeat", None, ["not", "an", "object"], occ.command_id),
            ev(r, "run.failed", "run-1", {"error": "plain text reason"}, occ.command_id),
        )
        done = await r.store.get_occurrence(occ.id)
        assert (done.state, done.error_code, done.detail) == (
            "failed",
            "RUN_FAILED",
            "plain text reason",
        )
        assert done.event_cursor == await r.store.last_event_seq()
        # Terminal states never change, whatever comes after.
        await report(
            r,
            ev(r, "run.completed", "run-1", {}, occ.command_id),
            ev(r, TRANSITION, "run-1", {"state": "running"}, occ.command_id),
        )
        again = await r.store.get_occurrence(occ.id)
        assert (again.state, again.error_code, again.finished_at) == (
            "failed",
            "RUN_FAILED",
            done.finished_at,
        )


async def test_many_runs_settle_across_pages_through_the_causation_index(tmp_path):
    async with ksadk_rig(tmp_path / "t.db", batch=7) as r:
        occs = [await accepted(r, f"job-{i:02d}") for i in range(23)]
        events = []
        for i, occ in enumerate(occs):
            events.append(ev(r, TRANSITION, f"run-{i}", {"state": "running"}, occ.command_id))
        for i, occ in enumerate(occs):
            if i % 2:
                events.append(ev(r, "run.completed", f"run-{i}", {"exit_code": 0}))
            else:
                error = {"code": f"E{i}", "message": f"run {i} failed"}
                events.append(ev(r, "run.failed", f"run-{i}", {"error": error}, occ.command_id))
        await report(r, *events)
        for i, occ in enumerate(occs):
            done = await r.store.get_occurrence(occ.id)
            if i % 2:
                assert (done.state, done.run_id) == ("succeeded", f"run-{i}")
            else:
                assert (done.state, done.error_code, done.detail) == (
                    "failed",
                    f"E{i}",
                    f"run {i} failed",
                )
        # Every event is reached through an index, never by scanning the log.
        await accepted(r, "idle")
        queries: list[tuple[str, tuple]] = []
        read = r.store._all

        async def spy(sql, params=()):
            queries.append((sql, params))
            return await read(sql, params)

        r.store._all = spy
        await r.store.unreconciled()
        r.store._all = read
        sql, params = next(q for q in queries if "JOIN events" in q[0])
        plan = [row[-1] for row in await read("EXPLAIN QUERY PLAN " + sql, params)]
        assert any("USING INDEX events_causation" in step for step in plan)
        assert not [step for step in plan if step.startswith("SCAN") and step != "SCAN o"]


async def test_pruning_drops_the_events_of_pruned_runs(tmp_path):
    async with ksadk_rig(tmp_path / "t.db") as r:
        first = await accepted(r, "agent")
        await report(
            r,
            ev(r, TRANSITION, "run-old", {"state": "running"}, first.command_id),
            ev(r, "run.completed", "run-old"),
        )
        second = await r.engine.run_now("agent")
        await r.engine.reconcile()
        second = await r.store.get_occurrence(second.id)
        await report(r, ev(r, "run.completed", "run-new", {}, second.command_id))
        assert (await r.store.get_occurrence(second.id)).state == "succeeded"
        await r.store.prune(keep=1)
        left = await r.store._all("SELECT run_id FROM events ORDER BY seq")
        assert left == [("run-new",)]


async def test_empty_ids_as_ksadk_reads_them_still_bind_and_settle(tmp_path):
    """An adapter passing ksadk's "" for a missing command id (or cause) must not hide the
    event: "" is stored as no id, so the causation and the run still find the occurrence."""
    async with ksadk_rig(tmp_path / "t.db") as r:
        occ = await accepted(r, "agent")
        start = NewEvent(r.clock.now(), TRANSITION, "", "run-1", {"state": "running"},
                         causation_id=occ.command_id)  # fmt: skip
        await report(r, start)
        running = await r.store.get_occurrence(occ.id)
        assert (running.state, running.run_id) == ("running", "run-1")
        error = {"code": "USER_CANCELED", "message": "stopped by user"}
        await report(r, NewEvent(r.clock.now(), "run.canceled", "", "run-1", {"error": error},
                                 causation_id=""))  # fmt: skip
        done = await r.store.get_occurrence(occ.id)
        assert (done.state, done.error_code, done.detail) == (
            "cancelled",
            "USER_CANCELED",
            "stopped by user",
        )
