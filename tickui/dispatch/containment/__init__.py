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

from tickui.dispatch.containment.orphaned import end_orphaned_run
from tickui.dispatch.containment.proctable import HAVE_PROC
from tickui.dispatch.containment.runtree import marker_for
from tickui.dispatch.containment.termination import end_group
from tickui.dispatch.containment.tracker import Containment, enable_subreaper

__all__ = [
    "HAVE_PROC",
    "Containment",
    "enable_subreaper",
    "end_group",
    "end_orphaned_run",
    "marker_for",
]
