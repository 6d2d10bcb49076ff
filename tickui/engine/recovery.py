"""Recovery of runs left by an engine that is gone, and pruning of old history."""

from __future__ import annotations

import contextlib
import logging
import os

from tickui.common import procs
from tickui.dispatch import Dispatcher
from tickui.dispatch.containment import end_orphaned_run
from tickui.model.records import Occurrence
from tickui.store import Store

log = logging.getLogger("tickui.engine")


class Recovery:
    """What a new lease holder does first: runs left active by an engine that is gone end
    failed/INTERRUPTED, their processes on this host killed."""

    def __init__(self, store: Store, dispatcher: Dispatcher, owner: str) -> None:
        self.store = store
        self.dispatcher = dispatcher
        self.owner = owner

    async def recover(self, token: int, now: int) -> frozenset[int]:
        """End the orphans under lease `token`; the occurrences ended."""
        # This engine's own runs under an older token (its lease lapsed during a pause or
        # a wall-clock step, and no one else took it) are not orphans: its dispatcher
        # still watches them and records how they end. Only claims it never started
        # (their outcome could not be written) are left to recover.
        # Runs handed to workers (a dispatch deadline) live on: their events, a lost
        # worker or their deadline settle them, when this engine dispatches to workers too.
        remote = self.dispatcher.remote
        orphans = [
            occ
            for occ in await self.store.foreign_active(token)
            if (occ.owner != self.owner or occ.state == "claimed")
            and not (remote and occ.deadline is not None)
        ]
        failed = []
        for occ in orphans:
            killed = await _kill_orphan(occ)
            if occ.state == "claimed" and occ.pid is None:
                detail = f"engine {occ.owner} lost its lease; not known to have started"
            else:
                detail = f"engine {occ.owner} is gone" + (
                    "; its process group was killed" if killed else ""
                )
            failed.append((occ.id, "INTERRUPTED", detail))
        await self.store.fail_occurrences(failed, now)
        if failed:
            log.warning("recovered %d interrupted occurrence(s)", len(failed))
        return frozenset(o.id for o in orphans)


class Pruning:
    """Old history removed every `every` microseconds of engine time, keeping `keep`
    occurrences a task, never in the first scan."""

    def __init__(self, store: Store, keep: int, every: int) -> None:
        self.store = store
        self.keep = keep
        self.every = every
        self._last: int | None = None

    async def when_due(self, now: int) -> None:
        if self._last is None:
            self._last = now - self.every // 2  # not in the first scan
        if now - self._last < self.every:
            return
        self._last = now
        for path in await self.store.prune(self.keep):
            for gone in (path, os.path.splitext(path)[0] + ".journal"):  # its run's journal
                with contextlib.suppress(OSError):
                    os.unlink(gone)


async def _kill_orphan(occ: Occurrence) -> bool:
    """End what a vanished engine on this host left running of `occ`: its group and every
    descendant, wherever it was reparented. Another host's processes are not ours to signal."""
    if (occ.owner or "").split(":", 1)[0] != procs.host():
        return False
    return await end_orphaned_run(occ) > 0
