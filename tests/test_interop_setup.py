"""`make interop` (scripts/interop.sh) set-up checks that need no Python 3.12 and no network:
the missing-Python line, and that interop/ stays out of the main suite. The interop tests
themselves run in .interop/'s Python 3.12 venvs (`make interop`)."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "interop.sh"


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30, cwd=ROOT
    )


def test_a_named_python_that_is_not_312_fails_with_one_line():
    env = dict(os.environ, INTEROP_PYTHON="/bin/false")
    result = _run(env)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "make interop: needs Python 3.12 (INTEROP_PYTHON=/bin/false is not a working Python 3.12)"
    ]


def test_no_python_312_anywhere_fails_with_one_line(tmp_path):
    # A PATH whose python3.12 is a broken shim (as pyenv's is when 3.12 is not the global
    # version), and a pyenv root without 3.12: nothing that really runs.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "ls", "sort", "cat"):
        (bin_dir / tool).symlink_to(subprocess.check_output(["which", tool], text=True).strip())
    shim = bin_dir / "python3.12"
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.12: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    (tmp_path / "pyenv" / "versions" / "3.11.7" / "bin").mkdir(parents=True)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "PYENV_ROOT": str(tmp_path / "pyenv")}
    result = _run(env)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("make interop: needs Python 3.12 (")
    assert "none found" in lines[0]


def test_interop_tests_stay_out_of_the_main_suite():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    assert config["ini_options"]["testpaths"] == ["tests"]
    assert ".interop/" in (ROOT / ".gitignore").read_text().splitlines()
    assert "interop:" in (ROOT / "Makefile").read_text()
