"""Scanning and claiming due slots under the lease (one transaction per page), the
occurrence rows that result, their acceptance and direct failure, history and pruning."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from tickui.common.errors import NotFound
from tickui.model.occurrence import ACTIVE
from tickui.model.planning import Plan, due_time
from tickui.model.records import Occurrence, Task, occurrence_from_row
from tickui.store import reads
from tickui.store.abc import DEFAULT_KEEP, LeaseLost, ascii_lower
from tickui.store.base import _ACTIVE_SQL, _OCC_SELECT, StoreBase, _encode, json_rows
from tickui.store.queue import after_settling, watch_settling


class ClaimQueries(StoreBase):
    """Claims, occurrences and their history."""

    # ---- scanning and claiming -----------------------------------------------------------

    async def due_task_ids(self, now: int) -> list[int]:
        """Ids of the enabled tasks due at `now`: a snapshot, so a task a scan moves to a
        slot that is still due is not visited twice in that scan."""
        rows = await self._all(
            "SELECT id FROM tasks WHERE enabled = 1 AND due_at IS NOT NULL AND due_at <= ?"
            " ORDER BY due_at, id",
            (now,),
        )
        return [row[0] for row in rows]

    async def task_versions(self) -> dict[int, tuple[int, int | None, int, int]]:
        """Per task what a viewer compares to spot another process's change: updated_at,
        next_run_at, enabled and generation. One narrow scan, no definitions parsed."""
        rows = await self._all("SELECT id, updated_at, next_run_at, enabled, generation FROM tasks")
        return {row[0]: (row[1], row[2], row[3], row[4]) for row in rows}

    async def newest_occurrences(
        self,
        limit: int,
        after_id: int = 0,
        *,
        task_text: str | None = None,
        states: Sequence[str] | None = None,
        task_id: int | None = None,
    ) -> list[Occurrence]:
        """The newest `limit` occurrences with an id above `after_id`, newest first; only
        those whose task name holds `task_text` (ASCII case folded, as SQLite's lower()),
        whose state is in `states`, of task `task_id`, when given."""
        where, params = ["id > ?"], [after_id]
        if task_text:
            where.append("instr(lower(task), ?) > 0")
            params.append(ascii_lower(task_text))
        if states is not None:
            where.append(f"state IN ({','.join('?' * len(states))})")
            params.extend(states)
        if task_id is not None:
            where.append("task_id = ?")
            params.append(task_id)
        rows = await self._all(
            f"{_OCC_SELECT} WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?",
            (*params, limit),
        )
        return [occurrence_from_row(row) for row in rows]

    async def recent_runs(
        self, task_ids: Sequence[int], per_task: int
    ) -> dict[int, list[Occurrence]]:
        """Each task's newest `per_task` occurrences (retries, skipped and queued slots
        too), newest first, in one query: it costs the rows it returns, not the history."""
        if not task_ids or per_task < 1:
            return {}
        rows = await self._all(reads.RECENT_OF, (json.dumps(list(task_ids)), per_task - 1))
        found: dict[int, list[Occurrence]] = {}
        for row in rows:
            occ = occurrence_from_row(row)
            found.setdefault(occ.task_id, []).append(occ)
        return found

    async def active_occurrences(self) -> list[Occurrence]:
        rows = await self._all(f"{_OCC_SELECT} WHERE state IN {_ACTIVE_SQL} ORDER BY id")
        return [occurrence_from_row(row) for row in rows]

    async def claim(
        self, plans: Sequence[Plan], owner: str, token: int, now: int
    ) -> list[Occurrence]:
        """Advance each task and insert its planned occurrences, in one transaction.

        Each task row moves only if its generation, slot and enabled flag are what the
        plan was made from, and only while `token` still holds the lease. The unique
        slot key makes a second claim of a slot impossible whatever process tries.
        """
        if not plans:
            return []
        own = self._own if self._own_events else None
        runs: list[tuple[int, str]] = []
        try:
            async with self._write():
                query = _LEASE_AND_LAST if own is None else _LEASE_LAST_AND_EVENTS
                held, last, *events = await self._one(query, (owner, token, now))
                if held is None:
                    raise LeaseLost("the lease is no longer held by this engine")
                rows = _occurrence_rows(plans, last + 1, owner, token, now)
                advanced = (_ADVANCE_TASK, _ADVANCE_TASKS, [_advance(p) for p in plans])
                # the inserts go with the advance (undone with it when a plan is stale)
                writes = self._batches(advanced, *self._inserts(rows))
                if own is None:
                    moved, *inserted = await writes
                else:  # does an event name one of these commands already? (see appended.py)
                    runs = [(row[0], row[13]) for row in rows if row[4] == "claimed"]
                    named = self._one(_NAMED, (_encode([run[1] for run in runs]),))
                    (moved, *inserted), (found,) = await asyncio.gather(writes, named)
                for result in (moved, *inserted):
                    if isinstance(result, BaseException) and not isinstance(result, self._Conflict):
                        raise result
                if moved != len(plans) or any(isinstance(r, self._Conflict) for r in inserted):
                    raise _SlowPath
                if own is not None and not found:
                    own.claimed(runs, *events)
                else:
                    runs = []
        except _SlowPath:
            return await self.claim_one_by_one(plans, owner, token, now)
        except BaseException:
            if runs:
                own.unclaimed(run[0] for run in runs)
            raise
        return [_claimed(row) for row in rows]

    def _inserts(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The batches that insert _INSERT_OCC `rows`. As JSON, a run claimed on time (the
        usual row) is sent as its five columns of its own; the rest are the claim's."""
        if not self._json_batches:
            return [(_INSERT_OCC, _INSERT_OCCS, rows)]
        usual, others = [], []
        for row in rows:
            if row[4] == "claimed" and row[6:10] == (1, 0, None, None):
                usual.append((row[0], row[1], row[2], row[3], row[12]))
            else:
                others.append(row)
        batches: list[tuple[Any, ...]] = []
        if usual:
            owner, token, now = rows[0][10], rows[0][11], rows[0][5]
            batches.append((_INSERT_OCC, _INSERT_USUAL, usual, now, owner, token))
        if others:
            batches.append((_INSERT_OCC, _INSERT_OCCS, others))
        return batches

    async def claim_one_by_one(
        self, plans: Sequence[Plan], owner: str, token: int, now: int
    ) -> list[Occurrence]:
        """The careful path: each plan applies alone; stale plans and taken slots drop out."""
        ids: list[int] = []
        async with self._write():
            await self._check_lease(owner, token, now)
            next_id = (await self._one("SELECT coalesce(max(id), 0) FROM occurrences"))[0] + 1
            for plan in plans:
                cursor = await self._conn.execute(_ADVANCE_TASK, _advance(plan))
                if cursor.rowcount != 1:
                    continue
                for row in _occurrence_rows([plan], next_id, owner, token, now):
                    inserted = await self._conn.execute(_INSERT_OCC_IF_FREE, row)
                    if inserted.rowcount != 1:
                        continue  # that slot was claimed before: never twice
                    ids.append(row[0])
                    next_id += 1
        return await self.occurrences_by_id(ids)

    async def claim_manual(self, task: Task, owner: str, token: int, now: int) -> Occurrence:
        async with self._write():
            await self._check_lease(owner, token, now)
            cursor = await self._conn.execute(
                "INSERT INTO occurrences (task_id, task, kind, scheduled_for, state, claimed_at,"
                " owner, lease_token, generation, command_id)"
                " VALUES (?, ?, 'manual', ?, 'claimed', ?, ?, ?, ?, ?)",
                (task.id, task.name, now, now, owner, token, task.generation, None),
            )
            occ_id = cursor.lastrowid
            await self._conn.execute(
                "UPDATE occurrences SET command_id = ? WHERE id = ?", (f"cmd-{occ_id}", occ_id)
            )
        return (await self.occurrences_by_id([occ_id]))[0]

    async def get_occurrence(self, occ_id: int) -> Occurrence:
        found = await self.occurrences_by_id([occ_id])
        if not found:
            raise NotFound(f"no occurrence {occ_id}")
        return found[0]

    async def mark_accepted(
        self, items: Sequence[tuple[int, str | None, str | None]], now: int
    ) -> None:
        """Receipts from the dispatcher: (occurrence id, command id, log path)."""
        if not items:
            return
        async with self._write():
            await self._many(
                "UPDATE occurrences SET state = 'accepted', accepted_at = ?,"
                " command_id = coalesce(?, command_id),"
                " log_path = coalesce(?, log_path) WHERE id = ? AND state = 'claimed'",
                [(now, command_id, log, occ_id) for occ_id, command_id, log in items],
            )

    async def fail_occurrences(
        self, items: Sequence[tuple[int, str, str]], now: int, states: tuple[str, ...] = ACTIVE
    ) -> None:
        """Settle directly as failed: (id, error code, detail). Only for non-runtime facts."""
        if not items:
            return
        marks = "('" + "', '".join(states) + "')"
        async with self._write():
            watched = await watch_settling(self._conn, [item[0] for item in items])
            await self._conn.executemany(
                "UPDATE occurrences SET state = 'failed', finished_at = ?, error_code = ?,"
                f" detail = ? WHERE id = ? AND state IN {marks}",
                [(now, code, detail, occ_id) for occ_id, code, detail in items],
            )
            await after_settling(self._conn, watched)  # retries, pause_after

    # ---- history -------------------------------------------------------------------------

    async def history(self, task: str | None = None, limit: int = 50) -> list[Occurrence]:
        rows = await self._all(*reads.history_query(task, limit))
        return [occurrence_from_row(row) for row in rows]

    async def prune(self, keep: int = DEFAULT_KEEP) -> list[str]:
        """Keep the newest `keep` occurrences per task; drop older ones, their events and logs.

        Returns the log paths of pruned occurrences, for the caller to delete.
        """
        over = await self._all(
            "SELECT task_id FROM occurrences GROUP BY task_id HAVING count(*) > ?", (keep,)
        )
        logs: list[str] = []
        for (task_id,) in over:
            newest = (
                "SELECT id FROM occurrences WHERE task_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?"
            )
            cutoff = (await self._one(newest, (task_id, keep - 1)))[0]
            where = f"task_id = ? AND id < ? AND state NOT IN {_ACTIVE_SQL} AND state <> 'queued'"
            async with self._write():
                rows = await self._all(
                    f"SELECT command_id, log_path, run_id FROM occurrences WHERE {where}",
                    (task_id, cutoff),
                )
                commands = [(r[0],) for r in rows if r[0]]
                await self._conn.executemany("DELETE FROM events WHERE command_id = ?", commands)
                # A remote runtime's events name no command: its run, or (ksadk) the cause.
                await self._conn.executemany(
                    "DELETE FROM events WHERE causation_id = ? AND command_id IS NULL", commands
                )
                runs = [(r[2],) for r in rows if r[2]]
                await self._conn.executemany(
                    "DELETE FROM events WHERE run_id = ? AND command_id IS NULL", runs
                )
                await self._conn.execute(
                    f"DELETE FROM occurrences WHERE {where}", (task_id, cutoff)
                )
            logs.extend(r[1] for r in rows if r[1])
        if over:
            self._own.reset()  # events deleted: what it holds may no longer be in the table
        return logs

    async def miss_reasons(self, task_id: int) -> dict[str, tuple[int, int]]:
        """Why a task's slots were skipped or missed, from its kept history: per reason
        ("concurrency_forbid", "misfire_skipped", "misfire_late", ...: the first word of
        the occurrence's detail) the number of skipped occurrences and of missed slots."""
        rows = await self._all(
            "SELECT detail, state = 'skipped', missed > 1, count(*), sum(missed) FROM occurrences"
            " WHERE task_id = ? AND (state = 'skipped' OR missed > 0)"
            " GROUP BY detail, state = 'skipped', missed > 1",
            (task_id,),
        )
        found: dict[str, tuple[int, int]] = {}
        for detail, skipped, many, count, missed in rows:
            reason = (detail or "").split(":", 1)[0].split(" (", 1)[0].strip() or "unknown"
            if not skipped and not reason.startswith("misfire"):
                # a run that covered missed slots, its claim's detail replaced by how it
                # ended ("exit 3: ..."): what covered them was the misfire policy
                reason = "misfire_coalesced" if many else "misfire_late"
            before = found.get(reason, (0, 0))
            found[reason] = (before[0] + (count if skipped else 0), before[1] + (missed or 0))
        return found


