"""`tickui task show` gives the next fire times with why each is when it is, in text and
in --json, from a real SQLite file and the real command. The command reads the real
time: each schedule here is one whose every fire has the same reason, whenever it runs."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from helpers import cli, cli_json
from tickui.common.clock import SystemClock
from tickui.common.timeutil import MICROS, to_micros
from tickui.model.spec import build_spec
from tickui.schedules.triggers import jitter_offset
from tickui.store import Store

HOUR = 3600 * MICROS
BERLIN = ZoneInfo("Europe/Berlin")


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _add(db: Path, name: str, *options: str) -> None:
    result = cli("task", "add", name, *options, "--", "true", db=db)
    assert result.returncode == 0, result.stderr


def test_show_tells_the_dst_gap_and_fold_of_each_fire(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    # the last Sunday of March at 02:30 never exists in Berlin; that of October happens twice
    _add(db, "spring", "--cron", "30 2 * 3 0L", "--tz", "Europe/Berlin")
    _add(db, "autumn", "--cron", "30 2 * 10 0L", "--tz", "Europe/Berlin")
    [spring] = cli_json("task", "show", "spring", db=db)
    assert [f["at"] for f in spring["fires"]] == spring["preview"]
    assert len(spring["fires"]) == 5
    for fire in spring["fires"]:
        local = _at(fire["at"]).astimezone(BERLIN)
        assert (local.hour, local.minute, local.tzname()) == (3, 0, "CEST")
        assert fire["due"] == fire["at"] and fire["pending"] is False
        assert fire["reasons"] == [
            f"DST gap: 02:30 does not exist on {local.date()} (clocks jump from 02:00 to"
            " 03:00 CEST); the run is moved to 03:00 CEST"
        ]
    [autumn] = cli_json("task", "show", "autumn", db=db)
    for fire in autumn["fires"]:
        local = _at(fire["at"]).astimezone(BERLIN)
        assert (local.hour, local.minute, local.tzname()) == (2, 30, "CEST")  # the first pass
        assert fire["reasons"] == [
            f"DST fold: 02:30 happens twice on {local.date()} (CEST, then CET); runs once,"
            " in the first (CEST, +02:00)"
        ]
    text = cli("task", "show", "spring", db=db)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.lstrip().startswith("fires: "))
    assert "03:00:00 CEST" in lines[first]
    assert lines[first + 1].strip().startswith("- DST gap: 02:30 does not exist on ")
    assert sum("- DST gap:" in line for line in lines) == 5


def test_show_tells_the_day_rule_and_jitter_and_a_plain_task_has_no_reason(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    _add(db, "thirteenth", "--cron", "0 9 13 * 5", "--jitter", "5m")
    _add(db, "plain", "--cron", "0 9 * * *")
    [task] = cli_json("task", "show", "thirteenth", db=db)
    for fire in task["fires"]:
        day = _at(fire["at"])
        friday, thirteenth = day.weekday() == 4, day.day == 13
        assert friday or thirteenth
        rule, jitter = fire["reasons"]
        if friday and thirteenth:
            assert rule == "day-of-month (13) and day-of-week (Fri) both matched"
        elif friday:
            assert rule == f"day-of-week matched (Fri), day-of-month did not ({day.day})"
        else:
            assert rule.startswith("day-of-month matched (13), day-of-week did not (")
        slot = to_micros(day)
        assert to_micros(_at(fire["due"])) == slot + jitter_offset("thirteenth", slot, 300 * MICROS)
        planned = _at(fire["due"]).strftime("%H:%M:%S UTC")
        assert jitter.endswith(f"(of up to 5m): scheduled 09:00:00 UTC, planned {planned}")
    text = cli("task", "show", "thirteenth", db=db).stdout
    assert text.count("- day-of-") == 5 and text.count("- jitter +") == 5
    assert ", planned " in text
    [plain] = cli_json("task", "show", "plain", db=db)
    assert [f["reasons"] for f in plain["fires"]] == [[]] * 5
    assert "    - " not in cli("task", "show", "plain", db=db).stdout


async def test_show_tells_how_many_passed_slots_run_once_coalesces(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = await Store.open(db)
    try:
        # a task nobody has run for ten hours and a half: its slots are half an hour off
        # the time the command reads, whenever it runs
        ago = SystemClock().now() - 10 * HOUR - HOUR // 2
        spec = build_spec({"name": "hourly", "every": "1h", "command": ["true"]}, ago)
        await store.add_task(spec, ago)
    finally:
        await store.close()
    [task] = cli_json("task", "show", "hourly", db=db)
    pending = [f for f in task["fires"] if f["pending"]]
    assert len(pending) == 1 and len(task["fires"]) == 6
    [fire] = pending
    behind = to_micros(_at(task["next_run_at"]))
    slots = (to_micros(_at(fire["at"])) - behind) // HOUR + 1
    assert slots == 11  # ago, ago + 1h, ..., ago + 10h
    since = _at(task["next_run_at"]).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert fire["reasons"] == [
        f"misfire run_once: {slots} slots since {since} coalesce into this one run"
    ]
    text = cli("task", "show", "hourly", db=db).stdout
    assert "(passed: the next scan)" in text
    assert re.search(
        rf"- misfire run_once: {slots} slots since .* coalesce into this one run", text
    )
