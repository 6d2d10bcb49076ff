"""The runtime event log: facts appended by whoever watches a run, and the reads that
let reconcile move each active occurrence by the events after its cursor."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from tickui.model.coordination import RemoteOutput
from tickui.model.occurrence import RUN_TRANSITION, TERMINAL, Change, Progress, RuntimeEvent
from tickui.store.abc import NewEvent
from tickui.store.base import _ACTIVE_SQL, StoreBase, json_batch, json_rows
from tickui.store.queue import after_settling, watch_settling


class EventLog(StoreBase):
    """Runtime events and reconcile's reads and writes."""

    # ---- runtime events and reconcile -------------------------------------------------

    async def append_events(self, events: Sequence[NewEvent]) -> int:
        """Append events; one whose event_id is stored already is dropped (a redelivery).
        Returns how many were stored."""
        if not events:
            return 0
        rows = [_row(e) for e in events]
        own = self._own
        try:
            async with self._write():
                before = self._conn.total_changes
                if own.start is None or not self._own_events:
                    await self._batch(_APPEND, _APPEND_BATCH, rows)
                    stored = self._conn.total_changes - before
                else:  # in order, under the write lock: the seqs end at the last row's
                    cursor = await self._conn.execute(*json_batch(_APPEND_BATCH, rows))
                    stored = self._conn.total_changes - before
                    if stored == len(rows):
                        own.appended(cursor.lastrowid, rows, [_payload(row[4]) for row in rows])
                    else:  # some were stored before: which seqs are whose is not known
                        own.reset()
        except BaseException:
            own.reset()  # undone, or not known to be stored: their seqs may be given again
            raise
        if stored:
            for listener in list(self._listeners):
                listener()
        return stored

    async def remote_output(self, occurrence_id: int) -> RemoteOutput | None:
        """What the worker that ran an occurrence reported of its output: the tail from
        its last outcome event (empty while it runs) and its log path. None when no worker
        reported on it (a local run, or not started yet)."""
        row = await self._one(
            "SELECT command_id, worker, log_path FROM occurrences WHERE id = ?", (occurrence_id,)
        )
        if row is None or not row[0]:
            return None
        events = await self._all(
            "SELECT type, payload FROM events WHERE command_id = ? AND event_id IS NOT NULL"
            " ORDER BY seq",
            (row[0],),
        )
        worker, log_path, tail, found = row[1], row[2], "", False
        for kind, text in events:
            payload = _payload(text)
            named = payload.get("worker")
            if isinstance(named, str) and named:
                worker, found = worker or named, True
            if kind == RUN_TRANSITION:
                path = payload.get("log_path")
                if isinstance(path, str) and path:
                    log_path = path
            elif isinstance(payload.get("tail"), str):
                tail, found = payload["tail"], True
        if not found and not row[1]:
            return None
        return RemoteOutput(tail=tail, worker=worker or "?", log_path=log_path)

    async def unreconciled(
        self, after_id: int = 0, limit: int = 500
    ) -> tuple[list[tuple[Progress, list[RuntimeEvent]]], int | None]:
        """One page of active occurrences (ids above `after_id`), each with the
        events after its cursor, in order; and the id to continue after (None at the end)."""
        own = self._own
        start = own.start if self._own_events else None
        if start is None:
            page = await self._all(_PAGE, (after_id, limit))
        else:  # with, seen in the same read, what the events table holds after `start`
            page = await self._all(_PAGE_AND_EVENTS, (start, after_id, limit))
        if not page:
            return [], None
        after = page[-1][0] if len(page) == limit else None
        if start is not None:
            if after_id == 0 and after is None:  # every active run: the others ended
                own.only(row[0] for row in page)
            held = own.events_for(page, *page[0][5:8])
            if held is not None:
                pairs = zip(page, held, strict=True)
                return [(Progress(*row[:5]), events) for row, events in pairs if events], after
        progress = {row[0]: (Progress(*row[:5]), []) for row in page}
        cols = "o.id, e.seq, e.at, e.command_id, e.run_id, e.type, e.payload, e.causation_id"
        scope = (
            "WITH o AS (SELECT id, command_id, run_id, event_cursor FROM occurrences"
            f" WHERE state IN {_ACTIVE_SQL} AND id BETWEEN ? AND ?)"
        )
        # Indexed ways an event is ours: it names our command (events_command); it names
        # no command but our run (events_run) or, as ksadk's runtime writes, our command
        # as its causation (events_causation); or it names no command but a run that one
        # of our new transitions binds (so a run bound and finished between two reconciles
        # settles in one). An event found twice is kept once. CROSS JOIN keeps SQLite
        # from starting at the events (say, every event with no command id).
        bound = (
            " AND t.seq > o.event_cursor AND t.run_id IS NOT NULL"
            f" AND t.type = '{RUN_TRANSITION}' CROSS JOIN events e ON e.run_id = t.run_id"
            " AND e.seq > t.seq AND e.command_id IS NULL"
        )
        rows = await self._all(
            f"{scope} SELECT {cols} FROM o JOIN events e"
            " ON e.command_id = o.command_id AND e.seq > o.event_cursor"
            f" UNION ALL SELECT {cols} FROM o JOIN events e ON e.run_id = o.run_id"
            " AND e.seq > o.event_cursor AND e.command_id IS NULL"
            f" UNION ALL SELECT {cols} FROM o JOIN events e ON e.causation_id = o.command_id"
            " AND e.seq > o.event_cursor AND e.command_id IS NULL"
            f" UNION ALL SELECT {cols} FROM o CROSS JOIN events t ON t.command_id = o.command_id"
            f"{bound}"
            f" UNION ALL SELECT {cols} FROM o CROSS JOIN events t ON t.causation_id = o.command_id"
            f" AND t.command_id IS NULL{bound}"
            " ORDER BY 1, 2",
            (page[0][0], page[-1][0]),
        )
        for row in rows:
            entry = progress.get(row[0])
            if entry is not None and not (entry[1] and entry[1][-1].seq == row[1]):
                entry[1].append(RuntimeEvent(*row[1:6], _payload(row[6]), row[7]))
        found = [entry for entry in progress.values() if entry[1]]
        return found, after

    async def apply_changes(self, changes: Sequence[Change]) -> None:
        """Write reconcile's results; the state guard keeps terminal states immutable."""
        shapes: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        for change in changes:
            fields = change.fields  # grouped by its keys in their order: no sort per change
            row = (change.state, change.cursor, *fields.values(), change.id)
            shapes.setdefault(tuple(fields), []).append(row)
        if not shapes:
            return
        failing = [change.id for change in changes if change.state == "failed"]
        succeeding = [change.id for change in changes if change.state == "succeeded"]
        async with self._write():
            watched = await watch_settling(self._conn, failing, succeeding)
            for keys, rows in shapes.items():
                await self._batch(*_change_statements(keys), rows)
            if watched:  # retries and pause_after, in the transaction that ends the runs
                await after_settling(self._conn, watched)
        self._own.settled(change.id for change in changes if change.state in TERMINAL)

    async def state_counts(self) -> dict[str, int]:
        rows = await self._all("SELECT state, count(*) FROM occurrences GROUP BY state")
        return {state: count for state, count in rows}

    async def last_event_seq(self) -> int:
        return (await self._one("SELECT coalesce(max(seq), 0) FROM events"))[0]


