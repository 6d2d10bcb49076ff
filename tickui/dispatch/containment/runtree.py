"""One run's process tree: the marker its processes carry, and which processes of a /proc
snapshot belong to it."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tickui.common.procs import Proc
from tickui.common.timeutil import iso
from tickui.dispatch.containment.proctable import same_process
from tickui.model.records import Occurrence


def marker_for(occurrence: Occurrence) -> dict[str, str]:
    """The environment entries that identify a run's processes (the dispatcher sets them).
    The claiming engine's id is part of it: occurrence ids and slots repeat across
    databases (and across engines in one process), and a run of another database with the
    same id and slot must never be taken for this one's."""
    return {
        "TICKUI_OCCURRENCE_ID": str(occurrence.id),
        "TICKUI_SCHEDULED_FOR": iso(occurrence.scheduled_for) or "",
        "TICKUI_ENGINE": occurrence.owner or "",
    }


def marker_bytes(marker: Mapping[str, str]) -> frozenset[bytes]:
    return frozenset(os.fsencode(f"{k}={v}") for k, v in marker.items())


@dataclass
class RunTree:
    """A run: its main process (leader of its own group and session) and what it left."""

    pid: int
    start: int | None
    marker: frozenset[bytes]
    pipe: int | None = None  # inode of the pipe the run's output goes to
    members: dict[int, int] = field(default_factory=dict)  # pid -> start ticks, now
    seen: dict[int, int] = field(default_factory=dict)  # members and gone group leaders
    ending: asyncio.Future[int] | None = None

    def group_possible(self, snap: Mapping[int, Proc]) -> bool:
        """The run's group can only exist while its number is not another process's PID."""
        return self.pid not in snap or same_process(snap[self.pid], self.start)

    def collect(
        self,
        snap: Mapping[int, Proc],
        links: Mapping[int, list[int]],
        orphans: Iterable[Proc],
        environ: Mapping[tuple[int, int], frozenset[bytes]],
        roots: set[int],
        adopted: Iterable[int] = (),
    ) -> None:
        """Record everything of this tree in `snap` but the main process, zombies included:
        descendants of the main process and of every member seen before, members of a
        group or session one of them leads (also after its leader is gone: the number
        stays reserved while the group lives), orphans carrying the run's marker, and
        the `adopted` orphans found to be this run's otherwise."""
        known = dict(self.seen)
        if self.start is not None:
            known[self.pid] = self.start
        elif self.pid not in snap:
            known[self.pid] = -1  # never identified; its group may still exist
        seeds: list[int] = []
        for pid, start in known.items():
            now = snap.get(pid)
            if now is None:
                seeds.extend(links.get(-pid, ()))  # what the gone leader's group still holds
            elif now.start == start:
                seeds.append(pid)
        after = self.start or 0
        for p in orphans:
            if p.start >= after and self.marker <= environ.get((p.pid, p.start), frozenset()):
                seeds.append(p.pid)
        seeds.extend(pid for pid in adopted if pid in snap)
        found: dict[int, Proc] = {}
        stack = seeds
        while stack:
            pid = stack.pop()
            if pid in found or (pid in roots and pid != self.pid):
                continue
            found[pid] = proc = snap[pid]
            stack.extend(links.get(pid, ()))
            for leader in (proc.session, proc.pgrp):  # a finished session or group leader
                if leader in snap and snap[leader].zombie:  # to reap (it founded this one)
                    stack.append(leader)
        found.pop(self.pid, None)
        self.members = {p.pid: p.start for p in found.values()}
        self.seen = dict(self.members)
        for pid, start in known.items():  # gone leaders whose group or session lives on
            if pid != self.pid and pid not in snap and links.get(-pid):
                self.seen[pid] = start

    def members_in(self, snap: Mapping[int, Proc]) -> dict[int, Proc]:
        return {p: snap[p] for p, s in self.members.items() if p in snap and snap[p].start == s}

    def main_in(self, snap: Mapping[int, Proc]) -> Proc | None:
        main = snap.get(self.pid)
        return main if same_process(main, self.start) else None
