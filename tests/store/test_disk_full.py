"""A full disk under the database: one warning per outage, a visible state, nothing lost.

The database lives on a small tmpfs mounted for the test (root only: CI runs as root),
filled to the last byte with a filler file and freed again.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import subprocess
from pathlib import Path

import pytest

from helpers import rig
from services import cannot_here


@pytest.fixture
def small_disk(tmp_path: Path):
    if os.geteuid() != 0:
        cannot_here("needs root to mount a small tmpfs")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Write a filler file until the disk is full; return it (delete it to free space)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 65536, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size):
                    pass
    finally:
        os.close(fd)
    with pytest.raises(OSError) as full:
        probe = os.open(disk / "probe", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.write(probe, b"\0" * 4096)
        finally:
            os.close(probe)
    assert full.value.errno == errno.ENOSPC
    return filler


async def test_full_disk_is_one_warning_a_visible_state_and_nothing_lost(small_disk, caplog):
    caplog.set_level(logging.INFO, logger="tickui")
    flag = small_disk.parent / "release"
    async with rig(small_disk / "t.db") as r:
        # One run is in flight across the outage; it ends when the test says so.
        await r.add(
            "long",
            every="1h",
            command=["sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.02; done; echo done"],
        )
        await r.add("beat", every="1s", command=["echo", "beat"])
        await r.engine.start()
        filler = fill(small_disk)
        for _ in range(5):
            await r.tick(1)
        status = r.engine.status()
        assert status.result == "error", status
        assert status.detail.startswith("disk full"), status.detail
        warnings = [m for m in caplog.messages if "failed" in m and "disk full" in m]
        assert len(warnings) == 1, caplog.messages
        assert "Traceback" not in caplog.text

        flag.touch()  # the long run ends while the disk is still full
        await asyncio.sleep(0.5)
        # Its last line could not be written: the status says so, once space is short.
        assert "run output not written" in (r.engine.status().warning or "")
        filler.unlink()
        await r.tick(1)
        assert r.engine.status().result == "ok", r.engine.status()
        assert any("works again" in m for m in caplog.messages)
        await r.settle()
        long_runs = await r.history("long")
        assert [o.state for o in long_runs] == ["succeeded"], [
            (o.state, o.error_code, o.detail) for o in long_runs
        ]
        beats = await r.history("beat")
        assert beats and all(o.state in ("succeeded", "skipped") for o in beats)
        assert r.engine.status().result == "ok"
        # Runs that ended during the outage were not known to have ended, so `forbid`
        # skipped the slots meanwhile; the next slot runs and its output is written.
        await r.tick(1)
        await r.settle()
        assert (await r.history("beat"))[-1].state == "succeeded"
        assert r.engine.status().warning is None
