"""The operator audit (`audit`): one row per action a person took, written by the change's
own transaction (`write_audit`), the newest AUDIT_KEPT kept; the listing's reads; and the
lease holder's reading of the rows its hooks have not been told of yet."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tickui.model.audit import AUDIT_COLUMNS, AUDIT_KEPT, Actor, AuditEntry, clipped, entry_from_row
from tickui.store import reads
from tickui.store.base import StoreBase


async def write_audit(
    conn: Any,
    actor: Actor,
    action: str,
    task: str | None,
    now: int,
    detail: str | None = None,
    occurrence_id: int | None = None,
    request_id: int | None = None,
) -> None:
    """Inside the caller's write transaction: record `actor`'s `action`, and prune all
    but the newest AUDIT_KEPT rows."""
    cursor = await conn.execute(
        "INSERT INTO audit (at, user_name, host, origin, pid, action, task, occurrence_id,"
        " request_id, detail) VALUES (?,?,?,?,?,?,?,?,?,?)",
        (
            now,
            actor.user,
            actor.host,
            actor.origin,
            actor.pid,
            action,
            task,
            occurrence_id,
            request_id,
            clipped(detail),
        ),
    )
    new_id = cursor.lastrowid
    await cursor.close()
    if new_id is not None and new_id > AUDIT_KEPT:
        await conn.execute("DELETE FROM audit WHERE id <= ?", (new_id - AUDIT_KEPT,))


async def settle_audited_request(
    conn: Any, req_id: int, outcome: str, occurrence_id: int | None, reason: str | None
) -> None:
    """Inside finish_request's transaction: the run-now entry of request `req_id` learns
    the run it started, or why it was refused."""
    said = f"request {req_id}: " + (
        f"started run {occurrence_id}" if outcome == "started" else f"{outcome} ({reason})"
    )
    await conn.execute(
        "UPDATE audit SET occurrence_id = ?, detail = ? WHERE request_id = ?",
        (occurrence_id, clipped(said), req_id),
    )


class AuditQueries(StoreBase):
    """The audit's reads, and an entry for an action that is no store write (a running
    run's cancel: a signal to its process)."""

    async def record_audit(
        self,
        actor: Actor,
        action: str,
        task: str | None,
        now: int,
        detail: str | None = None,
        occurrence_id: int | None = None,
    ) -> None:
        async with self._write():
            await write_audit(self._conn, actor, action, task, now, detail, occurrence_id)

    async def audit_entries(self, task: str | None = None, limit: int = 50) -> list[AuditEntry]:
        """Newest first, of one task's name or of all. A database from before the audit
        (opened read-only, so not migrated) has none."""
        if not await self._columns("audit"):
            return []
        rows = await self._all(*reads.audit_query(task, limit))
        return [entry_from_row(row) for row in rows]

    async def untold_audit(self, since: int, limit: int = 500) -> list[AuditEntry]:
        """Entries made at or after `since` that no lease holder's hooks were told of,
        oldest first."""
        rows = await self._all(
            f"SELECT {AUDIT_COLUMNS} FROM audit WHERE told IS NULL AND at >= ? ORDER BY id LIMIT ?",
            (since, limit),
        )
        return [entry_from_row(row) for row in rows]

    async def mark_audit_told(self, ids: Sequence[int], now: int) -> None:
        if not ids:
            return
        async with self._write():
            await self._conn.executemany(
                "UPDATE audit SET told = ? WHERE id = ?", [(now, i) for i in ids]
            )
