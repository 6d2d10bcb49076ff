"""A small disk of its own for a test: a tmpfs mounted for it (root only: CI runs as root),
and a way to fill it to the last byte."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path

import pytest

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
