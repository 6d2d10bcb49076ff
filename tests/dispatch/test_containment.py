"""Process containment: nothing a run starts outlives it (real processes, /proc, psutil).

Every case records the pids the run's processes write about themselves, then asserts that
each of them is gone (not merely a zombie) once the run settled, was cancelled, timed out
or the engine stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from helpers import rig
from tickui.common.procs import read_proc
from tickui.dispatch import containment
from tickui.dispatch.containment import Containment
from tickui.dispatch.containment.proctable import scan
from tickui.dispatch.containment.termination import signal_pid

pytestmark = pytest.mark.skipif(
    not containment.HAVE_PROC or not containment.enable_subreaper(),
    reason="process containment needs Linux /proc and PR_SET_CHILD_SUBREAPER",
)

# A file the processes of a run write their pids into, one "name pid" line each.
SCRIPT = """
note() {{ echo "$1 $$" >> {pids}; }}
{body}
"""


@pytest.fixture(autouse=True)
def _kill_leftovers(request):
    """A failing case must not leave its sleepers behind: kill what this test started
    (pytest names the running test in the environment its processes inherit)."""
    mark = f"PYTEST_CURRENT_TEST={request.node.nodeid} (call)".encode()
    yield
    for pid in scan():
        with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as handle:
            if pid != os.getpid() and mark in handle.read():
                os.kill(pid, signal.SIGKILL)


def script(tmp_path: Path, body: str) -> tuple[list[str], Path]:
    pids = tmp_path / "pids"
    path = tmp_path / "run.sh"
    path.write_text(SCRIPT.format(pids=pids, body=body))
    return ["sh", str(path)], pids


def read_pids(pids: Path) -> dict[str, int]:
    if not pids.exists():
        return {}
    return {
        name: int(pid) for name, pid in (line.split() for line in pids.read_text().splitlines())
    }


async def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def wait_pids(
    pids: Path, names: set[str], timeout: float = 10, check: bool = True
) -> dict[str, int]:
    """The pids the run's processes wrote, once all of `names` are there (and running)."""

    def complete() -> dict[str, int] | None:
        found = read_pids(pids)
        return found if names <= set(found) else None

    found = await wait_for(complete, timeout, f"pids {sorted(names)}")
    for name in names if check else ():
        assert running(found[name]), f"{name} is not running"
    return found


def running(pid: int) -> bool:
    """True while `pid` exists at all, a zombie included (a zombie is not gone)."""
    try:
        psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return False
    return True


def survivors(found: dict[str, int]) -> dict[str, str]:
    left = {}
    for name, pid in found.items():
        with contextlib.suppress(psutil.NoSuchProcess):
            left[name] = psutil.Process(pid).status()
    return left


async def test_background_child_of_a_succeeded_run_is_gone_when_it_settles(tmp_path):
    command, pids = script(
        tmp_path,
        'sleep 300 &\necho "bg $!" >> {}\n'
        "setsid sh -c 'echo \"sid $$\" >> {}; exec sleep 300' &\n"
        "while [ $(wc -l < {}) -lt 2 ]; do :; done\nexit 0".format(
            tmp_path / "pids", tmp_path / "pids", tmp_path / "pids"
        ),
    )
    async with rig(tmp_path / "t.db") as r:
        await r.add("bg", every="1h", command=command)
        # beside it, a run whose own exit status must reach the history intact: the
        # reaping of orphans never takes asyncio's children
        await r.add("seven", every="1h", command=["sh", "-c", "sleep 0.3; exit 7"])
        await r.engine.start()
        # the run exits as soon as both are written, so they may be ended already
        found = await wait_pids(pids, {"bg", "sid"}, check=False)
        await r.settle()
        runs = {o.task: o for o in await r.history()}
        assert runs["bg"].state == "succeeded" and runs["bg"].exit_code == 0
        assert runs["seven"].exit_code == 7, (runs["seven"].state, runs["seven"].detail)
        assert survivors(found) == {}, "a background child outlived its succeeded run"


