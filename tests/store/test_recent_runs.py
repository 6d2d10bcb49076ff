"""The history grid's read: each task's newest occurrences, for many tasks in one query,
on both stores; it reads an index range per task, never the whole history."""

from __future__ import annotations

from tickui.common.timeutil import MICROS
from tickui.model.spec import build_spec
from tickui.store import Queued, Store

T0 = 1_800_000_000 * MICROS
S = MICROS


async def _seeded(target) -> tuple[Store, dict[str, int]]:
    """Tasks a (7 runs), b (2 runs) and c (none), their rows interleaved by id."""
    store = await Store.open(target)
    ids = {}
    for name in ("a", "b", "c"):
        spec = build_spec({"name": name, "every": "1m", "command": ["true"]}, T0)
        ids[name] = (await store.add_task(spec, T0)).id
    items = []
    for k in range(7):
        items.append(Queued(ids["a"], "a", "scheduled", T0 + k * 60 * S, 0))
        if k < 2:
            items.append(Queued(ids["b"], "b", "scheduled", T0 + k * 60 * S, 0))
    await store.queue_occurrences(items, T0)
    return store, ids


async def test_each_tasks_newest_runs_newest_first(store_target):
    store, ids = await _seeded(store_target)
    try:
        found = await store.recent_runs([ids["a"], ids["b"], ids["c"], 9999], 3)
        assert set(found) == {ids["a"], ids["b"]}  # no runs, no entry
        slots = {t: [(o.scheduled_for - T0) // (60 * S) for o in runs] for t, runs in found.items()}
        assert slots == {ids["a"]: [6, 5, 4], ids["b"]: [1, 0]}
        assert all(o.task == "a" for o in found[ids["a"]])
        whole = await store.recent_runs([ids["a"]], 100)
        assert [o.id for o in whole[ids["a"]]] == sorted((o.id for o in whole[ids["a"]]),
                                                         reverse=True)  # fmt: skip
        assert len(whole[ids["a"]]) == 7
        assert await store.recent_runs([], 5) == {}
        assert await store.recent_runs([ids["a"]], 0) == {}
    finally:
        await store.close()


async def test_recent_runs_read_an_index_range_per_task(tmp_path):
    """SQLite's plan: the shown tasks, then occurrences(task_id, id) from the oldest kept
    id: no scan of the occurrences."""
    from tickui.store import reads

    store, _ = await _seeded(tmp_path / "t.db")
    try:
        plan = await store._all("EXPLAIN QUERY PLAN " + reads.RECENT_OF, ["[1, 2]", 2])
        details = " | ".join(row[-1] for row in plan)
        assert "SEARCH o USING INDEX occurrences_task_id (task_id=? AND id>?)" in details, details
        assert "SCAN o" not in details and "SCAN occurrences" not in details, details
    finally:
        await store.close()
