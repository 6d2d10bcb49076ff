"""Run records sent to the store by another engine of the same host.

A run's journal lies on the host its engine ran on. When that engine stops answering
(killed, frozen) its runs still end, fenced or by themselves, and their journals say how;
a holder on another host cannot read them. So every standby engine looks, about once a
second, for runs claimed by another engine of its own host whose journals are final while
that engine no longer renews its runs' lease, and appends the outcome events their engine
would have appended. Whichever engine takes the lease, on whatever host, folds them in its
first reconcile: the run ends as it really did, not "outcome unknown".
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from pathlib import Path
from typing import Any

from tickui.common import procs
from tickui.common.timeutil import MICROS
from tickui.dispatch.journals import ENGINE_LEASES
from tickui.engine.recovery import journal_path, outcome_events
from tickui.model.records import Occurrence
from tickui.store import NewEvent, Store
from tickui.supervisor import journal as j
from tickui.supervisor.lease import read_lease

log = logging.getLogger("tickui.engine")

SHIP_EVERY = MICROS  # engine time between looks
_OUTCOMES = (j.ENDED, j.START_FAILED)  # never-started runs are the holder's to hand back


class RecordShipping:
    """The standby's look at its host's runs whose engine went silent (see the module)."""

    def __init__(self, store: Store, owner: str) -> None:
        self.store = store
        self.owner = owner
        self._last: int | None = None
        self._sent: set[int] = set()  # occurrences whose events this engine appended

    async def when_due(self, now: int) -> int:
        """Look if a second has passed since the last look; how many runs were sent."""
        if self._last is not None and now - self._last < SHIP_EVERY:
            return 0
        self._last = now
        if not await asyncio.to_thread(_a_silent_engine_here, Path(self.store.log_dir)):
            return 0  # every engine of this host renews its runs' lease: nothing to read
        here = procs.host()
        active = await self.store.active_occurrences()
        self._sent.intersection_update(occ.id for occ in active)
        mine = [  # local runs only: one handed to a worker is the worker's to report
            occ
            for occ in active
            if occ.engine_host == here and occ.owner != self.owner and occ.id not in self._sent
            and occ.worker is None and occ.deadline is None
        ]  # fmt: skip
        if not mine:
            return 0
        found = await asyncio.to_thread(self._final_records, mine)
        events: list[NewEvent] = []
        for occ, record in found:
            gone = f"engine {occ.owner} is gone"
            said = outcome_events(occ, record, journal_path(occ, self.store), now, gone)
            events += [  # each with an id: two engines sending one record append it once
                dataclasses.replace(event, event_id=f"record-{occ.id}-{n}")
                for n, event in enumerate(said)
            ]
        if events:
            await self.store.append_events(events)
            self._sent.update(occ.id for occ, _ in found)
            log.warning(
                "sent the records of %d run(s) of a silent engine on this host to the store",
                len(found),
            )
        return len(found)

    def _final_records(self, occs: list[Occurrence]) -> list[tuple[Occurrence, dict[str, Any]]]:
        """The runs whose journal is final and whose engine's lease for its runs has run
        out (or is gone): that engine will not record them. Blocking: file reads."""
        silent: dict[str, bool] = {}  # lease file -> its engine stopped renewing it
        found = []
        for occ in occs:
            record = j.read_journal(str(journal_path(occ, self.store)))
            if record is None or record.get("state") not in _OUTCOMES:
                continue
            lease = record.get("lease")
            if not isinstance(lease, str):
                continue  # not fenced by a lease: whether its engine is silent is unknown
            if lease not in silent:
                deadline = read_lease(lease)
                silent[lease] = deadline is None or deadline <= time.monotonic()
            if silent[lease]:  # else its engine still renews it and records its own runs
                found.append((occ, record))
        return found


def _a_silent_engine_here(folder: Path) -> bool:
    """Whether an engine's runs' lease file in `folder` (this host's) has run out: only
    then can a run of a silent engine be waiting to be told. A directory listing, so the
    store is not asked every second for nothing. Blocking: call it in a thread."""
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    now = time.monotonic()
    for name in names:
        if name.startswith(f"{ENGINE_LEASES}-") and name.endswith(".lease"):
            deadline = read_lease(str(folder / name))
            if deadline is not None and deadline <= now:
                return True
    return False