async def test_setsid_child_under_a_timeout_is_gone_after_the_timeout(tmp_path):
    command, pids = script(
        tmp_path,
        "note main\nsetsid sh -c '. {}; note sid; exec sleep 300' &\nsleep 300".format(
            tmp_path / "lib.sh"
        ),
    )
    (tmp_path / "lib.sh").write_text(f'note() {{ echo "$1 $$" >> {pids}; }}\n')
    async with rig(tmp_path / "t.db") as r:
        await r.add("slow", every="1h", timeout="1s", command=command)
        await r.engine.start()
        found = await wait_pids(pids, {"main", "sid"})
        assert os.getsid(found["sid"]) != os.getsid(found["main"]), "not in its own session"
        await r.settle()
        (run,) = await r.history()
        assert run.error_code == "TIMEOUT"
        assert survivors(found) == {}, "a setsid child escaped the timeout"


def daemon_body(tmp_path: Path) -> str:
    lib = tmp_path / "lib.sh"
    lib.write_text(f'note() {{ echo "$1 $$" >> {tmp_path / "pids"}; }}\n')
    return f"""
note main
sleep 300 &
echo "bg $!" >> {tmp_path / "pids"}
setsid sh -c '. {lib}; note sid; exec sleep 300' &
# a double fork: the subshell exits at once, its child is reparented to the run's
# supervisor
( sh -c '. {lib}; note forked; exec sleep 300' & )
# a daemon as daemons do it: fork, setsid, fork, and the middle one exits
( setsid sh -c '( sh -c ". {lib}; note daemon; exec sleep 300" & ); . {lib}; note middle' & )
# one that also drops tickui's variables from its environment, after its session
# leader was seen (found by the session it belongs to, not by its environment)
setsid sh -c '. {lib}; note leader; env -i sh -c ". {lib}; note bare; exec sleep 300" &
    sleep 0.6' &
sleep 300
"""


async def test_setsid_and_double_forked_children_are_gone_when_the_engine_stops(tmp_path):
    command, pids = script(tmp_path, daemon_body(tmp_path))
    names = {"main", "bg", "sid", "forked", "daemon", "middle", "leader", "bare"}
    async with rig(tmp_path / "t.db") as r:
        await r.add("tree", every="1h", command=command)
        await r.engine.start()
        found = await wait_pids(pids, names - {"middle", "leader"})
        assert os.getsid(found["daemon"]) != os.getsid(found["main"])
        bare = psutil.Process(found["bare"]).environ()
        assert not any(k.startswith("TICKUI_") for k in bare), "the bare child kept its env"
        # the daemon's parent and the bare one's session leader are gone by now
        await wait_for(lambda: not running(found["leader"]), 10, "the session leader to exit")
        assert running(found["bare"]) and running(found["daemon"])
        supervisor = psutil.Process(found["main"]).ppid()  # the run's, a subreaper
        # below the engine: its child, or its supervisor server's
        assert os.getpid() in [p.pid for p in psutil.Process(supervisor).parents()]
        assert psutil.Process(found["daemon"]).ppid() == supervisor, "not reparented there"
    assert survivors(found) == {}, "a child outlived the engine"


async def test_cancel_ends_the_whole_tree(tmp_path):
    command, pids = script(tmp_path, daemon_body(tmp_path))
    names = {"main", "bg", "sid", "forked", "daemon", "bare"}
    async with rig(tmp_path / "t.db") as r:
        await r.add("tree", every="1h", command=command)
        await r.engine.start()
        found = await wait_pids(pids, names)
        (run,) = await r.history()
        assert await asyncio.wait_for(r.engine.cancel(run.id), 15)
        assert survivors(found) == {}, "cancel left part of the tree"
        await r.settle()
        (run,) = await r.history()
        assert run.state == "cancelled"


async def test_a_command_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    command, pids = script(
        tmp_path,
        f"trap '' TERM\nnote main\nsh -c 'echo \"child $$\" >> {tmp_path / 'pids'}; "
        "exec sleep 300' &\nwait",
    )
    async with rig(tmp_path / "t.db") as r:  # kill_grace=1.0
        await r.add("stubborn", every="1h", command=command)
        await r.engine.start()
        found = await wait_pids(pids, {"main", "child"})
        (run,) = await r.history()
        began = time.monotonic()
        assert await asyncio.wait_for(r.engine.cancel(run.id), 10), "cancel hung"
        took = time.monotonic() - began
        assert survivors(found) == {}
        assert took >= 0.9, f"SIGTERM alone ended it ({took:.2f}s): it was not ignored"


