"""Shared pytest fixtures for tickui. Add new fixtures under the matching section."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from disk_support import small_disk  # noqa: F401  (a fixture: a small tmpfs of its own)

import services  # tests/services.py: pytest puts tests/ on sys.path for this rootdir conftest
import signing_support  # noqa: F401  (sets TICKUI_KEY_FILE for every engine and worker)
from tickui.supervisor.journal import start_ticks
from tickui.supervisor.tree import descendants

# ---- files -----------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def private_config_home(tmp_path_factory, monkeypatch) -> Path:
    """Every test gets its own XDG_CONFIG_HOME: settings written by the dashboard never reach
    (or read) the real user's config folder."""
    home = tmp_path_factory.mktemp("config-home")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    # The dashboard shows local time by default: the same "local" on every machine.
    monkeypatch.setenv("TZ", "UTC")
    return home


@pytest.fixture
def tmp_db(tmp_path: Path) -> Path:
    """Path of a not yet created SQLite database in the test's own directory."""
    return tmp_path / "tickui.db"


# ---- real services (started by scripts/services.sh; see tests/services.py) --------------------

STORES = ("sqlite", "postgresql")


@pytest.fixture(params=STORES)
def store_target(request, tmp_path: Path):
    """Where a test's store lives, once on each kind: a new SQLite file's path, or the URL
    of a new database of its own on the test PostgreSQL server (dropped after the test)."""
    if request.param == "sqlite":
        yield tmp_path / "tickui.db"
        return
    url = services.create_pg_database()
    try:
        yield url
    finally:
        services.drop_pg_database(url)


@pytest.fixture
def pg_url():
    """The URL of a new database of the test's own on the test PostgreSQL server."""
    url = services.create_pg_database()
    try:
        yield url
    finally:
        services.drop_pg_database(url)


@pytest.fixture
def private_pg():
    """A PostgreSQL server of the test's own, to stop, restart or freeze."""
    server = services.PrivatePostgres()
    try:
        server.start_with_retries(same_port=False)
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def redis_url() -> str:
    """URL of the shared Redis: skip outside `make test`, fail under CI when it is missing."""
    return services.redis_url()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """host:port of the shared Tansu broker: skip outside `make test`, fail under CI."""
    return services.kafka_bootstrap()


@pytest.fixture
def procs():
    """Kafka-dispatch processes (kafka_support's Worker and KafkaEngine) a test starts;
    stopped, workers first, when it ends, pass or fail."""
    from kafka_support import KafkaEngine

    started: list = []
    yield started
    for proc in sorted(started, key=lambda p: isinstance(p, KafkaEngine)):
        proc.stop(10)


# ---- a real terminal ---------------------------------------------------------------------------


@pytest.fixture
def tmux():
    """`tmux(*args)` on a private server, killed after the test; under CI or `make test`,
    tmux must exist."""
    if shutil.which("tmux") is None:
        if services.services_required():
            pytest.fail("tmux is not installed (make test installs it)")
        pytest.skip("tmux is not installed")
    socket = f"tickui-test-{uuid.uuid4().hex[:8]}"
    # GNU readline, once imported (pytest does), exports COLUMNS=80 LINES=24 at the C level,
    # not in os.environ; inherited, they would pin the app to 80x24 whatever the pane's size.
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}

    def run(*args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=10, env=env
        ).stdout

    yield run
    # Everything started in the panes must end with its terminal (a hang-up): a dashboard
    # left behind would spin on the dead terminal and starve the tests after it.
    left = {}
    for pane in map(int, run("list-panes", "-a", "-F", "#{pane_pid}").split()):
        if (start := start_ticks(pane)) is not None:
            left[pane] = start
        for pid, (start, _group, zombie) in descendants(pane).items():
            if not zombie:
                left[pid] = start
    run("kill-server")
    end = time.monotonic() + OUTLIVE_S
    while (alive := _still(left)) and time.monotonic() < end:
        time.sleep(0.1)
    if alive:
        shown = [f"{pid}: {_cmdline(pid)}" for pid in alive]
        for pid in alive:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        pytest.fail(f"outlived its terminal by {OUTLIVE_S:.0f}s: {shown}")


# Seconds a process started in a tmux pane may take to end after its terminal went away (a
# dashboard cancels its runs, whose kill grace is 3 s, and closes its store).
OUTLIVE_S = 30.0


def _still(pids: dict[int, int]) -> list[int]:
    """Those of `pids` (pid -> start ticks) still running (not a zombie, not a reused pid)."""
    return [pid for pid, start in pids.items() if start_ticks(pid) == start]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return "?"


