"""Containment of orphans that carry nothing of their run's environment.

A run whose short-lived helper starts `setsid env -i cmd &` and exits between two scans
leaves an orphan with no `TICKUI_*` variables, its own session and group, reparented to
the run's supervisor (a subreaper), which ends it with the run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid

import pytest

from helpers import rig, wait_for
from tickui.common.procs import read_proc
from tickui.common.timeutil import MICROS
from tickui.dispatch import containment
from tickui.dispatch.containment.proctable import scan

pytestmark = pytest.mark.skipif(
    not containment.HAVE_PROC or not containment.enable_subreaper(),
    reason="process containment needs Linux /proc and PR_SET_CHILD_SUBREAPER",
)


def sleepers(tag: str) -> set[int]:
    """Live (non-zombie) processes whose command line carries `tag`."""
    found = set()
    for pid in scan():
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as handle:
            if tag.encode() in handle.read().split(b"\0"):
                proc = read_proc(pid)
                if proc is not None and not proc.zombie:
                    found.add(pid)
    return found


@pytest.fixture
def tag():
    """A unique `sleep` argument to find the run's orphans by; they are killed afterwards."""
    value = f"{300 + uuid.uuid4().int % 10**6 / 10**7:.7f}"
    yield value
    for pid in sleepers(value):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def escaping(tag: str, closes_files: bool) -> list[str]:
    """A run whose helpers each leave one scrubbed, detached `sleep` and exit at once."""
    redirect = " </dev/null >/dev/null 2>&1" if closes_files else ""
    helper = f"setsid env -i sleep {tag}{redirect} &"
    return ["sh", "-c", f"while :; do sh -c '{helper}'; sleep 0.05; done"]


@pytest.mark.parametrize("closes_files", [False, True], ids=["keeps-output", "closes-files"])
async def test_scrubbed_orphans_end_with_their_timed_out_run(tmp_path, tag, closes_files):
    async with rig(tmp_path / "t.db") as r:
        await r.add("escape", every="1h", timeout="2s", command=escaping(tag, closes_files))
        await r.engine.start()
        await wait_for(lambda: len(sleepers(tag)) >= 3, 10, "orphans to be started")
        await r.settle(timeout=20)
        (run,) = await r.history()
        assert run.error_code == "TIMEOUT", (run.state, run.detail)
        await wait_for(lambda: not sleepers(tag), 10, "the orphans to be gone")


async def test_scrubbed_orphans_end_when_the_engine_stops(tmp_path, tag):
    async with rig(tmp_path / "t.db") as r:
        await r.add("escape", every="1h", command=escaping(tag, True))
        await r.add("other", every="1h", command=escaping(tag + "0", False))
        await r.engine.start()
        await wait_for(lambda: len(sleepers(tag)) >= 3, 10, "orphans to be started")
        await r.engine.stop(grace=0)
        assert not sleepers(tag) and not sleepers(tag + "0"), "an orphan outlived the engine"


async def test_an_unmarked_orphan_ends_with_its_own_run_not_another_going(tmp_path, tag):
    """Two runs active when the orphan started: it was reparented to its own run's
    supervisor, so it ends with that run, and the other run goes on."""
    async with rig(tmp_path / "t.db", lease_ttl=7200 * MICROS) as r:
        await r.add("long", every="1h", command=["sleep", "300"])
        await r.engine.start()
        (long,) = await r.history()
        await r.add("short", every="1h", command=["sh", "-c", escaping(tag, True)[2]])
        await r.tick(3600)
        await wait_for(lambda: len(sleepers(tag)) >= 2, 10, "orphans to be started")
        short = next(o for o in await r.history() if o.task == "short")
        assert await r.engine.cancel(short.id)
        assert not sleepers(tag), "an orphan of the cancelled run outlived it"
        assert r.engine.dispatcher.active() == 1, "the other run did not go on"
        assert await r.engine.cancel(long.id)
