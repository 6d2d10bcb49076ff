"""Queued occurrences: rows that exist but wait to start (a retry until its retry_at,
buffer_one's waiting slot, a backfill's slots). The engine's scan takes the due ones under
the lease, exactly once (`take_queued`). A run that ends is followed up in the same
transaction that records its end (`watch_settling` / `after_settling`): a failure with
attempts left queues the next attempt; a slot's last failure counts towards pause_after.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

import aiosqlite

from tickui.model import retries
from tickui.model.audit import Actor
from tickui.model.occurrence import TERMINAL
from tickui.model.records import OCCURRENCE_COLUMNS, Occurrence, occurrence_from_row
from tickui.model.spec import TaskSpec
from tickui.store.abc import Queued
from tickui.store.audit import write_audit
from tickui.store.base import _ACTIVE_SQL, StoreBase, _chunks

_O_SELECT = "SELECT " + ", ".join(f"o.{c}" for c in OCCURRENCE_COLUMNS) + " FROM occurrences o"
# A queued row whose task is gone, disabled or changed since it was queued: cancelled.
_STALE = "(t.id IS NULL OR t.enabled = 0 OR t.generation <> o.generation)"
_DUE = "coalesce(o.retry_at, o.scheduled_for) <= ?"


class QueueQueries(StoreBase):
    """Queued occurrences: queue, find the due ones, take them under the lease."""

    async def queue_occurrences(self, items: Sequence[Queued], now: int) -> list[int]:
        """Insert `items` as `queued` rows in one transaction; returns their ids. A slot
        (task, scheduled_for, attempt) of kind scheduled or backfill that exists already
        (not skipped) is left out, so queueing it twice queues it once."""
        ids: list[int] = []
        async with self._write():
            for item in items:
                new = await insert_queued(self._conn, item, now)
                if new is not None:
                    ids.append(new)
        return ids

    async def due_queued(self, now: int, limit: int = 1000) -> list[Occurrence]:
        """Queued rows due at `now`, and any whose task is gone, disabled or changed,
        oldest slot first (scheduled_for, attempt, id)."""
        rows = await self._all(
            f"{_O_SELECT} LEFT JOIN tasks t ON t.id = o.task_id"
            f" WHERE o.state = 'queued' AND ({_DUE} OR {_STALE})"
            " ORDER BY o.scheduled_for, o.attempt, o.id LIMIT ?",
            (now, limit),
        )
        return [occurrence_from_row(row) for row in rows]

    async def has_due_queued(self, now: int) -> bool:
        row = await self._one(
            "SELECT EXISTS (SELECT 1 FROM occurrences o LEFT JOIN tasks t ON t.id = o.task_id"
            f" WHERE o.state = 'queued' AND ({_DUE} OR {_STALE}))",
            (now,),
        )
        return bool(row[0])

    async def take_queued(
        self,
        start: Sequence[int],
        skip: Sequence[tuple[int, str]],
        cancel: Sequence[tuple[int, str]],
        owner: str,
        token: int,
        now: int,
    ) -> list[Occurrence]:
        """In one transaction under the lease: move `start` rows from queued to claimed
        (only those still queued whose task is enabled and unchanged: each at most once,
        whoever tries), record `skip` (id, detail) skipped and `cancel` cancelled.
        Returns the claimed occurrences, to dispatch."""
        started: list[int] = []
        async with self._write():
            await self._check_lease(owner, token, now)
            for occ_id in start:
                cursor = await self._conn.execute(
                    "UPDATE occurrences SET state = 'claimed', claimed_at = ?, owner = ?,"
                    " lease_token = ?, command_id = coalesce(command_id, 'cmd-' || id)"
                    " WHERE id = ? AND state = 'queued' AND EXISTS (SELECT 1 FROM tasks t"
                    " WHERE t.id = occurrences.task_id AND t.enabled = 1"
                    " AND t.generation = occurrences.generation)",
                    (now, owner, token, occ_id),
                )
                if cursor.rowcount == 1:
                    started.append(occ_id)
            for state, items in (("skipped", skip), ("cancelled", cancel)):
                for occ_id, detail in items:
                    cursor = await self._conn.execute(
                        f"UPDATE occurrences SET state = '{state}', finished_at = ?, detail = ?"
                        " WHERE id = ? AND state = 'queued'",
                        (now, detail, occ_id),
                    )
                    if state == "skipped" and cursor.rowcount == 1:
                        await _count_skipped_retry(self._conn, occ_id, now)
        return await self.occurrences_by_id(started)

    async def cancel_queued_occurrence(
        self, occ_id: int, now: int, detail: str, *, actor: Actor | None = None
    ) -> bool:
        """Cancel one queued occurrence (a user's cancel); False when it is not queued."""
        async with self._write():
            cursor = await self._conn.execute(
                "UPDATE occurrences SET state = 'cancelled', finished_at = ?, detail = ?"
                " WHERE id = ? AND state = 'queued'",
                (now, detail, occ_id),
            )
            done = cursor.rowcount == 1
            if done and actor is not None:
                row = await self._one("SELECT task FROM occurrences WHERE id = ?", (occ_id,))
                await write_audit(
                    self._conn, actor, "cancel", row[0], now, "queued run", occurrence_id=occ_id
                )
        return done

    async def requeue(self, ids: Sequence[int]) -> None:
        """Rows taken from the queue that could not be started (the lease was lost): back
        to queued, for whichever engine holds the lease."""
        if not ids:
            return
        async with self._write():
            await self._conn.executemany(
                "UPDATE occurrences SET state = 'queued', owner = NULL, lease_token = NULL"
                " WHERE id = ? AND state = 'claimed'",
                [(occ_id,) for occ_id in ids],
            )

    async def cancel_queued(self, task_id: int, now: int, detail: str) -> int:
        """Cancel every queued row of a task (it was disabled, edited or removed)."""
        async with self._write():
            return await cancel_task_queue(self._conn, task_id, now, detail)

    async def queued_of(self, task_ids: Sequence[int] | None = None) -> list[Occurrence]:
        """Queued rows (of `task_ids`, when given), oldest slot first."""
        where, params = "state = 'queued'", []
        if task_ids is not None:
            params = list(task_ids)
            if not params:
                return []
            where += f" AND task_id IN ({','.join('?' * len(params))})"
        rows = await self._all(
            f"{_O_SELECT} WHERE {where} ORDER BY o.scheduled_for, o.attempt, o.id", params
        )
        return [occurrence_from_row(row) for row in rows]

    async def pending_counts(self) -> tuple[int, int]:
        """Active and queued occurrences, each counted on its partial index."""
        active = await self._one(f"SELECT count(*) FROM occurrences WHERE state IN {_ACTIVE_SQL}")
        queued = await self._one("SELECT count(*) FROM occurrences WHERE state = 'queued'")
        return active[0], queued[0]

    async def failures_of(self, task_id: int) -> int:
        """The task's count of consecutive failed slots (for pause_after)."""
        row = await self._one("SELECT failures FROM tasks WHERE id = ?", (task_id,))
        return row[0] if row else 0


async def insert_queued(conn: aiosqlite.Connection, item: Queued, now: int) -> int | None:
    """Insert one queued row inside the caller's write transaction; None when its slot
    and attempt exist already (kinds scheduled and backfill)."""
    cursor = await conn.execute(
        "INSERT OR IGNORE INTO occurrences (task_id, task, kind, scheduled_for, state,"
        " claimed_at, covers, detail, generation, attempt, retry_of, retry_at)"
        " VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?)",
        (
            item.task_id,
            item.task,
            item.kind,
            item.scheduled_for,
            now,
            item.covers,
            item.detail,
            item.generation,
            item.attempt,
            item.retry_of,
            item.retry_at,
        ),
    )
    return cursor.lastrowid if cursor.rowcount == 1 else None


async def cancel_task_queue(conn: aiosqlite.Connection, task_id: int, now: int, detail: str) -> int:
    """Inside the caller's write transaction: cancel a task's queued rows."""
    cursor = await conn.execute(
        "UPDATE occurrences SET state = 'cancelled', finished_at = ?, detail = ?"
        " WHERE task_id = ? AND state = 'queued'",
        (now, detail, task_id),
    )
    return cursor.rowcount


@functools.lru_cache(maxsize=4096)
def _policy(spec_text: str) -> retries.Policy:
    return TaskSpec.from_json(spec_text).retry_policy


async def watch_settling(
    conn: aiosqlite.Connection, failing: Sequence[int], succeeding: Sequence[int] = ()
) -> list[int]:
    """Inside a write transaction, before it settles runs as failed (`failing`) or
    succeeded (`succeeding`): those still active that need a follow-up, so that
    `after_settling` follows up exactly the runs this transaction ends. A failure needs
    one when its task retries, pauses or counts failures; a success only when its task
    has failures to reset. Tasks that use neither cost this one indexed query."""
    watched: list[int] = []
    wanted = (
        (failing, "t.failures > 0 OR json_extract(t.spec, '$.retries') > 0"
         " OR json_extract(t.spec, '$.pause_after') IS NOT NULL"),
        (succeeding, "t.failures > 0"),
    )  # fmt: skip
    for ids, needs in wanted:
        if not ids:
            continue
        rows = await conn.execute_fetchall(  # the ids as one JSON array: one query a batch
            "SELECT o.id FROM occurrences o JOIN tasks t ON t.id = o.task_id"
            " WHERE o.id IN (SELECT value FROM json_each(?))"
            f" AND o.state IN {_ACTIVE_SQL} AND ({needs})",
            (json.dumps(list(ids)),),
        )
        watched.extend(row[0] for row in rows)
    return watched


async def after_settling(conn: aiosqlite.Connection, watched: Sequence[int]) -> None:
    """Inside the same write transaction, after it settled the `watched` runs: queue the
    next attempt of each retryable failure with attempts left; count each slot's final
    outcome (its last attempt) towards the task's pause_after, pausing it when reached."""
    rows: list[Any] = []
    for chunk in _chunks(list(watched), 900):
        marks = ",".join("?" * len(chunk))
        rows.extend(
            await conn.execute_fetchall(
                "SELECT o.id, o.task_id, o.task, o.kind, o.scheduled_for, o.state,"
                " o.error_code, coalesce(o.finished_at, o.claimed_at), o.attempt, o.retry_of,"
                " o.generation, o.covers, t.spec, t.enabled, t.generation, t.failures"
                " FROM occurrences o JOIN tasks t ON t.id = o.task_id"
                f" WHERE o.id IN ({marks})",
                chunk,
            )
        )
    failures: dict[int, int] = {}  # task id -> its count as this batch goes
    stored_counts: dict[int, int] = {}
    for row in sorted(rows):
        (occ_id, task_id, name, kind, slot, state, code, finished, attempt, retry_of) = row[:10]
        generation, covers, spec_text, enabled, task_generation, stored = row[10:]
        if state not in TERMINAL:
            continue
        policy = _policy(spec_text)
        stored_counts.setdefault(task_id, stored)
        count = failures.get(task_id, stored)
        if policy.inert and not count:
            continue
        current = bool(enabled) and generation == task_generation
        first = retry_of or occ_id
        retry_at = (
            retries.next_retry(policy, state, code, attempt, first, finished) if current else None
        )
        if retry_at is not None and await _no_retry_now(conn, task_id, kind, spec_text, first):
            retry_at = None
        if retry_at is not None:
            item = Queued(task_id, name, kind, slot, generation, retry_at, attempt + 1, first)
            item.covers = covers
            exists = await conn.execute_fetchall(
                "SELECT 1 FROM occurrences WHERE task_id = ? AND id > ? AND retry_of = ?"
                " AND attempt = ?",
                (task_id, occ_id, first, attempt + 1),
            )
            if not exists:
                await insert_queued(conn, item, finished)
            continue
        if kind == "manual" or not current:
            continue
        count, pause = retries.count_failures(count, state, policy.pause_after)
        failures[task_id] = count
        if pause:
            await _pause(conn, task_id, count, code, finished)
    changed = [(n, t) for t, n in failures.items() if n != stored_counts[t]]
    if changed:
        await conn.executemany("UPDATE tasks SET failures = ? WHERE id = ?", changed)


async def _no_retry_now(
    conn: aiosqlite.Connection, task_id: int, kind: str, spec_text: str, first: int
) -> bool:
    """A retry that must not be queued although attempts are left: a backfill run whose
    backfill was cancelled meanwhile (its waiting slots were, so is its retry); under
    buffer_one, a run whose task already has a run waiting (at most one waits)."""
    if kind == "backfill":
        rows = await conn.execute_fetchall(
            "SELECT 1 FROM occurrences c WHERE c.task_id = ? AND c.kind = 'backfill'"
            " AND c.state = 'cancelled' AND c.detail = 'backfill cancelled' AND c.finished_at"
            " >= (SELECT claimed_at FROM occurrences WHERE id = ?) LIMIT 1",
            (task_id, first),
        )
        return bool(rows)
    if _concurrency(spec_text) == "buffer_one":
        rows = await conn.execute_fetchall(
            "SELECT 1 FROM occurrences WHERE task_id = ? AND state = 'queued'"
            " AND kind <> 'backfill' LIMIT 1",
            (task_id,),
        )
        return bool(rows)
    return False


@functools.lru_cache(maxsize=4096)
def _concurrency(spec_text: str) -> str:
    return TaskSpec.from_json(spec_text).concurrency


async def _pause(conn: aiosqlite.Connection, task_id: int, count: int, code: str | None, at: int):
    """pause_after reached: disable the task with its note; cancel what it has queued."""
    await conn.execute(
        "UPDATE tasks SET enabled = 0, note = ?, failures = ?, updated_at = ? WHERE id = ?",
        (retries.pause_note(count, code), count, at, task_id),
    )
    await cancel_task_queue(conn, task_id, at, "task paused")


async def _count_skipped_retry(conn: aiosqlite.Connection, occ_id: int, now: int) -> None:
    """A retry skipped as missed ends its slot failed (its previous attempt failed): it
    counts towards pause_after like a slot whose last attempt failed."""
    rows = await conn.execute_fetchall(
        "SELECT o.task_id, t.spec, t.failures, p.error_code FROM occurrences o"
        " JOIN tasks t ON t.id = o.task_id AND t.generation = o.generation AND t.enabled = 1"
        " JOIN occurrences p ON p.task_id = o.task_id AND p.attempt = o.attempt - 1"
        " AND (p.id = o.retry_of OR p.retry_of = o.retry_of)"
        " WHERE o.id = ? AND o.retry_of IS NOT NULL AND o.kind <> 'manual'",
        (occ_id,),
    )
    if not rows:
        return
    task_id, spec_text, stored, code = rows[0]
    count, pause = retries.count_failures(stored, "failed", _policy(spec_text).pause_after)
    await conn.execute("UPDATE tasks SET failures = ? WHERE id = ?", (count, task_id))
    if pause:
        await _pause(conn, task_id, count, code, now)
