"""Workers (Kafka dispatch) as their heartbeats left them, and the occurrences handed to
them: the reads `tickui workers` and the dashboard use, and the engine's bookkeeping of
deadlines and lost workers."""

from __future__ import annotations

import json
from collections.abc import Sequence

from tickui.model.coordination import WorkerInfo
from tickui.model.occurrence import RUN_TRANSITION
from tickui.model.records import Occurrence, occurrence_from_row
from tickui.store.abc import Beat, DispatchSecurity
from tickui.store.base import _ACTIVE_SQL, _OCC_SELECT, StoreBase, _chunks

_WORKER_COLS = (
    "id, host, slots, running, last_seen, state, version, log_dir, grp, first_seen,"
    " refused, insecure"
)


def _counts(text: str | None) -> dict[str, int]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, int) and v > 0}


def _worker(row) -> WorkerInfo:
    try:
        running = json.loads(row[3])
    except ValueError:
        running = []
    if not isinstance(running, list):
        running = []
    return WorkerInfo(
        id=row[0],
        host=row[1],
        slots=row[2],
        running=[str(c) for c in running],
        last_seen=row[4],
        state=row[5],
        version=row[6],
        log_dir=row[7],
        group=row[8],
        first_seen=row[9],
        refused=_counts(row[10]),
        insecure=bool(row[11]),
    )


class WorkerQueries(StoreBase):
    """The workers table and the remote occurrences' deadlines."""

    async def list_workers(self) -> list[WorkerInfo]:
        """Every worker heard from, alive ones first, then by id."""
        rows = await self._all(
            f"SELECT {_WORKER_COLS} FROM workers"
            " ORDER BY CASE state WHEN 'alive' THEN 0 WHEN 'draining' THEN 1"
            " WHEN 'lost' THEN 2 ELSE 3 END, id"
        )
        return [_worker(row) for row in rows]

    async def record_heartbeats(self, beats: Sequence[Beat]) -> list[str]:
        """Upsert each worker from its heartbeat (last one wins). Returns the ids of
        workers that were `lost` and speak again."""
        if not beats:
            return []
        latest: dict[str, Beat] = {}
        for beat in beats:
            latest[beat.worker] = beat
        async with self._write():
            marks = ",".join("?" * len(latest))
            back = [
                row[0]
                for row in await self._all(
                    f"SELECT id FROM workers WHERE state = 'lost' AND id IN ({marks})",
                    list(latest),
                )
            ]
            await self._conn.executemany(
                "INSERT INTO workers (id, host, slots, running, version, state, last_seen,"
                " first_seen, log_dir, grp, refused, insecure) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
                " ON CONFLICT(id) DO UPDATE SET host = excluded.host, slots = excluded.slots,"
                " running = excluded.running, version = excluded.version,"
                " state = excluded.state, last_seen = excluded.last_seen,"
                " log_dir = excluded.log_dir, grp = excluded.grp,"
                " refused = excluded.refused, insecure = excluded.insecure,"
                " lost_at = CASE WHEN excluded.state = 'lost' THEN workers.lost_at END",
                [
                    (
                        b.worker,
                        b.host,
                        b.slots,
                        json.dumps(list(b.running)),
                        b.version,
                        b.state,
                        b.seen,
                        b.seen,
                        b.log_dir,
                        b.group,
                        json.dumps(dict(b.refused), sort_keys=True),
                        int(b.insecure),
                    )
                    for b in latest.values()
                ],
            )
        return back

    async def record_dispatch_security(
        self, name: str, insecure: bool, key_id: str | None, refused: dict[str, int], at: int
    ) -> None:
        async with self._write():
            await self._conn.execute(
                "INSERT INTO dispatch_security (name, insecure, key_id, refused, updated_at)"
                " VALUES (?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET"
                " insecure = excluded.insecure, key_id = excluded.key_id,"
                " refused = excluded.refused, updated_at = excluded.updated_at",
                (name, int(insecure), key_id, json.dumps(refused, sort_keys=True), at),
            )

    async def dispatch_security(self) -> list[DispatchSecurity]:
        """Every engine that dispatched to workers, the latest first."""
        rows = await self._all(
            "SELECT name, insecure, key_id, refused, updated_at FROM dispatch_security"
            " ORDER BY updated_at DESC, name"
        )
        return [DispatchSecurity(r[0], bool(r[1]), r[2], _counts(r[3]), r[4]) for r in rows]

    async def silent_workers(self, before: int) -> list[WorkerInfo]:
        """Workers alive or draining whose last heartbeat arrived before `before`."""
        rows = await self._all(
            f"SELECT {_WORKER_COLS} FROM workers"
            " WHERE state IN ('alive', 'draining') AND last_seen < ? ORDER BY id",
            (before,),
        )
        return [_worker(row) for row in rows]

    async def alive_workers(self, since: int) -> int:
        """Workers alive whose last heartbeat arrived at or after `since`."""
        row = await self._one(
            "SELECT count(*) FROM workers WHERE state = 'alive' AND last_seen >= ?", (since,)
        )
        return row[0]

    async def mark_workers_lost(self, ids: Sequence[str], now: int) -> None:
        if not ids:
            return
        async with self._write():
            await self._conn.executemany(
                "UPDATE workers SET state = 'lost', lost_at = ? WHERE id = ?"
                " AND state IN ('alive', 'draining')",
                [(now, worker) for worker in ids],
            )

    async def remote_active(self) -> list[Occurrence]:
        """Active occurrences handed to workers (they have a dispatch deadline)."""
        rows = await self._all(
            f"{_OCC_SELECT} WHERE deadline IS NOT NULL AND state IN {_ACTIVE_SQL} ORDER BY id"
        )
        return [occurrence_from_row(row) for row in rows]

    async def set_deadlines(self, items: Sequence[tuple[int, int, str]]) -> None:
        """(occurrence id, deadline, command id): handed to workers under this command id,
        none may start it after the deadline. Written before the command is sent."""
        if not items:
            return
        async with self._write():
            for chunk in _chunks(list(items), 900):
                await self._conn.executemany(
                    "UPDATE occurrences SET deadline = ?, command_id = ? WHERE id = ?",
                    [(deadline, command_id, occ_id) for occ_id, deadline, command_id in chunk],
                )

    async def started_commands(self, command_ids: Sequence[str]) -> set[str]:
        """Those of `command_ids` a run transition in the event log names."""
        found: set[str] = set()
        for chunk in _chunks([c for c in command_ids if c], 900):
            marks = ",".join("?" * len(chunk))
            rows = await self._all(
                f"SELECT DISTINCT command_id FROM events WHERE command_id IN ({marks})"
                f" AND type = '{RUN_TRANSITION}'",
                chunk,
            )
            found.update(row[0] for row in rows)
        return found

    async def set_workers(self, items: Sequence[tuple[int, str]]) -> None:
        """(occurrence id, worker id) from run transitions, for rows not yet naming one."""
        if not items:
            return
        async with self._write():
            await self._conn.executemany(
                "UPDATE occurrences SET worker = ? WHERE id = ? AND worker IS NULL",
                [(worker, occ_id) for occ_id, worker in items],
            )

    async def occurrences_by_command(self, command_ids: Sequence[str]) -> dict[str, Occurrence]:
        found: dict[str, Occurrence] = {}
        for chunk in _chunks(list(command_ids), 900):
            marks = ",".join("?" * len(chunk))
            rows = await self._all(f"{_OCC_SELECT} WHERE command_id IN ({marks})", chunk)
            for row in rows:
                occ = occurrence_from_row(row)
                found[occ.command_id or ""] = occ
        return found
