"""After a crash: ending what a vanished engine left of a run, found by its marker and
its process group, with no tracking from its start to go by."""

from __future__ import annotations

import asyncio
import contextlib
import os

from tickui.common.procs import Proc, group_alive
from tickui.dispatch.containment.proctable import (
    HAVE_PROC,
    links,
    same_process,
    scan,
    tickui_environ,
)
from tickui.dispatch.containment.runtree import RunTree, marker_bytes, marker_for
from tickui.dispatch.containment.termination import end_group, end_tree
from tickui.model.records import Occurrence


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
    tree = RunTree(pgid, start, marker_bytes(marker_for(occurrence)))
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
        main = main if same_process(main, start) and start is not None else None
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

    return await end_tree(tree, survey, grace, f"occurrence {occurrence.id} (orphaned)")