# ---- the dashboard and other Textual apps, headless (tests/ui_support.py) ------------------


@pytest.fixture
async def dashboard(tmp_db: Path):
    """Runs the dashboard over `tmp_db` (seeded with ui_support.BASIC_TASKS unless told):
    `app, pilot = await dashboard(clock, seed, size=..., notifications=..., **make_app
    options)` returns once the host is up and the first picture is shown (`started=False`:
    at once); `app=` runs an app the test built; `await dashboard.stop(app)` shuts one
    down early. Every app still open is closed after the test, the last one first."""
    from ui_support import Dashboards, RunningApps

    running = RunningApps()
    try:
        yield Dashboards(running, tmp_db)
    finally:
        await running.close()


@pytest.fixture
async def run_app():
    """`pilot = await run_app(app, size=..., **run_test options)`: any Textual app running
    headless until the test ends (or `await run_app.stop(app)`)."""
    from ui_support import RunningApps

    running = RunningApps()
    try:
        yield running
    finally:
        await running.close()


# ---- running in parallel (pytest-xdist, `make test` uses -n 4 --dist loadgroup) ---------------

# Files whose tests must not run beside each other in two workers. Kafka dispatch uses fixed
# topic names (tickui.runs.v1 ...) on the shared broker: a worker started by one test would take
# the commands another test's engine sends. Snapshot files share syrupy's bookkeeping.
SERIAL_GROUPS = {
    "kafka-dispatch": (
        "test_kafka_dispatch.py",
        "test_kafka_workers.py",
        "test_worker.py",
        "test_workers_cli.py",
        "test_ui_workers.py",
    ),
    "snapshots": ("test_ui_snapshots.py", "test_ui_output.py"),
    # Some of its tests step the system clock; others need a window in which nothing does.
    "system-clock": ("test_clockwatch.py",),
}
_GROUP_OF = {name: group for group, names in SERIAL_GROUPS.items() for name in names}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    """Give each test of a SERIAL_GROUPS file its group's xdist_group mark (before xdist reads
    the marks), so `--dist loadgroup` runs the group's tests one after another on one worker;
    tests marked slow go first."""
    for item in items:
        group = _GROUP_OF.get(item.path.name)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))

    # the longest tests first (the chaos tests lead), so that none starts last and runs alone
    def order(item) -> tuple[bool, bool]:
        return item.get_closest_marker("slow") is None, item.path.name != "test_chaos.py"

    items.sort(key=order)


def _skips(config) -> tuple[list, list]:
    """The skipped tests of this run, and those among them marked `may_skip`."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    skipped = list(reporter.stats.get("skipped", [])) if reporter is not None else []
    return skipped, [report for report in skipped if "may_skip" in report.keywords]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus) -> None:
    """Under CI or `make test` a skip hides a promise: the run fails on any skip that is not
    marked `may_skip`."""
    skipped, allowed = _skips(session.config)
    if services.services_required() and len(skipped) > len(allowed) and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _cost_by_part(reporter) -> dict[str, tuple[int, float]]:
    """Seconds spent in each part of the suite (tests/<part>/, setup and teardown included):
    what each part costs, summed over the workers (wall time is about this over -n)."""
    cost: dict[str, tuple[int, float]] = {}
    for reports in reporter.stats.values():
        for report in reports:
            nodeid = getattr(report, "nodeid", "")
            duration = getattr(report, "duration", None)
            if not nodeid or duration is None:
                continue
            parts = nodeid.split("::", 1)[0].split("/")
            part = parts[1] if len(parts) > 2 else "(top)"
            count, seconds = cost.get(part, (0, 0.0))
            cost[part] = (count + (report.when == "call"), seconds + duration)
    return cost


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    cost = _cost_by_part(terminalreporter)
    if cost:
        total = sum(seconds for _, seconds in cost.values())
        shown = ", ".join(
            f"{part} {seconds:.0f} s ({count})"
            for part, (count, seconds) in sorted(cost.items(), key=lambda kv: -kv[1][1])
        )
        terminalreporter.write_line(f"cost by part, {total:.0f} s in all: {shown}")
    skipped, allowed = _skips(config)
    terminalreporter.write_line(f"tests skipped: {len(skipped)} ({len(allowed)} allowed)")
    if services.services_required():
        for report in skipped:
            if report not in allowed:
                terminalreporter.write_line(f"not allowed to skip: {report.nodeid}", red=True)
