"""Every method of the store contract, called on each store with the same inputs, answers
the same: the SQL both stores share is exercised whole, so a spelling one database does
not take (an ambiguous column, a function it lacks) fails here, not in production.

The calls follow one plausible life: tasks, claims, runs, events, retries, backfill, the
lease, requests, hooks, workers. Times are a manual clock's."""

from __future__ import annotations

import dataclasses

from tickui.common.timeutil import MICROS
from tickui.model.occurrence import RUN_COMPLETED, RUN_TRANSITION
from tickui.model.planning import DueTask, Plan, Planned
from tickui.model.spec import build_spec
from tickui.store import Beat, NewEvent, Queued, Store

T0 = 1_800_000_000 * MICROS
S = MICROS


def _spec(name: str, **fields):
    return build_spec({"name": name, "every": "1m", "command": ["true"], **fields}, T0)


def _plan(task, slot: int) -> Plan:
    due = DueTask(task.id, task.name, task.schedule, slot, "run_once", "forbid", 0, task.generation)
    return Plan(due, slot + 60 * S, [Planned(slot, "claimed")])


def _plain(value):
    """A value as compared across stores: dataclasses as dicts, sets sorted."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted(_plain(v) for v in value)
    return value


async def _life(target) -> dict[str, object]:
    said: dict[str, object] = {}
    store = await Store.open(target)
    try:
        owner, now = "host:1:abc", T0
        got = await store.acquire_lease(owner, now, 3600 * S, ("host", 1, 1), lambda *_: False)
        token = got.lease.token
        said["lease"] = await store.lease()
        said["renew"] = await store.renew_lease(owner, token, now, 3600 * S)
        a = await store.add_task(_spec("a", retries=2, pause_after=3), now)
        b = await store.add_task(_spec("b-long.name"), now)
        said["find"] = await store.find_task("a")
        said["get"] = await store.get_task("b-long.name")
        said["list"] = await store.list_tasks()
        said["by_id"] = await store.tasks_by_id([a.id, b.id])
        said["versions"] = await store.task_versions()
        said["disable"] = await store.set_enabled("b-long.name", False, now, note="why")
        said["enable"] = await store.set_enabled("b-long.name", True, now + 1)
        said["edit"] = await store.edit_task("b-long.name", _spec("b-long.name", every="2m"), now)
        said["sync"] = await store.sync_tasks([_spec("a", retries=2, pause_after=3),
                                               _spec("c")], now)  # fmt: skip
        said["due"] = await store.due_task_ids(now + 3600 * S)
        said["has_work"] = await store.scan_has_work(now + 3600 * S)
        a = await store.get_task("a")
        slot = a.next_run_at
        claimed = await store.claim([_plan(a, slot)], owner, token, slot)
        said["claim"] = claimed
        said["again"] = await store.claim_one_by_one([_plan(a, slot)], owner, token, slot)
        manual = await store.claim_manual(await store.get_task("c"), owner, token, slot)
        said["manual"] = manual
        ids = [o.id for o in claimed] + [manual.id]
        await store.mark_accepted([(i, f"run-{i}", None) for i in ids], slot)
        said["active"] = await store.active_occurrences()
        said["by_ids"] = await store.occurrences_by_id(ids)
        said["one"] = await store.get_occurrence(ids[0])
        said["newest"] = await store.newest_occurrences(10, task_text="LONG", states=["claimed"])
        said["newest_all"] = await store.newest_occurrences(10, 0, task_id=a.id)
        cmd = claimed[0].command_id
        said["appended"] = await store.append_events([
            NewEvent(slot, RUN_TRANSITION, cmd, "run-x", {"state": "running", "pid": 5}),
            NewEvent(slot + S, RUN_COMPLETED, cmd, "run-x", {"exit_code": 0}, event_id="e1"),
            NewEvent(slot + S, RUN_COMPLETED, cmd, "run-x", {"exit_code": 0}, event_id="e1"),
        ])  # fmt: skip
        said["last_seq"] = await store.last_event_seq()
        pending, after = await store.unreconciled(0, 10)
        said["unreconciled"] = (len(pending), after, [len(e) for _, e in pending])
        said["remote"] = await store.remote_output(ids[0])
        await store.set_deadlines([(manual.id, slot + 60 * S, "w1")])
        await store.set_workers([(manual.id, "w1")])
        said["remote_active"] = await store.remote_active()
        said["started"] = await store.started_commands([cmd, "nope"])
        said["by_command"] = await store.occurrences_by_command([manual.command_id])
        await store.fail_occurrences([(manual.id, "EXIT_NONZERO", "boom")], slot + 2 * S)
        said["failures"] = await store.failures_of((await store.get_task("c")).id)
        said["history"] = await store.history(None, 50)
        said["state_counts"] = await store.state_counts()
        said["pending_counts"] = await store.pending_counts()
        said["stats"] = await store.task_stats()
        said["miss"] = await store.miss_reasons(a.id)
        queued = await store.queue_occurrences(
            [Queued(a.id, "a", "scheduled", slot, a.generation, retry_at=slot + 5 * S, attempt=2,
                    retry_of=claimed[0].id)], slot)  # fmt: skip
        said["queued"] = queued
        said["due_queued"] = await store.due_queued(slot + 10 * S)
        said["has_due_queued"] = await store.has_due_queued(slot + 10 * S)
        said["queued_of"] = await store.queued_of([a.id])
        said["recent"] = await store.recent_runs([a.id, manual.task_id, 9999], 2)
        said["take"] = await store.take_queued(queued, [], [], owner, token, slot + 10 * S)
        back = await store.queue_backfill("c", [slot - 120 * S, slot - 60 * S], slot)
        said["backfill"] = back
        said["cancel_one"] = await store.cancel_queued_occurrence(back[0][0], slot, "x")
        await store.requeue([])
        said["cancel_backfill"] = await store.cancel_backfill("c", slot)
        said["cancel_queued"] = await store.cancel_queued(a.id, slot, "gone")
        said["foreign"] = await store.foreign_active(token + 1)
        said["released"] = await store.release_unstarted(ids, slot, "lost", running=True)
        said["seq"] = await store.reserve_sequence("ticks", 10, 5)
        await store.release_sequence("ticks", said["seq"], 12)
        said["seq2"] = await store.reserve_sequence("ticks", 0, 1)
        req = await store.add_request(a, "run_now", slot)
        said["requests"] = await store.pending_requests()
        await store.finish_request(req, slot, "started", ids[0], None)
        said["request"] = await store.request(req)
        said["hook_occ"] = await store.hook_occurrences(ids)
        said["previous"] = await store.previous_result(a.id, ids[0] + 100)
        said["last_failed"] = await store.last_failed((await store.get_task("c")).id)
        said["hook_tasks"] = await store.hook_tasks([a.id])
        d1 = await store.start_delivery("ops", "failed", "a", ids[0], slot)
        d2 = await store.start_delivery("ops", "paused", "a", None, slot)
        await store.finish_delivery(d1, slot + S, 1, "delivered", None)
        await store.fail_deliveries([d2], slot + S, "stopped")
        await store.record_undelivered([("ops", "failed", "a", None, slot)], slot, "full")
        said["stale"] = await store.fail_stale_deliveries(slot + 10 * S, slot + 10 * S, "stale")
        said["deliveries"] = await store.recent_deliveries(10)
        beats = [Beat("w1", "h1", 4, ["cmd-1"], "1", "alive", slot, "/l", "g", {"x": 1}),
                 Beat("w2", "h2", 2, [], "1", "lost", slot)]  # fmt: skip
        said["beats"] = await store.record_heartbeats(beats)
        said["beats_again"] = await store.record_heartbeats(beats)
        await store.record_dispatch_security("engine-1", False, "k1", {"forged": 2}, slot)
        said["security"] = await store.dispatch_security()
        said["workers"] = await store.list_workers()
        said["silent"] = await store.silent_workers(slot + S)
        said["alive"] = await store.alive_workers(slot - S)
        await store.mark_workers_lost(["w1"], slot + 2 * S)
        said["workers_after"] = await store.list_workers()
        said["pruned"] = await store.prune(keep=1)
        await store.remove_task("b-long.name", slot)
        said["after_remove"] = await store.list_tasks(with_stats=False)
        await store.release_lease(owner, token, slot)
        said["released_lease"] = await store.lease()
        await store.checkpoint()
        said["data_version"] = isinstance(await store.data_version(), int)
    finally:
        await store.close()
    return {k: _plain(v) for k, v in said.items()}


async def test_every_method_answers_the_same_on_both_stores(tmp_path, pg_url):
    on_file = await _life(tmp_path / "t.db")
    on_server = await _life(pg_url)
    differ = {k: (on_file[k], on_server[k]) for k in on_file if on_file[k] != on_server[k]}
    assert not differ, differ