_INSERT_USUAL = (  # the usual row (claimed, on time) in its five columns; command id by id
    "WITH b AS "
    + json_rows(("id", "task_id", "task", "scheduled_for", "generation"))
    + " INSERT INTO occurrences (kind, id, task_id, task, scheduled_for, generation, state,"
    " claimed_at, owner, lease_token, command_id) SELECT 'scheduled', id, task_id, task,"
    " scheduled_for, generation, 'claimed', ?, ?, ?, 'cmd-' || id FROM b"
)
# The claim's lease check and the id its rows number from, in one trip.
_LEASE_AND_LAST = (
    "SELECT (SELECT 1 FROM lease WHERE name = 'engine' AND owner = ? AND token = ?"
    " AND expires_at > ?), (SELECT coalesce(max(id), 0) FROM occurrences)"
)


# The same, with the events table's last seq and SQLite's data version (see appended.py).
_LEASE_LAST_AND_EVENTS = (
    _LEASE_AND_LAST + ", (SELECT coalesce(max(seq), 0) FROM events),"
    " (SELECT data_version FROM pragma_data_version)"
)
# Whether any event names one of a JSON array of command ids, as its command or (naming
# no command) as its cause: the ways reconcile matches a run with no run id yet.
_NAMED = (
    "SELECT EXISTS (SELECT 1 FROM json_each(?) j WHERE EXISTS (SELECT 1 FROM events e"
    " WHERE e.command_id = j.value) OR EXISTS (SELECT 1 FROM events e"
    " WHERE e.command_id IS NULL AND e.causation_id = j.value))"
)


