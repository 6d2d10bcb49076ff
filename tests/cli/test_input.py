"""Every value from a flag, the environment or tickui.toml goes through one checker with
bounds: a bad one is one line naming it, exit 2, never a traceback and never accepted."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import cli
from tickui.common import checks
from tickui.common.errors import BadInput
from tickui.common.timeutil import MICROS, parse_duration, parse_instant
from tickui.runtime import settings as config

ADD = ["task", "add", "job"]
OK = ["--every", "1s"]


def _refused(result, *words: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    for word in words:
        assert word in result.stderr, (word, result.stderr)


BAD_FLAGS = [
    (["history", "--limit", "99999999999999999999"], "--limit"),
    (["history", "--limit", "100001"], "--limit"),
    (["history", "--limit", "-1"], "--limit"),
    (["history", "--limit", "１０"], "--limit"),  # full-width digits
    (["history", "--limit", "1e3"], "--limit"),
    (["history", "--limit", "5\n"], "--limit"),  # a trailing newline is not a number's
    (["history", "--limit", "\t5"], "--limit"),
    ([*ADD, "--at", "2030-01-01T00:00:00Z\n", "--", "true"], "at"),
    ([*ADD, *OK, "--anchor", "2030-01-01T00:00:00Z\n", "--", "true"], "anchor"),
    ([*ADD[:2], "job\n", *OK, "--", "true"], "name"),  # a name ending in a newline
    (["task", "show", "job\n"], "name"),
    (["history", "job\n"], "name"),
    ([*ADD, *OK, "--tz", "", "--", "true"], "tz"),
    ([*ADD, *OK, "--tz", " ", "--", "true"], "tz"),
    ([*ADD, *OK, "--misfire", "", "--", "true"], "misfire"),
    ([*ADD, *OK, "--concurrency", "", "--", "true"], "concurrency"),
    ([*ADD, *OK, "--env", "=v", "--", "true"], "env"),
    ([*ADD, *OK, "--env", "A B=v", "--", "true"], "env"),
    ([*ADD, *OK, "--env", "1A=v", "--", "true"], "env"),
    ([*ADD, *OK, "--env", "Ä=v", "--", "true"], "env"),
    ([*ADD, *OK, "--env", "novalue", "--", "true"], "env"),
    ([*ADD, "--every", "１s", "--", "true"], "every"),  # full-width digit
    ([*ADD, "--every", "1s\n", "--", "true"], "every"),
    ([*ADD, "--every", "9" * 400 + "s", "--", "true"], "every"),
    ([*ADD, *OK, "--timeout", "99999999999d", "--", "true"], "timeout"),
    ([*ADD, *OK, "--timeout", "400d", "--", "true"], "timeout"),
    ([*ADD, "--at", "２０３０-01-01T00:00:00Z", "--", "true"], "at"),
    ([*ADD, "--at", "9999-12-31T23:59:59-14:00", "--", "true"], "at"),
    ([*ADD, *OK, "--anchor", "0001-01-01T00:00:00+01:00", "--", "true"], "anchor"),
    ([*ADD, *OK, "--cwd", "/no/such/dir", "--", "true"], "cwd"),
    ([*ADD, *OK, "--cwd", "/etc/passwd", "--", "true"], "cwd"),
    ([*ADD, "--cron", "", "--", "true"], "cron"),
    (["run", "--for", "nan"], "--for"),
    (["run", "--for", "inf"], "--for"),
    (["run", "--for", "-5"], "--for"),
    (["run", "--for", "0"], "--for"),
    (["run", "--for", "1e400"], "--for"),
    (["run", "--for", "１"], "--for"),
    (["run", "--time-scale", "nan"], "--time-scale"),
    (["run", "--time-scale", "inf"], "--time-scale"),
    (["--time-scale", "nan", "run"], "--time-scale"),
    (["demo", "--time-scale", "-inf"], "--time-scale"),
    (["run", "--kafka", "::::"], "--kafka"),
    (["run", "--kafka", "host:0"], "--kafka"),
    (["run", "--kafka", "host:65536"], "--kafka"),
    (["run", "--kafka", ":9092"], "--kafka"),
    (["run", "--kafka", "host:９０９２"], "--kafka"),
    (["ticks", "--kafka", "::::"], "--kafka"),
    (["ticks", "--kafka", "h:1", "--count", "0"], "--count"),
    (["ticks", "--kafka", "h:1", "--for", "nan"], "--for"),
    (["ticks", "--kafka", "h:1", "--topic", "no spaces"], "--topic"),
    (["run", "--valkey", "redis://h:notaport/0"], "--valkey"),
    (["run", "--valkey", "redis://:p/w@host:6379"], "--valkey"),
    (["run", "--valkey", "redis://h:6379/zero"], "--valkey"),
    (["run", "--valkey", "redis://h:99999/0"], "--valkey"),
    (["run", "--valkey", "redis://"], "--valkey"),
    # what the client library refuses, for every scheme, is refused at the flag
    (["run", "--valkey", "unix:///tmp/v.sock?db=abc"], "--valkey"),
    (["run", "--valkey", "unix:///tmp/v.sock?socket_timeout=x"], "--valkey"),
    (["run", "--valkey", "redis://h:1/0?max_connections=-1"], "--valkey"),
    (["run", "--valkey", "redis://h:1/0?no_such_option=1"], "--valkey"),
    (["run", "--valkey", "redis://h:1/0?protocol=9"], "--valkey"),
    (["run", "--valkey", "rediss://h:1/0?ssl_cert_reqs=bogus"], "--valkey"),
    (["run", "--stop-grace", "2h"], "--stop-grace"),
    (["run", "--stop-grace", "nan"], "--stop-grace"),
    (["run", "--tick-interval", "1ms"], "--tick-interval"),
    (["task", "disable", "job", "--note", "x" * 70_000], "--note"),
    (["--db", "", "task", "list"], "--db"),
    (["--config", "", "task", "list"], "--config"),
]


@pytest.mark.parametrize(("args", "named"), BAD_FLAGS)
def test_bad_flags_are_one_line_exit_2(tmp_path, args, named):
    db = tmp_path / "t.db"
    _refused(cli(*args, db=db if "--db" not in args else None), named)
    assert not db.exists()


BAD_ENV = [
    ({"TICKUI_MISFIRE_GRACE": "2d"}, "TICKUI_MISFIRE_GRACE"),
    ({"TICKUI_MISFIRE_GRACE": "１s"}, "TICKUI_MISFIRE_GRACE"),
    ({"TICKUI_BREAKER_THRESHOLD": "１０"}, "TICKUI_BREAKER_THRESHOLD"),
    ({"TICKUI_BREAKER_THRESHOLD": "99999999999999999999999"}, "TICKUI_BREAKER_THRESHOLD"),
    ({"TICKUI_BREAKER_THRESHOLD": "5\n"}, "TICKUI_BREAKER_THRESHOLD"),
    ({"TICKUI_VALKEY_RETRIES": "1\n"}, "TICKUI_VALKEY_RETRIES"),
    ({"TICKUI_PERSIST_SEQUENCE": "true\n"}, "TICKUI_PERSIST_SEQUENCE"),
    ({"TICKUI_VALKEY_URL": "redis://:p/w@h:1"}, "TICKUI_VALKEY_URL"),
    ({"TICKUI_KAFKA_BOOTSTRAP": "::::"}, "TICKUI_KAFKA_BOOTSTRAP"),
    ({"TICKUI_SCHEDULER_ID": "id\n"}, "TICKUI_SCHEDULER_ID"),
    ({"TICKUI_TOPIC": "topic\n"}, "TICKUI_TOPIC"),
    ({"TICKUI_DB": ""}, "TICKUI_DB"),
]


@pytest.mark.parametrize(("env", "named"), BAD_ENV)
def test_bad_environment_values_are_one_line_exit_2(tmp_path, env, named):
    result = cli("run", "--for", "1", env={"TICKUI_DB": str(tmp_path / "t.db"), **env})
    _refused(result, named)
    assert not (tmp_path / "t.db").exists()


BAD_CONFIGS = [
    ("[engine]\ndb = 5\n", "engine.db"),
    ('[engine]\ndb = ""\n', "engine.db"),
    ('[engine]\ndb = "a\\u0000b"\n', "engine.db"),
    ("[engine]\nkeep = 0\n", "engine.keep"),
    ("[engine]\nkeep = 1000001\n", "engine.keep"),
    ("[engine]\nkeep = 99999999999999999999\n", "engine.keep"),
    ("[engine]\nkeep = 1.5\n", "engine.keep"),
    ('[engine]\nmisfire_grace = "2d"\n', "engine.misfire_grace"),
    ('[engine]\nstop_grace = "61m"\n', "engine.stop_grace"),
    ('[engine]\nlease_ttl = "2h"\n', "engine.lease_ttl"),
    ('[engine]\nlog_head = "65MiB"\n', "engine.log_head"),
    ('[engine]\nlog_tail = "512B"\n', "engine.log_tail"),
    ('[engine]\nlog_tail = "2GiB"\n', "engine.log_tail"),
    ('[engine]\nlog_tail = "lots"\n', "engine.log_tail"),
    ('[engine]\nlog_tail = "2MiB\\n"\n', "engine.log_tail"),
    ('[valkey]\nurl = "redis://:p/w@host:6379"\n', "valkey.url"),
    ('[kafka]\nbootstrap = "::::"\n', "kafka.bootstrap"),
    ('[ticker]\nscheduler_id = "a\\n"\n', "ticker.scheduler_id"),
    ('[[task]]\nname = "a\\n"\nevery = "1s"\ncommand = ["true"]\n', "task[1].name"),
    ('[[task]]\nname = "a"\nevery = "1s"\ncommand = ["tr\\u0000ue"]\n', "task[1].command"),
    ('[[task]]\nname = "a"\nevery = "1s"\ncommand = ["true"]\nenv = { "A=B" = "x" }\n', "env"),
    ('[[task]]\nname = "a"\nevery = "1s"\ncommand = ["true"]\nenv = { A = "x\\u0000" }\n', "env"),
    ('[[task]]\nname = "a"\nevery = "1s"\ncommand = ["true"]\ncwd = "/no/such"\n', "cwd"),
    ('[[task]]\nname = "a"\nevery = "1s"\ncommand = ["true"]\ntz = ""\n', "tz"),
    ('[[task]]\nname = "a"\nevery = "1s"\ncommand = ["true"]\nmisfire = ""\n', "misfire"),
    ("x = " + "[" * 100_000, "tickui.toml"),
    ("[" * 100_000, "tickui.toml"),
    ("a = " + "{b = " * 50_000, "tickui.toml"),
]


@pytest.mark.parametrize(
    ("text", "named"), BAD_CONFIGS, ids=[f"{i}-{named}" for i, (_, named) in enumerate(BAD_CONFIGS)]
)
def test_bad_config_values_are_one_line_exit_2(tmp_path, text, named):
    (tmp_path / "tickui.toml").write_text(text)
    for args in (["run", "--for", "1"], ["task", "list"]):
        _refused(cli(*args, db=tmp_path / "t.db", cwd=tmp_path), named)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tickui.toml"]


def test_a_bad_environment_value_is_blamed_on_the_variable_beside_a_good_file(tmp_path):
    (tmp_path / "tickui.toml").write_text("[engine]\nkeep = 5\n")
    result = cli(
        "task", "list", db=tmp_path / "t.db", cwd=tmp_path, env={"TICKUI_MISFIRE_GRACE": "9d"}
    )
    _refused(result, "TICKUI_MISFIRE_GRACE")
    assert "tickui.toml" not in result.stderr


def test_a_config_that_is_not_a_file_is_refused(tmp_path):
    _refused(cli("--config", "/dev/zero", "task", "list", db=tmp_path / "t.db"), "/dev/zero")
    (tmp_path / "d").mkdir()
    _refused(cli("--config", str(tmp_path / "d"), "task", "list", db=tmp_path / "t.db"))


def test_a_huge_config_is_refused_without_reading_it_all(tmp_path):
    big = tmp_path / "tickui.toml"
    big.write_text("# padding\n" * (config.MAX_CONFIG_BYTES // 10 + 10))
    _refused(cli("task", "list", db=tmp_path / "t.db", cwd=tmp_path), "tickui.toml")


GOOD_ENGINE = [
    ({"keep": 1}, lambda e: e.keep == 1),
    ({"keep": 1_000_000}, lambda e: e.keep == 1_000_000),
    ({"misfire_grace": "0s"}, lambda e: e.misfire_grace == 0),
    ({"misfire_grace": "1d"}, lambda e: e.misfire_grace == 86400 * MICROS),
    ({"stop_grace": "1h"}, lambda e: e.stop_grace == 3600 * MICROS),
    ({"log_head": "0B"}, lambda e: e.log_head == 0),
    ({"log_head": "64MiB"}, lambda e: e.log_head == 64 * 1024 * 1024),
    ({"log_tail": "1KiB"}, lambda e: e.log_tail == 1024),
    ({"log_tail": "1GiB"}, lambda e: e.log_tail == 1024**3),
    ({"log_tail": "1.5MiB"}, lambda e: e.log_tail == 1536 * 1024),
    ({"log_tail": 4096}, lambda e: e.log_tail == 4096),
    ({}, lambda e: (e.log_head, e.log_tail) == (64 * 1024, 1024 * 1024)),
]


@pytest.mark.parametrize(("raw", "check"), GOOD_ENGINE)
def test_engine_values_at_their_bounds_are_accepted(raw, check):
    assert check(config._engine(raw, {}))


def test_the_checker_refuses_what_python_would_take():
    for text in ("nan", "inf", "-inf", "1e5", "１", "0x10", "1_000", " ", ""):
        with pytest.raises(BadInput):
            checks.number(text, "n", 0, 10**6)
    for value in (float("nan"), float("inf"), True):
        with pytest.raises(BadInput):
            checks.number(value, "n", 0, 10)
    for text in ("１s", "1s\n", "1 s s", "1e3s", "nan s", "5"):
        with pytest.raises(BadInput):
            parse_duration(text)
    for text in ("::::", "h:", ":1", "h:1,", "h:0", "[::1]:", "user:pw@h:1", "h:1 ,g:2"):
        with pytest.raises(BadInput):
            checks.bootstrap(text, "b")
    assert checks.bootstrap("h:1,[::1]:9092,k.example.com:65535", "b")
    assert checks.valkey_url("redis://user:ab@pw@host/0", "u")  # the last @ ends the user part
    assert checks.valkey_url("redis://:p%2Fw@host:6379", "u")
    # valkey:// is accepted as README says, and handed on as the client reads it
    assert checks.valkey_url("valkey://h:6379/0", "u") == "redis://h:6379/0"
    from tickui.ticks import config as ticker_config

    built = ticker_config.build({}, {"TICKUI_VALKEY_URL": "valkey://h:6379/0"})
    assert built.valkey_url == "redis://h:6379/0"


def test_a_cli_with_no_traceback_even_for_a_bug(tmp_path):
    """The last resort: an unexpected exception is still one line (exit 1)."""
    code = (
        "import sys, tickui.cli.main as c\n"
        "def boom(argv): raise ZeroDivisionError('x')\n"
        "c.run = boom\n"
        "c.main(['task', 'list'])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ)
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "internal error" in result.stderr


def test_a_reader_that_goes_away_ends_tickui_quietly(tmp_path):
    """`tickui task list --json | head -1`: no 'tickui: tickui: Broken pipe', no traceback;
    tickui ends as a command that SIGPIPE ends does."""
    db = tmp_path / "t.db"
    assert cli(*ADD, *OK, "--", "true", db=db).returncode == 0
    read, write = os.pipe()
    os.close(read)  # nobody reads
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tickui", "--db", str(db), "task", "list", "--json"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == ""


def test_a_duration_goes_up_to_ten_years() -> None:
    """README: durations go up to ten years (3660 days: ten years and their leap days,
    with room), whatever the unit; longer is refused as such."""
    assert parse_duration("3650d") == 3650 * 86400 * MICROS
    assert parse_duration("87840h") == 3660 * 86400 * MICROS
    for longer in ("3661d", "87841h", "5270401m", "316224001s"):
        with pytest.raises(BadInput, match="longer than ten years"):
            parse_duration(longer)


def test_an_instant_goes_from_1970_to_9999() -> None:
    """README: instants are ISO 8601 with an offset, 1970 to 9999, both ends included."""
    assert parse_instant("1970-01-01T00:00:00Z") == 0
    assert parse_instant("9999-12-31T23:59:59Z") == 253_402_300_799 * MICROS
    assert parse_instant("9999-12-31T23:59:59+00:00") == 253_402_300_799 * MICROS
    for outside in ("1969-12-31T23:59:59Z", "1970-01-01T00:59:59+01:00",
                    "9999-12-31T23:59:59-00:01"):  # fmt: skip
        with pytest.raises(BadInput, match="outside 1970 to 9999"):
            parse_instant(outside)


def test_for_goes_up_to_366_days_on_run_ticks_and_worker(tmp_path) -> None:
    """README: `--for` up to 366 days (a year and its leap day), on every command that
    takes it; a second more is refused naming the flag."""
    from tickui.cli.main import build_parser

    year = str(366 * 86400)
    for command in (["run"], ["ticks", "--kafka", "127.0.0.1:1"], ["worker"]):
        assert build_parser().parse_args([*command, "--for", year]).duration == float(year)
        result = cli(*command, "--for", str(366 * 86400 + 1), db=tmp_path / "t.db", timeout=20)
        assert result.returncode == 2 and "--for" in result.stderr, (command, result.stderr)


def test_time_scale_goes_from_1_to_3600(tmp_path) -> None:
    """README: `--time-scale` 1 to 3600, before or after the subcommand."""
    from tickui.cli.main import build_parser

    for argv in (["run", "--time-scale", "3600"], ["--time-scale", "1", "demo"]):
        assert build_parser().parse_args(argv).time_scale in (1, 3600)
    for value in ("3601", "0.999"):
        result = cli("run", "--time-scale", value, "--for", "1", db=tmp_path / "t.db", timeout=20)
        assert result.returncode == 2 and "--time-scale" in result.stderr, result.stderr


def test_a_config_file_may_be_up_to_4_mib(tmp_path):
    """README: a config file larger than 4 MiB is refused; one of 4 MiB is read."""
    path = tmp_path / "tickui.toml"
    head = b"[engine]\nkeep = 7\n"
    path.write_bytes(head + b"#" * (4 * 1024 * 1024 - len(head) - 1) + b"\n")
    assert path.stat().st_size == 4 * 1024 * 1024
    assert config.load(path, 0, env={}).engine.keep == 7
    with path.open("ab") as more:
        more.write(b"\n")
    with pytest.raises(BadInput, match="larger than 4 MiB"):
        config.load(path, 0, env={})


def test_a_workers_slots_go_from_1_to_256(tmp_path) -> None:
    """README: `tickui worker --slots N` (1 to 256, default 4)."""
    from tickui.cli.main import build_parser

    assert build_parser().parse_args(["worker"]).slots == 4
    assert build_parser().parse_args(["worker", "--slots", "256"]).slots == 256
    for value in ("0", "257"):
        result = cli("worker", "--slots", value, "--kafka", "127.0.0.1:1", db=tmp_path / "t.db")
        assert result.returncode == 2 and "--slots" in result.stderr, result.stderr


def test_dispatch_partitions_go_from_1_to_1000(tmp_path) -> None:
    """README: `[dispatch] partitions` of tickui.runs.v1, 1 to 1000."""
    path = tmp_path / "tickui.toml"
    for ok in (1, 1000):
        path.write_text(f"[dispatch]\npartitions = {ok}\n")
        assert config.load(path, 0, env={}).dispatch.partitions == ok
    for bad in (0, 1001):
        path.write_text(f"[dispatch]\npartitions = {bad}\n")
        with pytest.raises(BadInput, match="partitions"):
            config.load(path, 0, env={})