_PAGE = (
    "SELECT id, state, command_id, run_id, event_cursor FROM occurrences"
    f" WHERE state IN {_ACTIVE_SQL} AND id > ? ORDER BY id LIMIT ?"
)
_PAGE_AND_EVENTS = (  # one read: the page, and the events' count, last seq and data version
    "SELECT id, state, command_id, run_id, event_cursor,"
    " (SELECT count(*) FROM events WHERE seq > ?), (SELECT coalesce(max(seq), 0) FROM events),"
    " (SELECT data_version FROM pragma_data_version) FROM occurrences"
    f" WHERE state IN {_ACTIVE_SQL} AND id > ? ORDER BY id LIMIT ?"
)
_EVENT_COLUMNS = ("at", "command_id", "run_id", "type", "payload", "causation_id", "event_id")
_APPEND = (
    f"INSERT OR IGNORE INTO events ({', '.join(_EVENT_COLUMNS)})"
    f" VALUES ({','.join('?' * len(_EVENT_COLUMNS))})"
)
_APPEND_BATCH = (
    f"INSERT OR IGNORE INTO events ({', '.join(_EVENT_COLUMNS)})"
    f" SELECT {', '.join(_EVENT_COLUMNS)} FROM {json_rows(_EVENT_COLUMNS)}"
)


