"""Coordination between processes: the engine lease (with fencing), the ticker's
reserved sequence numbers, and run-now requests left for the lease holder."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from tickui.common.errors import NotFound
from tickui.model.audit import Actor
from tickui.model.coordination import Lease, LeaseResult, RunRequest
from tickui.model.records import Occurrence, Task, occurrence_from_row
from tickui.schedules.triggers import jitter_offset
from tickui.store.audit import settle_audited_request, write_audit
from tickui.store.base import _ACTIVE_SQL, _OCC_SELECT, StoreBase, _chunks


class Coordination(StoreBase):
    """The lease, sequence blocks and requests."""

    # ---- lease ---------------------------------------------------------------------------

    async def lease(self) -> Lease | None:
        row = await self._one(
            "SELECT owner, token, expires_at, host, pid FROM lease WHERE name = 'engine'"
        )
        return Lease(*row) if row else None

    async def acquire_lease(
        self,
        owner: str,
        now: int,
        ttl: int,
        identity: tuple[str, int, int | None],
        holder_gone: Callable[[str | None, int | None, int | None], bool],
    ) -> LeaseResult:
        """Take, renew or fail to get the lease. A holder proven dead loses it at once."""
        host, pid, pid_start = identity
        async with self._write():
            row = await self._one(
                "SELECT owner, token, expires_at, host, pid, pid_start FROM lease"
                " WHERE name = 'engine'"
            )
            if row is None:
                token = 1
                await self._conn.execute(
                    "INSERT INTO lease (name, owner, token, expires_at, host, pid, pid_start)"
                    " VALUES ('engine', ?, ?, ?, ?, ?, ?)",
                    (owner, token, now + ttl, host, pid, pid_start),
                )
                return LeaseResult(True, Lease(owner, token, now + ttl, host, pid), new=True)
            held_by, token, expires_at = row[0], row[1], row[2]
            if held_by == owner and expires_at > now:
                await self._conn.execute(
                    "UPDATE lease SET expires_at = ? WHERE name = 'engine'", (now + ttl,)
                )
                return LeaseResult(True, Lease(owner, token, now + ttl, host, pid))
            if expires_at > now and not holder_gone(row[3], row[4], row[5]):
                return LeaseResult(False, Lease(held_by, token, expires_at, row[3], row[4]))
            token += 1
            await self._conn.execute(
                "UPDATE lease SET owner = ?, token = ?, expires_at = ?, host = ?, pid = ?,"
                " pid_start = ? WHERE name = 'engine'",
                (owner, token, now + ttl, host, pid, pid_start),
            )
            return LeaseResult(True, Lease(owner, token, now + ttl, host, pid), new=True)

    async def renew_lease(self, owner: str, token: int, now: int, ttl: int) -> int | None:
        """Extend the lease only while `token` still holds it unexpired at `now`.

        Returns the new expiry, or None when the lease lapsed or changed hands: unlike
        `acquire_lease`, this never takes a lapsed lease back under a new token."""
        async with self._write():
            cursor = await self._conn.execute(
                "UPDATE lease SET expires_at = ? WHERE name = 'engine' AND owner = ?"
                " AND token = ? AND expires_at > ?",
                (now + ttl, owner, token, now),
            )
        return now + ttl if cursor.rowcount == 1 else None

    async def release_unstarted(
        self, ids: Sequence[int], now: int, detail: str, *, running: bool = False
    ) -> list[int]:
        """Occurrences claimed here that may no longer be started (the lease was lost).

        Each still `claimed` one (with `running`, also one recorded `running` whose run is
        known never to have started: its journal says so) is recorded `skipped` with
        `detail` (it never ran), and
        its scheduled slot is handed back to its task (unless the definition changed or
        the task already points earlier), so the lease holder's misfire policy decides
        about it. Returns the ids recorded."""
        if not ids:
            return []
        released: list[int] = []
        states = "('claimed', 'running')" if running else "('claimed')"
        async with self._write():
            for chunk in _chunks(list(ids), 500):
                marks = ",".join("?" * len(chunk))
                rows = await self._all(
                    "SELECT o.id, o.kind, o.scheduled_for, o.generation, t.id, t.name, t.spec"
                    " FROM occurrences o LEFT JOIN tasks t ON t.id = o.task_id"
                    f" WHERE o.id IN ({marks}) AND o.state IN {states}"
                    " ORDER BY o.scheduled_for",
                    chunk,
                )
                for occ_id, kind, slot, generation, task_id, name, spec in rows:
                    await self._conn.execute(
                        "UPDATE occurrences SET state = 'skipped', finished_at = ?, detail = ?"
                        f" WHERE id = ? AND state IN {states}",
                        (now, detail, occ_id),
                    )
                    released.append(occ_id)
                    if kind != "scheduled" or task_id is None:
                        continue
                    jitter = json.loads(spec).get("jitter", 0)
                    await self._conn.execute(
                        "UPDATE tasks SET next_run_at = ?, due_at = ? WHERE id = ?"
                        " AND generation = ? AND enabled = 1"
                        " AND (next_run_at IS NULL OR next_run_at > ?)",
                        (slot, slot + jitter_offset(name, slot, jitter), task_id, generation, slot),
                    )
        return released

    async def release_lease(self, owner: str, token: int, now: int) -> None:
        async with self._write():
            await self._conn.execute(
                "UPDATE lease SET expires_at = ? WHERE name = 'engine' AND owner = ? AND token = ?",
                (now, owner, token),
            )

    async def foreign_active(self, token: int) -> list[Occurrence]:
        """Active occurrences claimed under an older lease token: their engine is gone."""
        rows = await self._all(
            f"{_OCC_SELECT} WHERE state IN {_ACTIVE_SQL} AND coalesce(lease_token, 0) < ?",
            (token,),
        )
        return [occurrence_from_row(row) for row in rows]

    # ---- tick sequence numbers ------------------------------------------------------

    async def reserve_sequence(self, key: str, floor: int, block: int) -> int:
        """Raise the stored value to max(stored, floor) + block and return it."""
        async with self._write():
            row = await self._one(
                "INSERT INTO sequences (key, value) VALUES (?, ? + ?) ON CONFLICT (key)"
                " DO UPDATE SET value ="
                " CASE WHEN sequences.value > ? THEN sequences.value ELSE ? END + ?"
                " RETURNING value",
                (key, floor, block, floor, floor, block),
            )
        return row[0]

    async def release_sequence(self, key: str, expected: int, value: int) -> None:
        async with self._write():
            await self._conn.execute(
                "UPDATE sequences SET value = ? WHERE key = ? AND value = ?",
                (value, key, expected),
            )

    # ---- run-now requests from other processes ---------------------------------------

    async def add_request(
        self, task: Task, kind: str, now: int, *, actor: Actor | None = None
    ) -> int:
        async with self._write():
            cursor = await self._conn.execute(
                "INSERT INTO requests (task_id, task, kind, created_at) VALUES (?,?,?,?)",
                (task.id, task.name, kind, now),
            )
            req_id = cursor.lastrowid
            if actor is not None:
                said = f"request {req_id}"
                await write_audit(
                    self._conn, actor, "run-now", task.name, now, said, request_id=req_id
                )
        return req_id

    async def pending_requests(self) -> list[RunRequest]:
        rows = await self._all(
            "SELECT id, task_id, task, kind, created_at FROM requests WHERE handled_at IS NULL"
            " ORDER BY id"
        )
        return [RunRequest(*row) for row in rows]

    async def scan_has_work(self, now: int) -> bool:
        """Whether a scan at `now` would find anything: a pending request, a task due or an
        active occurrence. One indexed query in place of the scan's three when idle."""
        row = await self._one(
            "SELECT EXISTS (SELECT 1 FROM requests WHERE handled_at IS NULL)"
            " OR EXISTS (SELECT 1 FROM tasks WHERE enabled = 1 AND due_at IS NOT NULL"
            " AND due_at <= ?)"
            f" OR EXISTS (SELECT 1 FROM occurrences WHERE state IN {_ACTIVE_SQL})"
            # queued rows due, or to cancel (see store/queue.py)
            " OR EXISTS (SELECT 1 FROM occurrences o LEFT JOIN tasks t ON t.id = o.task_id"
            " WHERE o.state = 'queued' AND (coalesce(o.retry_at, o.scheduled_for) <= ?"
            " OR t.id IS NULL OR t.enabled = 0 OR t.generation <> o.generation))",
            (now, now),
        )
        return bool(row[0])

    async def next_due(self) -> int | None:
        """The earliest instant a scan would find something due: an enabled task's slot, or
        a queued occurrence's (a retry, a waiting run); None when nothing is due ever."""
        row = await self._one(
            "SELECT min(due) FROM (SELECT min(due_at) AS due FROM tasks"
            " WHERE enabled = 1 AND due_at IS NOT NULL"
            " UNION ALL SELECT min(coalesce(retry_at, scheduled_for)) AS due FROM occurrences"
            " WHERE state = 'queued') AS dues",
        )
        return None if row is None or row[0] is None else int(row[0])

    async def tasks_due_at(self, instant: int, limit: int) -> list[str]:
        rows = await self._all(
            "SELECT name FROM tasks WHERE enabled = 1 AND due_at = ?"
            " UNION SELECT t.name FROM occurrences o JOIN tasks t ON t.id = o.task_id"
            " WHERE o.state = 'queued' AND coalesce(o.retry_at, o.scheduled_for) = ?"
            " LIMIT ?",
            (instant, instant, limit),
        )
        return [row[0] for row in rows]

    async def finish_request(
        self, req_id: int, now: int, outcome: str, occurrence_id: int | None, reason: str | None
    ) -> None:
        async with self._write():
            await self._conn.execute(
                "UPDATE requests SET handled_at = ?, outcome = ?, occurrence_id = ?, reason = ?"
                " WHERE id = ? AND handled_at IS NULL",
                (now, outcome, occurrence_id, reason, req_id),
            )
            await settle_audited_request(self._conn, req_id, outcome, occurrence_id, reason)

    async def request(self, req_id: int) -> tuple[str | None, int | None, str | None]:
        row = await self._one(
            "SELECT outcome, occurrence_id, reason FROM requests WHERE id = ?", (req_id,)
        )
        if row is None:
            raise NotFound(f"no request {req_id}")
        return row[0], row[1], row[2]
