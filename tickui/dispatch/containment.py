"""Process containment: every descendant of a run ends with the run.

On Linux tickui makes itself a child subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`), so a
process that leaves its parent (`cmd &` then exit, `setsid`, a double fork) is reparented
to tickui instead of init and stays in view. While runs are active, a scan of /proc (every
`scan_every` seconds, off the event loop) records each run's descendants as (pid, start
ticks); orphans reparented to tickui are matched to their run by the `TICKUI_*` variables
in their environment, and members of the run's process group or session count too.

An orphan that scrubbed its environment (`setsid env -i cmd &`) and whose parent died
between two scans carries nothing of its run but what it inherited: it is matched by the
run's output pipe among its open files, and failing that (it closed them too) by time:
tickui starts no process outside a run in a session of its own, so such an orphan came
from a run that was active when it started. It belongs to that run when only one was;
when several were, it is ended with the last of them (never with a run still going).

Ending a run (its main process exited, it timed out, was cancelled, or the engine stops)
signals its process group as a group, every other group whose leader is a verified member
as a group, and every remaining member one by one after checking its start ticks (a
reused PID is never signalled): SIGTERM, then SIGKILL after the grace, rescanning until
nothing of the tree is left. Zombies of reparented orphans are reaped by pid; the run's
main process is asyncio's child and is never waited for here.

Without /proc (macOS, the BSDs) only the run's process group is signalled: children that
leave it (`setsid`, a daemon's double fork) are not found. On a Linux that refuses the
subreaper, orphans are looked for among init's children too (found while they keep the
run's variables; reaping them is init's business).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from tickui.common.procs import Proc, group_alive, read_proc, signal_group
from tickui.common.timeutil import iso
from tickui.model.records import Occurrence

log = logging.getLogger("tickui.dispatch")

PR_SET_CHILD_SUBREAPER = 36
HAVE_PROC = sys.platform.startswith("linux") and os.path.isdir("/proc/self")
POLL = 0.05  # how often a run being ended is rescanned
KILL_WAIT = 5.0  # after SIGKILL, how long to wait for the tree before giving up

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


def _marker_bytes(marker: Mapping[str, str]) -> frozenset[bytes]:
    return frozenset(os.fsencode(f"{k}={v}") for k, v in marker.items())


# ---- /proc -------------------------------------------------------------------------------


def scan() -> dict[int, Proc]:
    """Every process in /proc (this costs about 7 us a process; run it in a thread)."""
    found: dict[int, Proc] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if name.isdigit():
            proc = read_proc(int(name))
            if proc is not None:
                found[proc.pid] = proc
    return found


def links(snap: Mapping[int, Proc]) -> dict[int, list[int]]:
    """Who leads to whom: pid -> its children and, for a group or session leader, the
    members of its group and session; -pid -> the same members (when the leader is gone)."""
    out: dict[int, list[int]] = {}
    for p in snap.values():
        out.setdefault(p.ppid, []).append(p.pid)
        for leader in {p.pgrp, p.session}:
            if leader != p.pid and leader > 1:
                if leader in snap:
                    out.setdefault(leader, []).append(p.pid)
                out.setdefault(-leader, []).append(p.pid)
    return out


def pipes_of(pid: int) -> frozenset[int]:
    """The inodes of the pipes among a process's open files (empty when unreadable)."""
    found = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return frozenset()
    for name in names:
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{name}")
            if target.startswith("pipe:["):
                with contextlib.suppress(ValueError):
                    found.add(int(target[6:-1]))
    return frozenset(found)