async def test_the_process_group_is_signalled_as_a_group(tmp_path):
    """A child that stays in the run's group, and only the group signal reaches (the
    dispatcher must signal the group, not just its main process)."""
    command, pids = script(
        tmp_path,
        f"note main\nsh -c 'echo \"child $$\" >> {tmp_path / 'pids'}; exec sleep 300' &\nwait",
    )
    async with rig(tmp_path / "t.db") as r:
        await r.add("group", every="1h", command=command)
        await r.engine.start()
        found = await wait_pids(pids, {"main", "child"})
        assert os.getpgid(found["child"]) == found["main"]
        (run,) = await r.history()
        assert await asyncio.wait_for(r.engine.cancel(run.id), 10)
        assert survivors(found) == {}, "the run's group was not signalled as a group"


def test_a_reused_pid_is_never_signalled(tmp_path):
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        proc = read_proc(sleeper.pid)
        assert proc is not None
        assert not signal_pid(sleeper.pid, proc.start + 1, signal.SIGKILL)
        assert sleeper.poll() is None, "a process with another start time was signalled"
        assert signal_pid(sleeper.pid, proc.start, signal.SIGKILL)
        assert sleeper.wait(10) == -signal.SIGKILL
    finally:
        sleeper.kill()
        sleeper.wait()


async def test_an_orphaned_run_is_found_by_its_environment_after_a_crash(tmp_path):
    """What a kill -9'd engine left: the main process and a setsid child that carries the
    occurrence's variables, reparented elsewhere; end_orphaned_run finds and ends both."""
    from tickui.model.records import Occurrence

    pids = tmp_path / "pids"
    lib = tmp_path / "lib.sh"
    lib.write_text(f'note() {{ echo "$1 $$" >> {pids}; }}\n')
    occ = Occurrence(
        id=41,
        task_id=1,
        task="t",
        kind="scheduled",
        scheduled_for=1_800_000_000_000_000,
        state="running",
        claimed_at=0,
    )
    env = {**os.environ, **containment.marker_for(occ)}
    body = f". {lib}; note main; setsid sh -c '. {lib}; note sid; exec sleep 300' & sleep 300"
    # started by a throwaway parent that exits, as a crashed engine would leave it
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; subprocess.Popen(sys.argv[1:], start_new_session=True)",
            "sh",
            "-c",
            body,
        ],
        env=env,
        check=True,
    )
    found = await wait_pids(pids, {"main", "sid"})
    main = read_proc(found["main"])
    assert main is not None
    occ.pid = occ.pgid = found["main"]
    occ.pid_start = main.start
    # the same occurrence id from another database: another slot, or the same slot claimed
    # by another engine; neither is this run's
    others = [
        {**env, "TICKUI_SCHEDULED_FOR": "2027-01-15T08:01:00+00:00"},
        {**env, "TICKUI_ENGINE": "other-box:77:0badf00d"},
    ]
    decoys = [subprocess.Popen(["sleep", "300"], env=e, start_new_session=True) for e in others]
    try:
        assert await containment.end_orphaned_run(occ, grace=1.0) >= 2
        await wait_for(lambda: not survivors(found), 10, "the orphaned tree to end")
        for decoy in decoys:
            assert decoy.poll() is None, "a process of another run was killed"
    finally:
        for decoy in decoys:
            decoy.kill()
            decoy.wait()


