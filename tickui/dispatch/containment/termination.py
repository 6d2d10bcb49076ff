"""Ending a run's tree: SIGTERM, SIGKILL after the grace, rescanning until none of it is
left; and the fallback where processes cannot be listed (its process group alone)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Mapping

from tickui.common.procs import Proc, group_alive, read_proc, signal_group
from tickui.dispatch.containment.proctable import same_process
from tickui.dispatch.containment.runtree import RunTree

log = logging.getLogger("tickui.dispatch")

POLL = 0.05  # how often a run being ended is rescanned
KILL_WAIT = 5.0  # after SIGKILL, how long to wait for the tree before giving up

# A look at the tree begun at or after the given loop time: its live members, its main
# process (None when gone), and whether its process group may still exist.
Survey = Callable[[float], Awaitable[tuple[dict[int, Proc], Proc | None, bool]]]


def signal_pid(pid: int, start: int, sig: signal.Signals) -> bool:
    """Signal `pid` only if it is still the process that started at `start` and not a zombie."""
    now = read_proc(pid)
    if now is None or now.zombie or now.start != start:
        return False
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def end_tree(tree: RunTree, survey: Survey, grace: float, what: str) -> int:
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
            if first((-1, p.pid)) and same_process(now, p.start) and now and now.pgrp == p.pid:
                signal_group(p.pid, sig)
    for p in live.values():
        if p.pgrp not in groups and first((p.pid, p.start)):
            signal_pid(p.pid, p.start, sig)


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
