"""What this store appended to the event log, kept so that reconcile can fold a run's new
events without reading them back, when nothing else can have appended meanwhile.

Pure bookkeeping, no I/O. The store (tickui.store.events, tickui.store.claims) tells it
what it claimed and what it appended, inside the write transactions that did so; a
reconcile's page read brings, in the same statement, what the events table holds after
`start` (how many rows, its last seq) and SQLite's data version (which moves when another
connection commits). The events are served from here only when:

- no other connection committed since tracking began (the data version is the one seen
  then), and the table holds exactly as many events after `start`, up to the read's last
  seq, as this store appended there (so every one of them is here: sequence numbers are
  never reused, and an append undone is forgotten with everything else);
- every run of the page was claimed by this store after `start`, under the command id it
  still has, and its claim found no event naming that command (so none before the claim
  is its own), and it has no run id yet, or its cursor is past its claim.

Then the events after each run's cursor that the read of the table (EventLog.unreconciled)
would find are all here, and are found here by the same rules. Otherwise the caller reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tickui.model.occurrence import RUN_TRANSITION, RuntimeEvent

CAP = 100_000  # events or claims held at most; past it tracking starts again


class OwnEvents:
    """Events appended and runs claimed through one store since `start`."""

    def __init__(self) -> None:
        self.start: int | None = None  # every event after this seq is held here
        self.version: int | None = None  # the data version when tracking began
        self._count = 0
        self._last = 0
        self._by_command: dict[str, list[RuntimeEvent]] = {}
        self._by_run: dict[str, list[RuntimeEvent]] = {}  # no command id, a run id
        self._by_cause: dict[str, list[RuntimeEvent]] = {}  # no command id, a causation id
        self._ranges: list[tuple[int, int]] = []  # the appends' seqs, first and last
        self._floors: dict[int, tuple[str, int]] = {}  # claimed id -> (command id, last seq)

    def reset(self) -> None:
        """Forget everything: from now on reconcile reads, until the next claim."""
        self.__init__()

    # ---- told by the store, inside its write transactions ----------------------------

    def claimed(self, runs: Iterable[tuple[int, str]], last_seq: int, version: int) -> None:
        """Runs (id, command id) just claimed, in a transaction whose events table ended
        at `last_seq` and held no event naming any of their commands."""
        if self.start is not None and (version != self.version or last_seq != self._last):
            self.reset()  # another connection wrote, or an append went unseen: start again
        if self.start is None:
            self.start, self.version, self._last = last_seq, version, last_seq
        floors = self._floors
        for occurrence_id, command_id in runs:
            floors[occurrence_id] = (command_id, last_seq)
        if len(floors) > CAP:
            self.reset()

    def unclaimed(self, ids: Iterable[int]) -> None:
        """Claims undone (their transaction failed): their ids may be claimed again."""
        for occurrence_id in ids:
            self._floors.pop(occurrence_id, None)

    def appended(self, last_seq: int, rows: Sequence[Sequence[Any]], payloads: list[Any]) -> None:
        """`rows` (events as stored: at, command id, run id, type, payload, causation id,
        event id) just inserted with the seqs up to `last_seq`, in order."""
        if self.start is None:
            return
        first = last_seq - len(rows) + 1
        if first <= self._last:  # not after what is held: not this store's alone
            self.reset()
            return
        self._last = last_seq
        self._count += len(rows)
        self._ranges.append((first, last_seq))
        by_command = self._by_command
        for seq, row, payload in zip(range(first, last_seq + 1), rows, payloads, strict=True):
            event = RuntimeEvent(seq, row[0], row[1], row[2], row[3], payload, row[5])
            command_id = row[1]
            if command_id is not None:
                held = by_command.get(command_id)
                if held is None:
                    by_command[command_id] = [event]
                else:
                    held.append(event)
            else:
                if row[2] is not None:
                    self._by_run.setdefault(row[2], []).append(event)
                if row[5] is not None:
                    self._by_cause.setdefault(row[5], []).append(event)
        if self._count > CAP:
            self.reset()

    def settled(self, ids: Iterable[int]) -> None:
        """Runs that ended: no reconcile asks for them again. With none left, the
        events held are let go too."""
        floors = self._floors
        for occurrence_id in ids:
            floors.pop(occurrence_id, None)
        if not floors and self.start is not None:
            self.reset()

    def only(self, active: Iterable[int]) -> None:
        """Every run still active (a reconcile's whole read): the other claims ended."""
        floors = self._floors
        self._floors = {i: floors[i] for i in active if i in floors}
        if not self._floors and self.start is not None:
            self.reset()

    # ---- asked by reconcile ----------------------------------------------------------

    def events_for(
        self, page: Sequence[Sequence[Any]], count: int, last_seq: int, version: int
    ) -> list[list[RuntimeEvent]] | None:
        """Each page row's (id, state, command id, run id, cursor, ...) events after its
        cursor, in order; or None when they must be read. `count`, `last_seq`, `version`:
        the events table's rows after `start`, its last seq and the data version, seen by
        the read of `page`."""
        if self.start is None:
            return None
        if version != self.version or count != self._held_up_to(last_seq):
            self.reset()  # another writer appended (or removed) events: read them
            return None
        floors = self._floors
        found: list[list[RuntimeEvent]] = []
        for row in page:
            occurrence_id, command_id, run_id, cursor = row[0], row[2], row[3], row[4]
            floor = floors.get(occurrence_id)
            if floor is None or floor[0] != command_id:
                return None  # not claimed here, or its command id changed since
            if run_id is not None and cursor < floor[1]:
                return None
            events = self._matching(command_id, run_id, cursor)
            if last_seq < self._last:
                events = [e for e in events if e.seq <= last_seq]
            found.append(events)
        return found

    def _held_up_to(self, last_seq: int) -> int:
        if last_seq >= self._last:
            return self._count
        return sum(
            min(last, last_seq) - first + 1 for first, last in self._ranges if first <= last_seq
        )

    def _matching(self, command_id: str, run_id: str | None, cursor: int) -> list[RuntimeEvent]:
        """The events after `cursor` that name the command; that name no command but the
        run or, as causation, the command; or that name no command but a run bound by one
        of the first kind's transitions after it (EventLog.unreconciled's rules)."""
        by_run = self._by_run
        mine = self._by_command.get(command_id)
        if run_id is None and mine is not None and len(mine) == 1 and not self._by_cause:
            event = mine[0]  # the usual case: one event of its own, say its run's end
            if event.run_id is None or event.type != RUN_TRANSITION or not by_run:
                return [event] if event.seq > cursor else []
        hits: dict[int, RuntimeEvent] = {}
        for group in (mine, self._by_cause.get(command_id)):
            for event in group or ():
                if event.seq > cursor:
                    hits[event.seq] = event
                    if event.run_id is not None and event.type == RUN_TRANSITION:
                        for later in by_run.get(event.run_id, ()):
                            if later.seq > event.seq:
                                hits[later.seq] = later
        if run_id is not None:
            for event in by_run.get(run_id, ()):
                if event.seq > cursor:
                    hits[event.seq] = event
        if len(hits) < 2:
            return list(hits.values())
        return [hits[seq] for seq in sorted(hits)]
