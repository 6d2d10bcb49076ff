"""Following runs while they go: a scan of /proc every `scan_every` seconds records each
run's descendants, matches orphans to their run, reaps their zombies, and ends a run's
whole tree when it ends."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Mapping

from tickui.common.procs import Proc, read_proc
from tickui.dispatch.containment.proctable import (
    HAVE_PROC,
    Snapshot,
    links,
    pipes_of,
    scan,
    tickui_environ,
)
from tickui.dispatch.containment.runtree import RunTree, marker_bytes, marker_for
from tickui.dispatch.containment.termination import end_group, end_tree
from tickui.model.records import Occurrence

log = logging.getLogger("tickui.dispatch")

PR_SET_CHILD_SUBREAPER = 36

_subreaper: bool | None = None


def enable_subreaper() -> bool:
    """Make this process a child subreaper (once); False where the kernel has no such thing."""
    global _subreaper
    if _subreaper is None:
        _subreaper = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
                _subreaper = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
            except (OSError, AttributeError):
                _subreaper = False
            if not _subreaper:
                log.warning(
                    "no child subreaper: runs that leave their process group may outlive it"
                )
    return _subreaper


class Containment:
    """Tracks every run's descendants and terminates a run's whole tree when it ends."""

    def __init__(self, scan_every: float = 0.25) -> None:
        self.scan_every = scan_every
        self.subreaper = enable_subreaper()
        self.tracking = HAVE_PROC
        self._me = os.getpid()
        self._session = os.getsid(0)
        self._trees: dict[int, RunTree] = {}
        self._environ: dict[tuple[int, int], frozenset[bytes]] = {}
        self._pipes: dict[tuple[int, int], frozenset[int]] = {}  # of unmarked orphans
        self._lock = threading.Lock()
        self._watch: asyncio.Task[None] | None = None
        self._survey_task: asyncio.Future[Snapshot] | None = None
        self._survey_began = 0.0
        self.spawning = 0  # runs being started (see _not_spawning)
        self.scans = 0
        self.scan_seconds = 0.0  # total, for measuring what tracking costs
        self.scan_max = 0.0

    # ---- registration ----------------------------------------------------------------

    def track(self, occurrence: Occurrence, pid: int, output: int | None = None) -> None:
        """Follow `occurrence`'s run, whose main process `pid` leads its own group and
        session and carries `marker_for(occurrence)` in its environment; `output` is a
        file descriptor of the pipe its output goes to. Call it right after the process
        starts. Never raises (a run it cannot follow is ended by group)."""
        self.follow(occurrence.id, marker_for(occurrence), pid, output)

    def follow(self, key: int, marker: Mapping[str, str], pid: int, output: int | None) -> None:
        """`track` for any run: `key` names it here, `marker` is the set of TICKUI_* entries
        its environment carries (a worker's runs are not occurrences of a local store)."""
        try:
            proc = read_proc(pid) if self.tracking else None
            pipe = os.fstat(output).st_ino if output is not None else None
            start = proc.start if proc else None
            self._trees[key] = RunTree(pid, start, marker_bytes(marker), pipe)
            if self.tracking and (self._watch is None or self._watch.done()):
                self._watch = asyncio.get_running_loop().create_task(self._follow())
        except Exception:
            log.exception("cannot follow the processes of run %s", key)

    def knows(self, key: int) -> bool:
        return key in self._trees

    def tracked(self, key: int) -> set[int]:
        """The pids last seen in run `key`'s tree besides its main process (for tests)."""
        tree = self._trees.get(key)
        return set(tree.members) if tree else set()

    async def _follow(self) -> None:
        """While runs are active: record their descendants, reap their reparented zombies."""
        loop = asyncio.get_running_loop()
        while self._trees:
            try:
                await self._survey(loop.time() - self.scan_every / 2)
            except Exception:
                log.exception("following runs' processes failed")
            await asyncio.sleep(self.scan_every)

    # ---- scanning --------------------------------------------------------------------

    def _scan_sync(
        self, roots: set[int]
    ) -> tuple[dict[int, Proc], dict[int, list[int]], list[Proc], dict, dict]:
        with self._lock:  # two surveys may overlap (the follower and an ending run)
            return self._scan_locked(roots)

    def _scan_locked(
        self, roots: set[int]
    ) -> tuple[dict[int, Proc], dict[int, list[int]], list[Proc], dict, dict]:
        began = time.perf_counter()
        snap = scan()
        linked = links(snap)
        adopters = {self._me} if self.subreaper else {self._me, 1}
        orphans = [
            p for p in snap.values() if p.ppid in adopters and p.pid not in roots and not p.zombie
        ]
        seen = set()
        for p in orphans:
            key = (p.pid, p.start)
            seen.add(key)
            if key not in self._environ:
                self._environ[key] = tickui_environ(p.pid)
            if self._unmarked(p) and key not in self._pipes:
                self._pipes[key] = pipes_of(p.pid)
        for key in [k for k in self._environ if k not in seen]:
            del self._environ[key]
        for key in [k for k in self._pipes if k not in seen]:
            del self._pipes[key]
        spent = time.perf_counter() - began
        self.scans += 1
        self.scan_seconds += spent
        self.scan_max = max(self.scan_max, spent)
        return snap, linked, orphans, dict(self._environ), dict(self._pipes)

    def _unmarked(self, p: Proc) -> bool:
        """An orphan that carries no run's marker and was not started by tickui itself
        (whose own children stay in its session; a run's descendants never can)."""
        env = self._environ.get((p.pid, p.start), frozenset())
        return p.session != self._session and not any(
            e.startswith(b"TICKUI_OCCURRENCE_ID=") for e in env
        )

    def _adopt(
        self, orphans: Iterable[Proc], pipes: Mapping[tuple[int, int], frozenset[int]]
    ) -> dict[int, list[int]]:
        """Which run each orphan without a marker came from: the run whose output pipe it
        holds; else, for one reparented to tickui, the run active when it started if only
        one was, or every such run once all of them are ending. Run key -> pids."""
        out: dict[int, list[int]] = {}
        trees = list(self._trees.items())
        for p in orphans:
            held = pipes.get((p.pid, p.start))
            if held is None:
                continue
            owners = [k for k, t in trees if t.pipe is not None and t.pipe in held]
            if not owners and p.ppid == self._me:
                before = [(k, t) for k, t in trees if t.start is not None and t.start <= p.start]
                going = [k for k, t in before if t.ending is None]
                owners = going if len(going) == 1 else [k for k, _ in before] if not going else []
            for key in owners:
                out.setdefault(key, []).append(p.pid)
        return out

    async def _survey(self, after: float | None = None) -> Snapshot:
        """A survey begun at or after loop time `after` (default: now): the one in flight
        or the last one if it began late enough, else a new one. Runs being ended at once
        share scans instead of each scanning every POLL."""
        loop = asyncio.get_running_loop()
        after = loop.time() if after is None else after
        if self._survey_task is None or self._survey_began < after:
            self._survey_began = loop.time()
            self._survey_task = asyncio.ensure_future(self._survey_once())
        return await asyncio.shield(self._survey_task)

    async def _survey_once(self) -> Snapshot:
        """Scan once, record every tracked tree's members, reap their reparented zombies."""
        roots = {t.pid for t in self._trees.values()}
        snap, linked, orphans, environ, pipes = await asyncio.to_thread(self._scan_sync, roots)
        roots = {t.pid for t in self._trees.values()}
        if self.spawning:
            orphans = self._not_spawning(orphans, environ)
        adopted = self._adopt(orphans, pipes)
        for key, tree in list(self._trees.items()):
            tree.collect(snap, linked, orphans, environ, roots, adopted.get(key, ()))
        self._reap(snap, roots)
        return snap

    def _not_spawning(
        self, orphans: list[Proc], environ: Mapping[tuple[int, int], frozenset[bytes]]
    ) -> list[Proc]:
        """While a run is being started, a child of ours that no tracked run's marker names
        may be that run's process, not yet tracked (between fork and exec it even holds
        every run's pipes): never adopt it into another run, whose end would kill it."""
        markers = [t.marker for t in self._trees.values()]
        return [
            p
            for p in orphans
            if p.ppid != self._me
            or any(mk <= environ.get((p.pid, p.start), frozenset()) for mk in markers)
        ]

    def _reap(self, snap: Mapping[int, Proc], roots: set[int]) -> None:
        """Wait for zombies reparented to tickui from a tracked tree, by pid (never a root)."""
        ours = {(p, s) for t in self._trees.values() for p, s in t.members.items()}
        for p in snap.values():
            if not p.zombie or p.ppid != self._me or p.pid in roots:
                continue
            if (p.pid, p.start) in ours or p.session in roots or p.pgrp in roots:
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(p.pid, os.WNOHANG)

    # ---- ending ----------------------------------------------------------------------

    async def end(self, key: int, grace: float) -> int:
        """Terminate run `key`'s whole tree: SIGTERM, SIGKILL after `grace`, until none is
        left. Returns how many of its processes were alive (the main one included). Safe
        to call twice (the second call waits for the first)."""
        tree = self._trees.get(key)
        if tree is None:
            return 0
        if tree.ending is None:
            tree.ending = asyncio.ensure_future(self._end(key, tree, grace))
        return await asyncio.shield(tree.ending)

    async def _end(self, key: int, tree: RunTree, grace: float) -> int:
        try:
            if not self.tracking:
                return await end_group(tree.pid, grace)

            async def survey(after: float) -> tuple[dict[int, Proc], Proc | None, bool]:
                snap = await self._survey(after)
                return tree.members_in(snap), tree.main_in(snap), tree.group_possible(snap)

            return await end_tree(tree, survey, grace, f"occurrence {key}")
        finally:
            self._trees.pop(key, None)

    async def shutdown(self, grace: float) -> None:
        """End every tracked tree (the engine stops) and stop following."""
        await asyncio.gather(
            *(self.end(key, grace) for key in list(self._trees)), return_exceptions=True
        )
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watch