async def test_two_engines_in_one_process_never_end_each_others_runs(tmp_path):
    """Two databases, each with occurrence 1 of the same slot, run by two engines in one
    process (whose children both are): stopping one engine ends its run only."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    first, first_pids = script(tmp_path / "a", "note main\nexec sleep 300")
    second, second_pids = script(tmp_path / "b", "note main\nexec sleep 300")
    async with contextlib.AsyncExitStack() as stack:
        a = await stack.enter_async_context(rig(tmp_path / "a" / "t.db"))
        await a.add("same", every="1h", command=first)
        await a.engine.start()
        ended = await wait_pids(first_pids, {"main"})
        async with rig(tmp_path / "b" / "t.db") as b:  # started after a's run
            await b.add("same", every="1h", command=second)
            await b.engine.start()
            kept = await wait_pids(second_pids, {"main"})
            runs = [(await r.history())[0] for r in (a, b)]
            assert {(o.id, o.scheduled_for) for o in runs} == {(1, runs[0].scheduled_for)}
            await stack.aclose()  # a stops while b runs
            await wait_for(lambda: not survivors(ended), 10, "the stopped engine's run to end")
            await asyncio.sleep(0.6)  # two containment scans (0.25 s apart) after the stop
            assert survivors(kept), "stopping one engine ended the other engine's run"


async def test_scans_are_cheap_and_off_the_loop(tmp_path):
    """Records what one /proc scan costs here (printed with -s); the scan runs in a thread."""
    c = Containment()
    began = time.perf_counter()
    for _ in range(20):
        await asyncio.to_thread(c._scan_sync, set())
    per_scan = (time.perf_counter() - began) / 20
    print(f"\n/proc scan: {len(scan())} processes, {per_scan * 1000:.2f} ms a scan")
    assert c.scans == 20


async def test_without_proc_the_process_group_is_still_ended(tmp_path):
    """The fallback where processes cannot be listed (macOS, the BSDs): the run's group is
    signalled as a group, SIGKILL after the grace; a setsid child is out of reach there."""
    command, pids = script(
        tmp_path,
        "trap '' TERM\nnote main\n"
        f"sh -c 'echo \"child $$\" >> {tmp_path / 'pids'}; exec sleep 300' &\nwait",
    )
    async with rig(tmp_path / "t.db") as r:
        r.engine.dispatcher._containment.tracking = False
        await r.add("fallback", every="1h", command=command)
        await r.engine.start()
        found = await wait_pids(pids, {"main", "child"})
        (run,) = await r.history()
        assert await asyncio.wait_for(r.engine.cancel(run.id), 10), "cancel hung"
        # nothing reaps here without tracking (init would, where there is no subreaper)
        live = lambda: {n: s for n, s in survivors(found).items() if s != "zombie"}  # noqa: E731
        await wait_for(lambda: not live(), 10, "the group to end")
        for pid in found.values():
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


async def test_what_ignores_sigterm_is_killed_after_the_default_3_s_grace(tmp_path):
    """README: SIGTERM, then SIGKILL after the grace (3 s) to what is left: with the
    dispatcher's own default, a cancel that SIGTERM cannot end takes 3 s (up to 1 s more
    for the kill, the reaping and a loaded machine), never less."""
    from helpers import T0
    from tickui.common.clock import ManualClock
    from tickui.dispatch import SubprocessDispatcher
    from tickui.engine import SchedulerEngine
    from tickui.model.spec import build_spec
    from tickui.store import Store

    command, pids = script(tmp_path, "trap '' TERM\nnote main\nexec sleep 300")
    store = await Store.open(tmp_path / "t.db")
    clock = ManualClock(T0)
    engine = SchedulerEngine(store, SubprocessDispatcher(store, clock), clock)
    try:
        await store.add_task(build_spec({"name": "stubborn", "every": "1h",
                                         "command": command}, T0), T0)  # fmt: skip
        await engine.start()
        found = await wait_pids(pids, {"main"})
        (run,) = await store.history()
        began = time.monotonic()
        assert await asyncio.wait_for(engine.cancel(run.id), 10), "cancel hung"
        took = time.monotonic() - began
        assert survivors(found) == {}
        assert 3.0 <= took <= 3.0 + 1.0, f"the kill came {took:.2f} s after SIGTERM"
    finally:
        await engine.stop(grace=0)
        await store.close()


async def test_while_runs_are_active_proc_is_scanned_every_quarter_second(tmp_path):
    """README: a scan of /proc every 0.25 s while runs are active. Four scans take 1 s,
    with 0.4 s allowed for the scans themselves on a loaded machine, never less."""
    async with rig(tmp_path / "t.db") as r:
        await r.add("sleeper", every="1h", command=["sleep", "5"])
        tracker = r.engine.dispatcher.runner.containment
        await r.engine.start()
        await wait_for(lambda: tracker.scans >= 1, 5, "the first scan")
        loop = asyncio.get_running_loop()
        first, began = tracker.scans, loop.time()
        await wait_for(lambda: tracker.scans >= first + 4, 5, "four more scans")
        took = loop.time() - began
        assert 1.0 - 0.05 <= took <= 1.0 + 0.4, f"four scans took {took:.2f} s"
