"""Recovery of runs left by an engine that is gone, and pruning of old history."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import uuid
from pathlib import Path
from typing import Any

from tickui.common import procs
from tickui.dispatch import Dispatcher
from tickui.dispatch.containment import end_orphaned_run
from tickui.dispatch.journals import ENGINE_LEASES, fence_gone, journal_outcome, last_word
from tickui.model.occurrence import RUN_INTERRUPTED, RUN_TRANSITION
from tickui.model.records import Occurrence
from tickui.store import NewEvent, Store
from tickui.supervisor import journal as j

log = logging.getLogger("tickui.engine")


class Recovery:
    """What a new lease holder does first: each run left active by an engine that is gone
    is settled from its journal when it ran on this host (never started: back to its
    task's misfire policy; ended: its real outcome; still going: fenced now, then
    INTERRUPTED; its supervisor gone: what is left killed, INTERRUPTED); runs with no
    journal to read end failed/INTERRUPTED, their processes on this host killed."""

    def __init__(self, store: Store, dispatcher: Dispatcher, owner: str) -> None:
        self.store = store
        self.dispatcher = dispatcher
        self.owner = owner

    async def recover(self, token: int, now: int) -> frozenset[int]:
        """End the orphans under lease `token`; the occurrences ended (those settled by
        appended events end at the next reconcile)."""
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
        journals = {occ.id: self._journal_of(occ) for occ in orphans}
        if any(path is not None for path in journals.values()):
            # First fence every gone engine's runs here: a supervisor whose engine let it
            # go and died before it wrote its journal would otherwise start its command
            # after this reads no journal and hands the slot back (a takeover from a gone
            # holder need not wait out its lease, so its runs' deadline may not be past).
            await asyncio.to_thread(fence_gone, Path(self.store.log_dir), ENGINE_LEASES)
        read = await asyncio.gather(
            *(last_word(path, by_lease=True) for path in journals.values() if path is not None)
        )
        words = dict(zip([i for i, p in journals.items() if p is not None], read, strict=True))
        failed: list[tuple[int, str, str]] = []
        unstarted: list[int] = []
        events: list[NewEvent] = []
        for occ in orphans:
            gone = f"engine {occ.owner} is gone"
            if occ.id not in words:
                killed = await _kill_orphan(occ)
                if occ.state == "claimed" and occ.pid is None:
                    detail = f"engine {occ.owner} lost its lease; not known to have started"
                elif not _on_this_host(occ):
                    detail = (
                        f"{gone}; outcome unknown: its run's record is on its host, and its"
                        " lease (the run's fence) ran out before this engine took over"
                    )
                else:
                    detail = gone + ("; its process group was killed" if killed else "")
                failed.append((occ.id, "INTERRUPTED", detail))
                continue
            verdict, record = words[occ.id]
            if verdict in (j.NEVER_STARTED, j.NOT_STARTED):
                unstarted.append(occ.id)  # recorded running or not, its command never ran
            elif verdict in (j.ENDED, j.START_FAILED):
                events.extend(self._ended(occ, record or {}, now, gone))
            else:  # lost, or a supervisor that would not end
                if record is not None:
                    occ = _with_supervisor(occ, record)
                killed = await end_orphaned_run(occ)
                said = "its run supervisor vanished without recording the end"
                if verdict != j.LOST:
                    said = "its run supervisor did not end when fenced"
                detail = f"{gone}; {said}" + ("; what was left was killed" if killed else "")
                failed.append((occ.id, "INTERRUPTED", detail))
        released = await self.store.release_unstarted(
            unstarted, now, f"not_started: engine {'/'.join({o.owner or '?' for o in orphans})}"
            " is gone; its run never started", running=True,
        ) if unstarted else []  # fmt: skip
        if events:
            await self.store.append_events(events)
        await self.store.fail_occurrences(failed, now)
        if failed or events or released:
            log.warning(
                "recovered %d occurrence(s): %d interrupted, %d settled from their journals,"
                " %d never started",
                len(orphans), len(failed), len({e.command_id for e in events}), len(released),
            )  # fmt: skip
        return frozenset(o.id for o in orphans)

    def _journal_of(self, occ: Occurrence) -> Path | None:
        """Where the run of `occ` kept its journal, when it ran on this host."""
        return journal_path(occ, self.store) if _on_this_host(occ) else None

    def _ended(
        self, occ: Occurrence, record: dict[str, Any], now: int, gone: str
    ) -> list[NewEvent]:
        return outcome_events(occ, record, self._journal_of(occ), now, gone)


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


def journal_path(occ: Occurrence, store: Store) -> Path:
    """Where the run of `occ` keeps its journal on its engine's host."""
    if occ.log_path:
        return Path(occ.log_path).with_suffix(".journal")
    return Path(store.log_dir) / f"{occ.id}.journal"


def outcome_events(
    occ: Occurrence, record: dict[str, Any], journal: Path | None, now: int, gone: str
) -> list[NewEvent]:
    """The events the run's engine would have appended from its final journal `record`:
    started (unless recorded), then how it ended; a run fenced or stopped by its
    supervisor ends INTERRUPTED."""
    run_id = occ.run_id or f"run-{uuid.uuid4().hex[:16]}"
    log_path = occ.log_path or (str(journal.with_suffix(".log")) if journal else None)
    kind, payload = journal_outcome(record, None, log_path)
    if record.get("fenced") or record.get("cancelled"):
        how = "fenced (its lease ran out)" if record.get("fenced") else "stopped"
        kind = RUN_INTERRUPTED
        payload.update(error_code="INTERRUPTED", detail=f"{gone}; its run was {how}")
    ended = NewEvent(now, kind, occ.command_id, run_id, payload)
    if occ.state == "running":
        return [ended]
    sup = record.get("supervisor")
    sup = sup if isinstance(sup, dict) else {}
    started = {
        "state": "running",
        "pid": sup.get("pid"),
        "pgid": sup.get("pid"),
        "pid_start": sup.get("start"),
        "log_path": log_path,
    }
    return [NewEvent(now, RUN_TRANSITION, occ.command_id, run_id, started), ended]


def _on_this_host(occ: Occurrence) -> bool:
    """Whether the engine that claimed `occ` ran on this host (its owner names its host)."""
    return (occ.engine_host or "") == procs.host()


async def _kill_orphan(occ: Occurrence) -> bool:
    """End what a vanished engine on this host left running of `occ`: its group and every
    descendant, wherever it was reparented. Another host's processes are not ours to signal."""
    if not _on_this_host(occ):
        return False
    return await end_orphaned_run(occ) > 0


def _with_supervisor(occ: Occurrence, record: dict[str, Any]) -> Occurrence:
    """`occ` with its supervisor as its main process, for end_orphaned_run."""
    sup = record.get("supervisor")
    if not isinstance(sup, dict) or not isinstance(sup.get("pid"), int):
        return occ
    return dataclasses.replace(occ, pid=sup["pid"], pgid=sup["pid"], pid_start=sup.get("start"))
