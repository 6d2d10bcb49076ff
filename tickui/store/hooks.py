"""Hook deliveries (`hook_deliveries`) and the reads that turn an engine change into hook
events: changed occurrences and tasks as plain rows."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tickui.store.abc import Delivery
from tickui.store.base import StoreBase

DELIVERIES_KEPT = 1000  # the newest deliveries kept; older ones are pruned as new ones come
_OCC_COLS = (
    "id",
    "task_id",
    "task",
    "kind",
    "state",
    "error_code",
    "detail",
    "attempt",
    "scheduled_for",
    "finished_at",
    "covers",
    "missed",
)
# A run that was followed by its slot's next attempt (a retry was queued): not the slot's
# final outcome. The retry is queued in the transaction that records the run's end.
_RETRIED = (
    "EXISTS (SELECT 1 FROM occurrences r WHERE r.task_id = o.task_id AND r.id > o.id"
    " AND r.retry_of = coalesce(o.retry_of, o.id) AND r.attempt = o.attempt + 1)"
)
_TASK_COLS = ("id", "name", "enabled", "note", "updated_at")
OUTCOMES = ("pending", "delivered", "failed")


class HookQueries(StoreBase):
    """Reads for hook events and the record of each delivery."""

    # ---- reads behind hook events --------------------------------------------------

    async def hook_occurrences(self, ids: Iterable[int]) -> list[dict[str, Any]]:
        """The changed occurrences, as plain rows (id order)."""
        wanted = sorted(set(ids))
        rows: list[dict[str, Any]] = []
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            marks = ",".join("?" * len(chunk))
            found = await self._all(
                f"SELECT {', '.join('o.' + c for c in _OCC_COLS)}, {_RETRIED}"
                f" FROM occurrences o WHERE o.id IN ({marks}) ORDER BY o.id",
                chunk,
            )
            rows.extend(dict(zip((*_OCC_COLS, "retried"), row, strict=True)) for row in found)
        return rows

    async def previous_result(self, task_id: int, before_id: int) -> str | None:
        """The final outcome (succeeded or failed, not a failure that was retried) of the
        task's last slot before `before_id`."""
        row = await self._one(
            "SELECT o.state FROM occurrences o WHERE o.task_id = ? AND o.id < ?"
            f" AND o.state IN ('succeeded', 'failed') AND NOT {_RETRIED}"
            " ORDER BY o.id DESC LIMIT 1",
            (task_id, before_id),
        )
        return row[0] if row else None

    async def last_failed(self, task_id: int) -> dict[str, Any] | None:
        row = await self._one(
            f"SELECT {', '.join(_OCC_COLS)} FROM occurrences WHERE task_id = ?"
            " AND state = 'failed' ORDER BY id DESC LIMIT 1",
            (task_id,),
        )
        return dict(zip(_OCC_COLS, row, strict=True)) if row else None

    async def hook_tasks(self, ids: Iterable[int]) -> list[dict[str, Any]]:
        wanted = sorted(set(ids))[:10_000]
        if not wanted:
            return []
        marks = ",".join("?" * len(wanted))
        found = await self._all(
            f"SELECT {', '.join(_TASK_COLS)} FROM tasks WHERE id IN ({marks})", wanted
        )
        return [dict(zip(_TASK_COLS, row, strict=True)) for row in found]

    # ---- deliveries ------------------------------------------------------------------

    async def start_delivery(
        self, hook: str, event: str, task: str | None, occurrence_id: int | None, now: int
    ) -> int:
        """Record a delivery as pending; the newest DELIVERIES_KEPT are kept."""
        async with self._write():
            cursor = await self._conn.execute(
                "INSERT INTO hook_deliveries (hook, event, task, occurrence_id, created_at)"
                " VALUES (?,?,?,?,?)",
                (hook, event, task, occurrence_id, now),
            )
            new_id = cursor.lastrowid
            await cursor.close()
            await self._conn.execute(
                "DELETE FROM hook_deliveries WHERE id <= ?", (new_id - DELIVERIES_KEPT,)
            )
        assert new_id is not None
        return new_id

    async def finish_delivery(
        self, delivery_id: int, now: int, attempts: int, outcome: str, detail: str | None
    ) -> None:
        assert outcome in OUTCOMES
        async with self._write():
            await self._conn.execute(
                "UPDATE hook_deliveries SET finished_at = ?, attempts = ?, outcome = ?,"
                " detail = ? WHERE id = ?",
                (now, attempts, outcome, detail, delivery_id),
            )

    async def fail_deliveries(self, ids: Sequence[int], now: int, detail: str) -> None:
        """Deliveries that will never finish (tickui stopped meanwhile) end failed."""
        if not ids:
            return
        async with self._write():
            await self._conn.executemany(
                "UPDATE hook_deliveries SET finished_at = ?, outcome = 'failed', detail = ?"
                " WHERE id = ? AND outcome = 'pending'",
                [(now, detail, i) for i in ids],
            )

    async def record_undelivered(
        self, items: Sequence[tuple[str, str, str | None, int | None, int]], now: int, detail: str
    ) -> None:
        """Events that never reached a sender (tickui stopped first): recorded failed, so
        no event that was due a delivery goes unrecorded. Items: (hook, event, task,
        occurrence id, created at)."""
        if not items:
            return
        async with self._write():
            await self._conn.executemany(
                "INSERT INTO hook_deliveries (hook, event, task, occurrence_id, created_at,"
                " finished_at, outcome, detail) VALUES (?,?,?,?,?,?,'failed',?)",
                [(*item, now, detail) for item in items],
            )

    async def fail_stale_deliveries(self, before: int, now: int, detail: str) -> int:
        """Deliveries left pending by a tickui that ended before them (a kill -9): failed.
        Only rows recorded before `before` (this process's start): its own are its own."""
        async with self._write():
            cursor = await self._conn.execute(
                "UPDATE hook_deliveries SET finished_at = ?, outcome = 'failed', detail = ?"
                " WHERE outcome = 'pending' AND created_at < ?",
                (now, detail, before),
            )
            count = cursor.rowcount
            await cursor.close()
        return count

    async def recent_deliveries(self, limit: int = 50) -> list[Delivery]:
        """The newest deliveries first. A database from before schema 7 has none."""
        if not await self._columns("hook_deliveries"):
            return []
        rows = await self._all(
            "SELECT id, hook, event, task, occurrence_id, created_at, finished_at, attempts,"
            " outcome, detail FROM hook_deliveries ORDER BY id DESC LIMIT ?",
            (limit,),
        )
        return [Delivery(*row) for row in rows]
