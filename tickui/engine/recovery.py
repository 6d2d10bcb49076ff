"""Recovery of runs left by an engine that is gone, and pruning of old history. A part
of SchedulerEngine (tickui/engine.py holds the state)."""

from __future__ import annotations

import contextlib
import logging
import os

from tickui.common import procs
from tickui.dispatch.containment import end_orphaned_run
from tickui.engine.records import EngineChange
from tickui.model.records import Occurrence

log = logging.getLogger("tickui.engine")


class Recovery:
    """What a new lease holder does first, and the periodic prune."""

    async def _recover(self, now: int) -> None:
        """Runs left active by an engine that is gone end failed/INTERRUPTED, orphans killed."""
        await self.reconcile()
        assert self._lease.token is not None
        # This engine's own runs under an older token (its lease lapsed during a pause or
        # a wall-clock step, and no one else took it) are not orphans: its dispatcher
        # still watches them and records how they end. Only claims it never started
        # (their outcome could not be written) are left to recover.
        # Runs handed to workers (a dispatch deadline) live on: their events, a lost
        # worker or their deadline settle them, when this engine dispatches to workers too.
        remote = self.dispatcher.remote
        orphans = [
            occ
            for occ in await self.store.foreign_active(self._lease.token)
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
            self._notify(EngineChange(occurrences=frozenset(o.id for o in orphans)))

    async def _maybe_prune(self, now: int) -> None:
        if self._last_prune is None:
            self._last_prune = now - self.config.prune_every // 2  # not in the first scan
        if now - self._last_prune < self.config.prune_every:
            return
        self._last_prune = now
        for path in await self.store.prune(self.config.keep):
            with contextlib.suppress(OSError):
                os.unlink(path)


async def _kill_orphan(occ: Occurrence) -> bool:
    """End what a vanished engine on this host left running of `occ`: its group and every
    descendant, wherever it was reparented. Another host's processes are not ours to signal."""
    if (occ.owner or "").split(":", 1)[0] != procs.host():
        return False
    return await end_orphaned_run(occ) > 0