def tickui_environ(pid: int) -> frozenset[bytes]:
    """The `TICKUI_*` entries of a process's environment (empty when unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            data = handle.read()
    except OSError:
        return frozenset()
    return frozenset(e for e in data.split(b"\0") if e.startswith(b"TICKUI_"))


def _same(proc: Proc | None, start: int | None) -> bool:
    """`proc` is the process that started at `start` (an unknown start proves nothing)."""
    return proc is not None and start is not None and proc.start == start


def _signal_pid(pid: int, start: int, sig: signal.Signals) -> bool:
    """Signal `pid` only if it is still the process that started at `start` and not a zombie."""
    now = read_proc(pid)
    if now is None or now.zombie or now.start != start:
        return False
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


# ---- one run's tree ----------------------------------------------------------------------


@dataclass
class _Tree:
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
        return self.pid not in snap or _same(snap[self.pid], self.start)

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
        return main if _same(main, self.start) else None


class Containment:
    """Tracks every run's descendants and terminates a run's whole tree when it ends."""

    def __init__(self, scan_every: float = 0.25) -> None:
        self.scan_every = scan_every
        self.subreaper = enable_subreaper()
        self.tracking = HAVE_PROC
        self._me = os.getpid()
        self._session = os.getsid(0)
        self._trees: dict[int, _Tree] = {}
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
            self._trees[key] = _Tree(pid, start, _marker_bytes(marker), pipe)
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

    async def _end(self, key: int, tree: _Tree, grace: float) -> int:
        try:
            if not self.tracking:
                return await end_group(tree.pid, grace)

            async def survey(after: float) -> tuple[dict[int, Proc], Proc | None, bool]:
                snap = await self._survey(after)
                return tree.members_in(snap), tree.main_in(snap), tree.group_possible(snap)

            return await _end_tree(tree, survey, grace, f"occurrence {key}")
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


Snapshot = dict[int, Proc]
Survey = Callable[[float], Awaitable[tuple[dict[int, Proc], Proc | None, bool]]]


async def _end_tree(tree: _Tree, survey: Survey, grace: float, what: str) -> int:
    """SIGTERM the tree, SIGKILL what is left after `grace`, rescanning until it is gone."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    give_up: float | None = None
    sig = signal.SIGTERM
    sent: set[tuple[int, int]] = set()
    seen: set[int] = set()
    signalled = loop.time()
    me = os.getpid()
    while True:
        members, main, group_ok = await survey(signalled)  # a scan begun after the signals
        live = {p.pid: p for p in members.values() if not p.zombie}
        main_live = main is not None and not main.zombie
        seen.update(live)
        if main_live:
            seen.add(tree.pid)
        # a zombie is over; only those this process must reap (reparented here) are waited
        # for, so they are gone, not merely dead, when the run is recorded as ended
        reaping = any(p.zombie and p.ppid == me for p in members.values())
        if not live and not main_live and not reaping:
            return len(seen)
        now = loop.time()
        if sig == signal.SIGTERM and now >= deadline:
            sig = signal.SIGKILL
            give_up = now + KILL_WAIT
        if give_up is not None and now >= give_up:
            left = sorted(live) + ([tree.pid] if main_live else [])
            log.warning("%s: processes left after SIGKILL: %s", what, left or "zombies")
            return len(seen)
        signalled = loop.time()
        _signal_tree(tree.pid, group_ok, main_live, live, sig, sent)
        await asyncio.sleep(POLL)


def _signal_tree(
    root: int,
    group_ok: bool,
    main_live: bool,
    live: Mapping[int, Proc],
    sig: signal.Signals,
    sent: set[tuple[int, int]],
) -> None:
    """Signal the run's group as a group, groups led by a verified member as groups, and
    every other member by pid. SIGTERM goes once to each; SIGKILL on every pass."""

    def first(key: tuple[int, int]) -> bool:
        if sig == signal.SIGTERM and key in sent:
            return False
        sent.add(key)
        return True

    groups: set[int] = set()
    if group_ok and (main_live or any(p.pgrp == root for p in live.values())):
        groups.add(root)
        if first((-1, root)):
            signal_group(root, sig)
    for p in live.values():
        if p.pgrp == p.pid and p.pid not in groups:
            groups.add(p.pid)
            now = read_proc(p.pid)
            if first((-1, p.pid)) and _same(now, p.start) and now and now.pgrp == p.pid:
                signal_group(p.pid, sig)
    for p in live.values():
        if p.pgrp not in groups and first((p.pid, p.start)):
            _signal_pid(p.pid, p.start, sig)


async def end_group(pgid: int, grace: float) -> int:
    """Where processes cannot be listed: SIGTERM the group, SIGKILL it after the grace."""
    if not signal_group(pgid, signal.SIGTERM):
        return 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while loop.time() < deadline:
        await asyncio.sleep(POLL)
        if not group_alive(pgid):
            return 0
    signal_group(pgid, signal.SIGKILL)
    return 0


# ---- after a crash -----------------------------------------------------------------------


async def end_orphaned_run(occurrence: Occurrence, grace: float = 2.0) -> int:
    """Terminate what a vanished engine left of `occurrence`: its process group and session
    (if their number is not another process's PID now), every process carrying its
    `TICKUI_OCCURRENCE_ID` and `TICKUI_SCHEDULED_FOR` that started after its main process,
    and their descendants, wherever they were reparented. SIGTERM, SIGKILL after `grace`.
    Returns how many processes were alive (0: nothing was left to kill)."""
    pgid = occurrence.pgid or occurrence.pid
    if not pgid:
        return 0
    start = occurrence.pid_start if occurrence.pid == pgid else None
    tree = _Tree(pgid, start, _marker_bytes(marker_for(occurrence)))
    if not HAVE_PROC:
        alive = group_alive(pgid)
        await end_group(pgid, grace)
        return int(alive)
    after = occurrence.pid_start

    def look() -> tuple[dict[int, Proc], Proc | None, bool]:
        snap = scan()
        candidates = [
            p for p in snap.values() if not p.zombie and (after is None or p.start >= after)
        ]
        environ = {(p.pid, p.start): tickui_environ(p.pid) for p in candidates}
        main = snap.get(pgid)
        main = main if _same(main, start) and start is not None else None
        group_ok = pgid not in snap or main is not None
        tree.collect(snap, links(snap), candidates, environ, set())
        members = tree.members_in(snap)
        me = os.getpid()
        for p in [*members.values(), *([main] if main else [])]:  # reparented here
            if p.zombie and p.ppid == me:  # (this process is a subreaper above them)
                with contextlib.suppress(OSError):
                    os.waitpid(p.pid, os.WNOHANG)
        return members, main, group_ok

    async def survey(after: float) -> tuple[dict[int, Proc], Proc | None, bool]:
        return await asyncio.to_thread(look)

    return await _end_tree(tree, survey, grace, f"occurrence {occurrence.id} (orphaned)")
