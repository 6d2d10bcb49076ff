"""The listing commands and --help load only what they use: a heavy import added back at
module level (the dashboard, Kafka, the dispatchers, the engine) shows up here. Their speed
is measured by benchmarks/cli_startup.py, not here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import cli

# Never loaded by --help, `task list`, `history` or `audit`.
HEAVY = (
    "textual",
    "aiokafka",
    "redis",
    "urllib.request",
    "tickui.dispatch",
    "tickui.engine",
    "tickui.ui",
    "tickui.hooks",
    "tickui.cli.changes",
    # Nor these, each a few milliseconds to load: typing (names for annotations only),
    # shutil with bz2 and lzma (argparse asks it for the terminal's width), socket (the
    # host name), the tick wire formats with json, and the Kafka connection.
    "typing",
    "shutil",
    "socket",
    "tickui.ticks.wire",
    "tickui.common.kafka",
)
# The listings of a SQLite file read it through a blocking read-only connection
# (tickui.store.reader): no event loop, no aiosqlite, no store implementation.
LISTING_ALSO = (
    "asyncio",
    "aiosqlite",
    "tickui.store.base",
    "tickui.store.sqlite",
    "logging",
    # the records they do not read: the occurrence state machine's, the engine's lease,
    # run requests and workers'
    "tickui.model.occurrence",
    "tickui.model.coordination",
)
# --help reads no database and runs no event loop.
HELP_ALSO = (
    "asyncio",
    "aiosqlite",
    "sqlite3",
    "tickui.store",
    "tickui.runtime",
    "tickui.schedules.triggers",  # (schedules.cron's table of @words is in --cron's help)
)


def loaded(*args: str) -> set[str]:
    """The modules `python -m tickui ARGS` imports, from -X importtime's report."""
    env = {k: v for k, v in os.environ.items() if k != "TICKUI_DB"}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tickui", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    return {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "self [us]" not in line
    }


def among(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    """A database with a task and a few runs of it."""
    path = tmp_path_factory.mktemp("startup") / "t.db"
    assert cli("task", "add", "often", "--every", "1s", "--", "true", db=path).returncode == 0
    assert cli("run", "--for", "1.5", "-q", db=path).returncode == 0
    return path


def test_help_loads_no_store_no_event_loop_and_nothing_heavy():
    modules = loaded("--help")
    assert "tickui.cli.main" in modules  # the report was read
    assert among(modules, HEAVY + HELP_ALSO) == []


@pytest.mark.parametrize(
    "args",
    [
        ("task", "list"),
        ("task", "list", "--json"),
        ("history", "--limit", "20"),
        ("history", "--limit", "20", "--json"),
        ("audit",),
        ("audit", "--task", "often", "--json"),
    ],
    ids=" ".join,
)
def test_a_listing_loads_the_store_and_nothing_heavy(db, args):
    modules = loaded(*args, "--db", str(db))
    assert "tickui.store.reader" in modules
    assert among(modules, HEAVY + LISTING_ALSO) == []
