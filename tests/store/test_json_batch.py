"""A SQLite batch's columns that hold one value in every row are bound once (json_batch):
the rows stored are the rows given, whatever the mix of values and types."""

from __future__ import annotations

import asyncio
import json
import sqlite3

from tickui.common.timeutil import MICROS
from tickui.model.occurrence import RUN_COMPLETED
from tickui.store import NewEvent, Store
from tickui.store.base import json_batch
from tickui.store.events import _APPEND_BATCH

T0 = 1_800_000_000 * MICROS


def test_only_columns_of_one_value_and_one_type_are_bound_once():
    rows = [(1, "a", None, True, 7, {"k": 1}), (1, "a", None, 1, 7, {"k": 1})]
    query = (
        "SELECT * FROM (SELECT value ->> 0 AS p, value ->> 1 AS q, value ->> 2 AS r,"
        " value ->> 3 AS s, value ->> 4 AS t, value ->> 5 AS u FROM json_each(?)) WHERE t > ?"
    )
    sql, params = json_batch(query, rows, 5)
    conn = sqlite3.connect(":memory:")
    as_sent = conn.execute(query, (json.dumps(rows), 5)).fetchall()
    assert (
        conn.execute(sql, params).fetchall()
        == as_sent
        == [
            (1, "a", None, 1, 7, '{"k":1}'),
            (1, "a", None, 1, 7, '{"k":1}'),
        ]
    )
    conn.close()
    # True and 1 are equal to Python, not to JSON; a dict is not a value to bind
    assert sql == (
        "SELECT * FROM (SELECT ?2 AS p, ?3 AS q, ?4 AS r, value ->> 0 AS s, ?5 AS t,"
        " value ->> 1 AS u FROM json_each(?1)) WHERE t > ?"
    )
    assert params == ('[[true, {"k": 1}], [1, {"k": 1}]]', 1, "a", None, 7, 5)
    one = [(1, "a")]
    assert json_batch("SELECT value ->> 0 AS x FROM json_each(?)", one) == (
        "SELECT value ->> 0 AS x FROM json_each(?)",
        ('[[1, "a"]]',),
    )
    assert json_batch(_APPEND_BATCH, [])[0] == _APPEND_BATCH


def test_events_appended_in_a_batch_of_shared_values_are_stored_as_given(tmp_path):
    async def main():
        store = await Store.open(tmp_path / "t.db")
        events = [
            NewEvent(T0, RUN_COMPLETED, f"cmd-{i}", None, {"exit_code": 0}, None, f"e-{i}")
            for i in range(3)
        ] + [NewEvent(T0 + 1, "run.failed", "cmd-9", "run-9", {"exit_code": 2}, "cause")]
        assert await store.append_events(events[:3]) == 3
        assert await store.append_events(events) == 1  # the three again are dropped
        rows = await store._all(
            "SELECT at, command_id, run_id, type, payload, causation_id, event_id"
            " FROM events ORDER BY seq"
        )
        assert [tuple(row) for row in rows] == [
            (T0, "cmd-0", None, RUN_COMPLETED, '{"exit_code": 0}', None, "e-0"),
            (T0, "cmd-1", None, RUN_COMPLETED, '{"exit_code": 0}', None, "e-1"),
            (T0, "cmd-2", None, RUN_COMPLETED, '{"exit_code": 0}', None, "e-2"),
            (T0 + 1, "cmd-9", "run-9", "run.failed", '{"exit_code": 2}', "cause", None),
        ]
        await store.close()

    asyncio.run(main())
