"""A supervisor its engine let go just before dying, before it wrote its journal, must not
start its command once another engine has read no journal and handed the slot back (a
takeover from a holder whose process is gone does not wait out its lease). Whoever takes
over fences a gone engine's runs by its lease file first. Real processes and files."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from disk_support import fill

from helpers import rig, wait_for
from tickui.common import procs
from tickui.common.timeutil import MICROS
from tickui.dispatch.journals import ENGINE_LEASES, FENCED_KEPT, fence_gone, runs_lease_path
from tickui.supervisor import journal as j
from tickui.supervisor.launch import supervisor_argv
from tickui.supervisor.lease import read_lease, write_lease
from tickui.supervisor.main import EXIT_NOT_STARTED

GONE_ENGINE = """
import sys, time
from pathlib import Path
from tickui.dispatch.journals import ENGINE_LEASES, runs_lease_path
from tickui.supervisor.lease import write_lease
path = runs_lease_path(Path(sys.argv[1]), ENGINE_LEASES)
write_lease(str(path), time.monotonic() + 600)
print(path)
"""


def _gone_engine(folder: Path) -> tuple[Path, int]:
    """The runs' lease file an engine process left when it died (deadline 10 min ahead)."""
    done = subprocess.run(
        [sys.executable, "-c", GONE_ENGINE, str(folder)], capture_output=True, text=True,
        check=True, timeout=60,
    )  # fmt: skip
    path = Path(done.stdout.strip())
    pid = int(path.name.removesuffix(".lease").rsplit("-", 2)[1])
    assert path.exists() and not procs.alive(pid, None), path
    return path, pid


def test_only_the_leases_of_gone_processes_are_zeroed_and_old_zeroed_ones_removed(tmp_path):
    gone, _ = _gone_engine(tmp_path)
    mine = runs_lease_path(tmp_path, ENGINE_LEASES)
    write_lease(str(mine), time.monotonic() + 600)
    other = tmp_path / f"worker-a-{gone.name.split('-', 1)[1]}"  # another prefix, same pid
    write_lease(str(other), time.monotonic() + 600)
    assert fence_gone(tmp_path, ENGINE_LEASES) == 1
    assert read_lease(str(gone)) == 0.0
    assert read_lease(str(mine)) > time.monotonic() and read_lease(str(other)) > 0
    assert fence_gone(tmp_path, ENGINE_LEASES) == 0 and gone.exists()  # zeroed, kept a while
    old = time.time() - FENCED_KEPT - 60
    os.utime(gone, (old, old))
    fence_gone(tmp_path, ENGINE_LEASES)
    assert not gone.exists() and mine.exists() and other.exists()


async def test_a_late_supervisor_of_a_gone_engine_never_starts_its_command(tmp_path):
    async with rig(tmp_path / "t.db", lease_ttl=600 * MICROS) as r:
        await r.add("late", every="1h", command=["true"])
        r.store.log_dir.mkdir(parents=True, exist_ok=True)
        lease, pid = _gone_engine(r.store.log_dir)
        # the gone engine held the lease for 10 minutes and had claimed the slot
        owner = f"{procs.host()}:{pid}:0000gone"
        now = r.clock.now()
        got = await r.store.acquire_lease(
            owner, now, 600 * MICROS, (procs.host(), pid, None), lambda *_: False
        )
        assert got.held and got.lease is not None
        task = await r.store.get_task("late")
        claimed = await r.store.claim_manual(task, owner, got.lease.token, now)
        journal = Path(r.store.log_dir) / f"{claimed.id}.journal"
        # this engine takes over at once (the holder's process is gone) and recovers
        await r.engine.start()
        await wait_for(lambda: r.engine.holds_lease, 10, "the takeover")
        (orphan,) = [o for o in await r.history("late") if o.id == claimed.id]
        await wait_for(
            lambda: read_lease(str(lease)) == 0.0, 10, "the gone engine's runs to be fenced"
        )
    assert not journal.exists()
    assert orphan.state == "skipped" and "never started" in (orphan.detail or ""), orphan
    # its supervisor comes to its go line only now: it must not start the command
    ran = tmp_path / "ran"
    late = supervisor_argv(
        ["sh", "-c", f"echo ran > {ran}"], journal=journal, log=journal.with_suffix(".log"),
        lease=lease, lease_deadline=time.monotonic() + 600,
    )  # fmt: skip
    done = subprocess.run(late, input=b"go\n", capture_output=True, timeout=30)
    assert done.returncode == EXIT_NOT_STARTED, done.stderr
    assert not ran.exists()
    record = j.read_journal(str(journal))
    assert record is not None and record["state"] == j.NOT_STARTED, record
    assert record.get("reason") == "fenced", record


def test_a_restarted_worker_fences_the_runs_of_its_earlier_process_first(tmp_path):
    """The same for a worker: before it says anything, a worker fences the runs of the
    earlier processes of its id (a broker it cannot reach does not keep it from that)."""
    folder = tmp_path / "logs" / "journal"
    folder.mkdir(parents=True)
    gone, _ = _gone_engine(folder)
    earlier = folder / gone.name.replace(f"{ENGINE_LEASES}-", "w1-", 1)
    gone.rename(earlier)
    worker = subprocess.Popen(
        [sys.executable, "-m", "tickui", "worker", "--id", "w1", "--insecure",
         "--kafka", "127.0.0.1:1", "--log-dir", str(tmp_path / "logs"),
         "--db", str(tmp_path / "t.db")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        end = time.monotonic() + 30
        while read_lease(str(earlier)) != 0.0 and time.monotonic() < end:
            assert worker.poll() is None or read_lease(str(earlier)) == 0.0, worker.stderr
            time.sleep(0.05)
        assert read_lease(str(earlier)) == 0.0
    finally:
        worker.kill()
        worker.wait(10)


def test_a_gone_engines_runs_are_fenced_on_a_full_disk_too(small_disk):
    """No room for the lease's new file: it is fenced in place, and a late supervisor of
    the gone engine still never starts its command."""
    lease, _ = _gone_engine(small_disk)
    filler = fill(small_disk)
    assert fence_gone(small_disk, ENGINE_LEASES) == 1
    assert read_lease(str(lease)) == 0.0
    assert [p.name for p in small_disk.iterdir() if p.suffix == ".tmp"] == []
    filler.unlink()  # room again, for the late supervisor's journal and log
    journal, ran = small_disk / "late.journal", small_disk / "ran"
    late = supervisor_argv(
        ["sh", "-c", f"echo ran > {ran}"], journal=journal, log=small_disk / "late.log",
        lease=lease, lease_deadline=time.monotonic() + 600,
    )  # fmt: skip
    done = subprocess.run(late, input=b"go\n", capture_output=True, timeout=30)
    assert done.returncode == EXIT_NOT_STARTED, done.stderr
    assert not ran.exists()
    assert (j.read_journal(str(journal)) or {}).get("reason") == "fenced"