class _SlowPath(Exception):
    """The batch claim met a stale plan or a taken slot; redo it one plan at a time."""


_ADVANCE_TASK = (
    "UPDATE tasks SET next_run_at = ?, due_at = ? WHERE id = ? AND generation = ?"
    " AND next_run_at = ? AND enabled = 1"
)
_INSERT_OCC = (
    "INSERT INTO occurrences (id, task_id, task, kind, scheduled_for, state, claimed_at, covers,"
    " missed, detail, finished_at, owner, lease_token, generation, command_id)"
    " VALUES (?, ?, ?, 'scheduled', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_OCC_IF_FREE = _INSERT_OCC.replace("INSERT INTO", "INSERT OR IGNORE INTO", 1)
# The same two, for a batch as one statement (StoreBase._batch).
_ADVANCE_TASKS = (
    "UPDATE tasks SET next_run_at = b.next_run_at, due_at = b.due_at FROM "
    + json_rows(("next_run_at", "due_at", "id", "generation", "was"))
    + " AS b WHERE tasks.id = b.id AND tasks.generation = b.generation"
    " AND tasks.next_run_at = b.was AND tasks.enabled = 1"
)
_OCC_COLUMNS = (
    "id, task_id, task, scheduled_for, state, claimed_at, covers, missed, detail,"
    " finished_at, owner, lease_token, generation, command_id"
)
_INSERT_OCCS = (
    f"INSERT INTO occurrences (kind, {_OCC_COLUMNS}) SELECT 'scheduled', {_OCC_COLUMNS} FROM "
    + json_rows(_OCC_COLUMNS.split(", "))
)


def _claimed(row: tuple[Any, ...]) -> Occurrence:
    """The Occurrence an _INSERT_OCC row makes, without reading it back. By position, in
    Occurrence's field order up to generation (keywords cost twice as much: a claim makes
    one per run)."""
    id_, task_id, task, scheduled_for, state, claimed_at, covers, missed, detail = row[:9]
    return Occurrence(
        id_,
        task_id,
        task,
        "scheduled",  # kind
        scheduled_for,
        state,
        claimed_at,
        covers,
        missed,
        None,  # accepted_at
        None,  # started_at
        row[9],  # finished_at
        None,  # exit_code
        None,  # error_code
        detail,
        row[13],  # command_id
        None,  # run_id
        row[10],  # owner
        row[11],  # lease_token
        None,  # pid
        None,  # pgid
        None,  # pid_start
        0,  # event_cursor
        row[12],  # generation
    )


def _advance(plan: Plan) -> tuple[Any, ...]:
    task = plan.task
    due = due_time(task, plan.next_run_at) if plan.next_run_at is not None else None
    return (plan.next_run_at, due, task.id, task.generation, task.next_run_at)


def _occurrence_rows(
    plans: Sequence[Plan], first_id: int, owner: str, token: int, now: int
) -> list[tuple[Any, ...]]:
    rows = []
    next_id = first_id
    for plan in plans:
        task = plan.task
        for item in plan.occurrences:
            finished = now if item.state == "skipped" else None
            rows.append(
                (
                    next_id,
                    task.id,
                    task.name,
                    item.scheduled_for,
                    item.state,
                    now,
                    item.covers,
                    item.missed,
                    item.detail,
                    finished,
                    owner,
                    token,
                    task.generation,
                    f"cmd-{next_id}",
                )
            )
            next_id += 1
    return rows