@functools.lru_cache(maxsize=256)
def _change_statements(keys: tuple[str, ...]) -> tuple[str, str]:
    """The UPDATE that writes changes setting `keys`: one row at a time, and a batch's
    rows at once (StoreBase._batch). The state guard keeps terminal states immutable."""
    sets = "".join(f", {key} = ?" for key in keys)
    many = (
        f"UPDATE occurrences SET state = coalesce(?, state), event_cursor = ?{sets}"
        f" WHERE id = ? AND state IN {_ACTIVE_SQL}"
    )
    columns = ("new_state", "cursor", *(f"v_{key}" for key in keys), "id")
    sets = "".join(f", {key} = b.v_{key}" for key in keys)
    one = (
        "UPDATE occurrences SET state = coalesce(b.new_state, occurrences.state),"
        f" event_cursor = b.cursor{sets} FROM {json_rows(columns)} AS b"
        f" WHERE occurrences.id = b.id AND occurrences.state IN {_ACTIVE_SQL}"
    )
    return many, one


def _row(e: NewEvent) -> tuple[Any, ...]:
    """An event as stored. A runtime that puts the run id or the causation id in the
    payload (as ksadk's does for transitions) gets them in their indexed columns too. An
    empty id is no id (ksadk reads a missing one as ""): stored as NULL, so an event with
    `command_id=""` is still matched by its causation id or its run."""
    payload = e.payload if isinstance(e.payload, dict) else {}
    run_id = _id(e.run_id) or _id(payload.get("run_id"))
    causation_id = _id(e.causation_id) or _id(payload.get("causation_id"))
    return (
        e.at,
        _id(e.command_id),
        run_id,
        e.type,
        _dumps(e.payload),
        causation_id,
        e.event_id or None,
    )


def _id(value: Any) -> str | None:
    if type(value) is str:  # the usual case, first (one event per run start and end)
        return value or None
    if value is None or isinstance(value, bool) or not isinstance(value, str | int):
        return None
    return str(value) or None


_encode = json.JSONEncoder().encode  # what json.dumps(value) does with no options


def _dumps(value: Any) -> str:
    """A payload as stored. A run's end says `{"exit_code": N}`: a payload of one string
    key and an int or a string is encoded once per distinct content (no bool or float:
    1, True and 1.0 are one key to a cache, not to JSON)."""
    if type(value) is dict and len(value) == 1:
        ((key, item),) = value.items()
        kind = type(item)
        if type(key) is str and (kind is int or kind is str):
            return _one_item(key, item)
    return _encode(value)


@functools.lru_cache(maxsize=1024)
def _one_item(key: str, item: int | str) -> str:
    return _encode({key: item})


@functools.lru_cache(maxsize=4096)
def _payload(text: str) -> dict[str, Any]:
    """Event payloads repeat (`{"exit_code": 0}`); parse each text once. Read-only.
    Anything but a JSON object reads as an empty payload."""
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
