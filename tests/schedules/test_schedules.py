"""Schedules, the task spec validation and the time helpers.

Every instant is integer microseconds since the epoch, UTC.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickui.common.errors import BadInput
from tickui.common.timeutil import (
    MICROS,
    format_duration,
    from_micros,
    iso,
    parse_duration,
    parse_instant,
    to_micros,
)
from tickui.model.spec import build_spec, check_name
from tickui.schedules import triggers as schedules
from tickui.schedules.triggers import (
    COUNT_CAP,
    CronSchedule,
    IntervalSchedule,
    OnceSchedule,
    SlotWindow,
    check_zone,
    cron,
    interval,
    jitter_offset,
    once,
    preview,
)

S = MICROS
MINUTE = 60 * S
HOUR = 3600 * S
DAY = 86400 * S


def at(text: str) -> int:
    return parse_instant(text)


def isos(values: list[int]) -> list[str | None]:
    return [iso(v) for v in values]


def fires_in(schedule, start: int, end: int) -> list[int]:
    """All fire times in the closed range [start, end], by walking next_after."""
    found: list[int] = []
    current = start - 1
    while True:
        current = schedule.next_after(current)
        if current is None or current > end:
            return found
        found.append(current)


# --------------------------------------------------------------------------- timeutil


class TestTimeutil:
    def test_to_and_from_micros_round_trip(self):
        moment = datetime(2026, 3, 29, 1, 2, 3, 456789, tzinfo=UTC)
        value = to_micros(moment)
        assert value == 1774746123456789
        assert from_micros(value) == moment

    def test_to_micros_of_other_offset_is_the_same_instant(self):
        berlin = datetime(2026, 7, 1, 12, 0, tzinfo=ZoneInfo("Europe/Berlin"))
        assert to_micros(berlin) == at("2026-07-01T10:00:00Z")

    def test_to_micros_refuses_naive(self):
        with pytest.raises(ValueError, match="naive"):
            to_micros(datetime(2026, 1, 1))

    def test_iso(self):
        assert iso(None) is None
        assert iso(0) == "1970-01-01T00:00:00+00:00"
        assert iso(1_500_000) == "1970-01-01T00:00:01.500000+00:00"

    @pytest.mark.parametrize(
        ("text", "micros"),
        [
            ("500ms", 500_000),
            ("30s", 30 * S),
            ("5m", 5 * MINUTE),
            ("2h", 2 * HOUR),
            ("1d", DAY),
            ("1.5s", 1_500_000),
            (" 10 s ", 10 * S),
        ],
    )
    def test_parse_duration(self, text, micros):
        assert parse_duration(text) == micros

    @pytest.mark.parametrize("text", ["", "5", "5x", "-5s", "s", "1 day", "5sec"])
    def test_parse_duration_rejects(self, text):
        with pytest.raises(BadInput) as info:
            parse_duration(text, "timeout")
        assert info.value.field == "timeout"
        assert "\n" not in str(info.value)

    @pytest.mark.parametrize(
        ("micros", "text"),
        [(100_000, "100ms"), (30 * S, "30s"), (90 * S, "90s"), (5 * MINUTE, "5m"), (DAY, "1d")],
    )
    def test_format_duration_inverts_parse(self, micros, text):
        assert format_duration(micros) == text
        assert parse_duration(text) == micros

    def test_parse_instant(self):
        assert parse_instant("2026-01-01T00:00:00Z") == to_micros(datetime(2026, 1, 1, tzinfo=UTC))
        assert parse_instant("2026-01-01T01:00:00+01:00") == parse_instant("2026-01-01T00:00:00Z")

    @pytest.mark.parametrize("text", ["yesterday", "2026-13-01T00:00:00Z", "2026-01-01T00:00:00"])
    def test_parse_instant_rejects(self, text):
        with pytest.raises(BadInput) as info:
            parse_instant(text, "at")
        assert info.value.field == "at"
        assert "\n" not in str(info.value)


# --------------------------------------------------------------------------- cron


class TestCronBasics:
    def test_five_fields(self):
        s = cron("*/20 * * * *")
        assert isos(preview(s, at("2026-05-05T10:05:00Z"), 4)) == [
            "2026-05-05T10:20:00+00:00",
            "2026-05-05T10:40:00+00:00",
            "2026-05-05T11:00:00+00:00",
            "2026-05-05T11:20:00+00:00",
        ]

    def test_six_fields_have_seconds_first(self):
        s = cron("15 30 * * * *")  # second 15 of minute 30 of every hour
        assert isos(preview(s, at("2026-05-05T10:00:00Z"), 2)) == [
            "2026-05-05T10:30:15+00:00",
            "2026-05-05T11:30:15+00:00",
        ]

    def test_every_second(self):
        s = cron("* * * * * *")
        assert isos(preview(s, at("2026-05-05T10:00:00.500000Z"), 3)) == [
            "2026-05-05T10:00:01+00:00",
            "2026-05-05T10:00:02+00:00",
            "2026-05-05T10:00:03+00:00",
        ]

    def test_next_after_is_strictly_after(self):
        s = cron("0 * * * *")
        on_slot = at("2026-05-05T10:00:00Z")
        assert s.next_after(on_slot) == at("2026-05-05T11:00:00Z")
        assert s.next_after(on_slot - 1) == on_slot

    @pytest.mark.parametrize(
        ("macro", "expected"),
        [
            ("@hourly", ["2026-02-03T11:00:00+00:00", "2026-02-03T12:00:00+00:00"]),
            ("@daily", ["2026-02-04T00:00:00+00:00", "2026-02-05T00:00:00+00:00"]),
            ("@midnight", ["2026-02-04T00:00:00+00:00", "2026-02-05T00:00:00+00:00"]),
            ("@weekly", ["2026-02-08T00:00:00+00:00", "2026-02-15T00:00:00+00:00"]),
            ("@monthly", ["2026-03-01T00:00:00+00:00", "2026-04-01T00:00:00+00:00"]),
            ("@yearly", ["2027-01-01T00:00:00+00:00", "2028-01-01T00:00:00+00:00"]),
            ("@annually", ["2027-01-01T00:00:00+00:00", "2028-01-01T00:00:00+00:00"]),
            ("@HOURLY", ["2026-02-03T11:00:00+00:00", "2026-02-03T12:00:00+00:00"]),
        ],
    )
    def test_macros(self, macro, expected):
        # 2026-02-03 is a Tuesday; @weekly fires on Sunday midnight.
        assert isos(preview(cron(macro), at("2026-02-03T10:20:00Z"), 2)) == expected

    def test_macro_in_a_zone(self):
        s = cron("@daily", "Europe/Berlin")
        assert isos(preview(s, at("2026-01-10T12:00:00Z"), 1)) == ["2026-01-10T23:00:00+00:00"]

    def test_day_of_month_or_day_of_week(self):
        # Standard cron: when both are restricted, either matching fires.
        # April 2026: Fridays are 3, 10, 17, 24; the 13th is a Monday.
        s = cron("0 0 13 * 5")
        assert isos(preview(s, at("2026-04-01T00:00:00Z"), 6)) == [
            "2026-04-03T00:00:00+00:00",
            "2026-04-10T00:00:00+00:00",
            "2026-04-13T00:00:00+00:00",
            "2026-04-17T00:00:00+00:00",
            "2026-04-24T00:00:00+00:00",
            "2026-05-01T00:00:00+00:00",
        ]

    def test_day_of_month_alone(self):
        s = cron("0 0 13 * *")
        assert isos(preview(s, at("2026-04-01T00:00:00Z"), 2)) == [
            "2026-04-13T00:00:00+00:00",
            "2026-05-13T00:00:00+00:00",
        ]

    def test_leap_day(self):
        s = cron("0 0 29 2 *")
        assert isos(preview(s, at("2026-01-01T00:00:00Z"), 3)) == [
            "2028-02-29T00:00:00+00:00",
            "2032-02-29T00:00:00+00:00",
            "2036-02-29T00:00:00+00:00",
        ]

    def test_whitespace_is_normalised(self):
        assert cron("  0   9 * *  * ").expr == "0 9 * * *"

    def test_text(self):
        assert cron("0 9 * * *").text == "0 9 * * *"
        assert cron("0 9 * * *", "Europe/Berlin").text == "0 9 * * * (Europe/Berlin)"
        assert cron("0 9 * * *").kind == "cron"


class TestCronZones:
    def test_new_york_winter_and_summer(self):
        s = cron("0 9 * * *", "America/New_York")
        assert isos(preview(s, at("2026-01-10T00:00:00Z"), 1)) == ["2026-01-10T14:00:00+00:00"]
        assert isos(preview(s, at("2026-07-10T00:00:00Z"), 1)) == ["2026-07-10T13:00:00+00:00"]

    def test_berlin_winter_and_summer(self):
        s = cron("0 9 * * *", "Europe/Berlin")
        assert isos(preview(s, at("2026-01-10T00:00:00Z"), 1)) == ["2026-01-10T08:00:00+00:00"]
        assert isos(preview(s, at("2026-07-10T00:00:00Z"), 1)) == ["2026-07-10T07:00:00+00:00"]

    def test_half_hour_zone(self):
        s = cron("0 9 * * *", "Asia/Kolkata")
        assert isos(preview(s, at("2026-01-10T00:00:00Z"), 1)) == ["2026-01-10T03:30:00+00:00"]

    def test_day_boundary_is_local(self):
        # Midnight Tokyo is 15:00 UTC the day before.
        s = cron("0 0 * * 1", "Asia/Tokyo")  # Mondays
        assert isos(preview(s, at("2026-05-01T00:00:00Z"), 1)) == ["2026-05-03T15:00:00+00:00"]

    def test_new_york_across_the_change(self):
        s = cron("0 9 * * *", "America/New_York")
        # Spring forward on Sunday 2026-03-08.
        assert isos(preview(s, at("2026-03-06T00:00:00Z"), 4)) == [
            "2026-03-06T14:00:00+00:00",
            "2026-03-07T14:00:00+00:00",
            "2026-03-08T13:00:00+00:00",
            "2026-03-09T13:00:00+00:00",
        ]


class TestCronDst:
    """DST as cron(8) does it. A fixed-time job: a nonexistent wall time fires once at
    the transition instant, an ambiguous one once, at its first occurrence. A job whose
    minute or hour field is a wildcard runs by real time (tests/test_cron_rules.py)."""

    def test_berlin_spring_forward_nonexistent_time(self):
        # 2026-03-29 02:00 CET jumps to 03:00 CEST (at 01:00 UTC); 02:30 does not exist.
        s = cron("30 2 * * *", "Europe/Berlin")
        assert isos(preview(s, at("2026-03-27T12:00:00Z"), 4)) == [
            "2026-03-28T01:30:00+00:00",
            "2026-03-29T01:00:00+00:00",  # 03:00 CEST, the first valid instant
            "2026-03-30T00:30:00+00:00",
            "2026-03-31T00:30:00+00:00",
        ]

    def test_berlin_spring_forward_fires_exactly_once_that_day(self):
        s = cron("30 2 * * *", "Europe/Berlin")
        day_start, day_end = at("2026-03-28T23:00:00Z"), at("2026-03-29T22:00:00Z") - 1
        assert fires_in(s, day_start, day_end) == [at("2026-03-29T01:00:00Z")]
        assert s.slots(day_start, day_end, 10) == SlotWindow(1, [at("2026-03-29T01:00:00Z")])

    def test_new_york_spring_forward_nonexistent_time(self):
        # 2026-03-08 02:00 EST jumps to 03:00 EDT at 07:00 UTC.
        s = cron("30 2 * * *", "America/New_York")
        assert isos(preview(s, at("2026-03-07T00:00:00Z"), 3)) == [
            "2026-03-07T07:30:00+00:00",
            "2026-03-08T07:00:00+00:00",
            "2026-03-09T06:30:00+00:00",
        ]

    def test_every_15_minutes_across_the_gap(self):
        s = cron("*/15 * * * *", "Europe/Berlin")
        got = preview(s, at("2026-03-29T00:20:00Z"), 8)
        # Wall times 02:00..02:45 do not exist, so a wildcard job does not run for them;
        # 03:00 CEST (01:00 UTC) is the next slot: no hole beyond the gap, no duplicate.
        assert isos(got) == [
            "2026-03-29T00:30:00+00:00",
            "2026-03-29T00:45:00+00:00",
            "2026-03-29T01:00:00+00:00",
            "2026-03-29T01:15:00+00:00",
            "2026-03-29T01:30:00+00:00",
            "2026-03-29T01:45:00+00:00",
            "2026-03-29T02:00:00+00:00",
            "2026-03-29T02:15:00+00:00",
        ]
        assert len(set(got)) == len(got)

    def test_gap_only_slots_collapse_to_one(self):
        # Only the nonexistent 02:xx wall times: four of them fire once, together.
        s = cron("0,15,30,45 2 * * *", "Europe/Berlin")
        day = fires_in(s, at("2026-03-28T23:00:00Z"), at("2026-03-29T22:00:00Z") - 1)
        assert day == [at("2026-03-29T01:00:00Z")]
        normal = fires_in(s, at("2026-03-27T23:00:00Z"), at("2026-03-28T23:00:00Z") - 1)
        assert len(normal) == 4

    def test_next_after_from_inside_the_gap_instant(self):
        s = cron("30 2 * * *", "Europe/Berlin")
        transition = at("2026-03-29T01:00:00Z")
        assert s.next_after(transition - 1) == transition
        assert s.next_after(transition) == at("2026-03-30T00:30:00Z")

    def test_berlin_fall_back_ambiguous_time_fires_once(self):
        # 2026-10-25 03:00 CEST goes back to 02:00 CET (at 01:00 UTC); 02:30 happens twice.
        s = cron("30 2 * * *", "Europe/Berlin")
        assert isos(preview(s, at("2026-10-23T12:00:00Z"), 4)) == [
            "2026-10-24T00:30:00+00:00",
            "2026-10-25T00:30:00+00:00",  # first pass, 02:30 CEST
            "2026-10-26T01:30:00+00:00",
            "2026-10-27T01:30:00+00:00",
        ]
        day_start, day_end = at("2026-10-24T22:00:00Z"), at("2026-10-25T23:00:00Z") - 1
        assert fires_in(s, day_start, day_end) == [at("2026-10-25T00:30:00Z")]

    def test_next_after_in_second_pass_skips_to_next_day(self):
        s = cron("30 2 * * *", "Europe/Berlin")
        second_pass_0210 = at("2026-10-25T01:10:00Z")  # 02:10 CET
        assert s.next_after(second_pass_0210) == at("2026-10-26T01:30:00Z")

    def test_new_york_fall_back_ambiguous_time_fires_once(self):
        # 2026-11-01 02:00 EDT goes back to 01:00 EST at 06:00 UTC; 01:30 happens twice.
        s = cron("30 1 * * *", "America/New_York")
        day_start, day_end = at("2026-11-01T04:00:00Z"), at("2026-11-02T05:00:00Z") - 1
        assert fires_in(s, day_start, day_end) == [at("2026-11-01T05:30:00Z")]

    def test_every_15_minutes_runs_in_both_passes_of_the_repeated_hour(self):
        s = cron("*/15 * * * *", "Europe/Berlin")
        got = preview(s, at("2026-10-24T23:40:00Z"), 10)
        # By real time: no 75-minute hole after 02:45 CEST.
        assert isos(got) == [
            "2026-10-24T23:45:00+00:00",
            "2026-10-25T00:00:00+00:00",  # 02:00 CEST
            "2026-10-25T00:15:00+00:00",
            "2026-10-25T00:30:00+00:00",
            "2026-10-25T00:45:00+00:00",  # 02:45 CEST
            "2026-10-25T01:00:00+00:00",  # 02:00 CET, the second pass
            "2026-10-25T01:15:00+00:00",
            "2026-10-25T01:30:00+00:00",
            "2026-10-25T01:45:00+00:00",
            "2026-10-25T02:00:00+00:00",  # 03:00 CET
        ]
        second_pass = (at("2026-10-25T01:00:00Z"), at("2026-10-25T02:00:00Z") - 1)
        assert len(fires_in(s, *second_pass)) == 4
        assert s.slots(*second_pass, 2) == SlotWindow(
            4, [at("2026-10-25T01:30:00Z"), at("2026-10-25T01:45:00Z")]
        )

    def test_slots_on_dst_days_agree_with_preview(self):
        s = cron("*/15 * * * *", "Europe/Berlin")
        # The local day of 2026-03-29 is 23 hours, of 2026-10-25 25 hours.
        short = (at("2026-03-28T23:00:00Z"), at("2026-03-29T22:00:00Z") - 1)
        long = (at("2026-10-24T22:00:00Z"), at("2026-10-25T23:00:00Z") - 1)
        for (start, end), expected in ((short, 92), (long, 100)):
            walked = fires_in(s, start, end)
            assert len(walked) == expected
            window = s.slots(start, end, 7)
            assert window.count == expected
            assert window.newest == walked[-7:]
            assert not window.capped

    def test_slots_newest_ending_in_the_second_pass(self):
        s = cron("*/15 * * * *", "Europe/Berlin")
        start, end = at("2026-10-24T23:00:00Z"), at("2026-10-25T01:40:00Z")  # 02:40 CET
        window = s.slots(start, end, 3)
        assert window.count == 11  # 01:00..01:45 CEST, 02:00..02:45 CEST, 02:00..02:30 CET
        assert isos(window.newest) == [
            "2026-10-25T01:00:00+00:00",
            "2026-10-25T01:15:00+00:00",
            "2026-10-25T01:30:00+00:00",
        ]
        fixed = cron("0,15,30,45 2 * * *", "Europe/Berlin").slots(start, end, 3)
        assert fixed.count == 4  # a fixed-time job runs the first pass only
        assert isos(fixed.newest) == [
            "2026-10-25T00:15:00+00:00",
            "2026-10-25T00:30:00+00:00",
            "2026-10-25T00:45:00+00:00",
        ]

    def test_lord_howe_half_hour_shift(self):
        # Lord Howe moves by 30 minutes: 2026-10-04 02:00 +10:30 -> 02:30 +11 (15:30 UTC).
        s = cron("15 2 * * *", "Australia/Lord_Howe")
        assert isos(preview(s, at("2026-10-02T12:00:00Z"), 3)) == [
            "2026-10-02T15:45:00+00:00",
            "2026-10-03T15:30:00+00:00",
            "2026-10-04T15:15:00+00:00",
        ]
        # 2026-04-05 02:00 +11 -> 01:30 +10:30 (15:00 UTC): 01:45 happens twice, fires once.
        s = cron("45 1 * * *", "Australia/Lord_Howe")
        assert isos(preview(s, at("2026-04-03T12:00:00Z"), 3)) == [
            "2026-04-03T14:45:00+00:00",
            "2026-04-04T14:45:00+00:00",
            "2026-04-05T15:15:00+00:00",
        ]


class TestCronSlots:
    def test_closed_range(self):
        s = cron("0 * * * *")
        window = s.slots(at("2026-05-05T10:00:00Z"), at("2026-05-05T13:00:00Z"), 2)
        assert window == SlotWindow(4, [at("2026-05-05T12:00:00Z"), at("2026-05-05T13:00:00Z")])

    def test_keep_more_than_count(self):
        s = cron("0 * * * *")
        window = s.slots(at("2026-05-05T09:30:00Z"), at("2026-05-05T11:30:00Z"), 10)
        assert window == SlotWindow(2, [at("2026-05-05T10:00:00Z"), at("2026-05-05T11:00:00Z")])

    def test_keep_zero_and_empty_ranges(self):
        s = cron("0 * * * *")
        assert s.slots(at("2026-05-05T10:00:00Z"), at("2026-05-05T12:00:00Z"), 0).count == 3
        assert s.slots(at("2026-05-05T10:00:00Z"), at("2026-05-05T12:00:00Z"), 0).newest == []
        assert s.slots(at("2026-05-05T10:01:00Z"), at("2026-05-05T10:59:00Z"), 5).count == 0
        assert s.slots(at("2026-05-05T12:00:00Z"), at("2026-05-05T10:00:00Z"), 5).count == 0

    def test_count_is_capped(self):
        s = cron("* * * * * *")
        start = at("2026-05-05T00:00:00Z")
        window = s.slots(start, start + 2 * DAY, 3)
        assert window.capped
        assert window.count == COUNT_CAP
        assert window.newest == [start + 2 * DAY - 2 * S, start + 2 * DAY - S, start + 2 * DAY]


# --------------------------------------------------------------------------- interval and once


class TestInterval:
    def test_grid_from_anchor(self):
        anchor = at("2026-05-05T10:00:07Z")
        s = interval(30 * S, anchor)
        assert preview(s, anchor + 1, 3) == [anchor + 30 * S, anchor + 60 * S, anchor + 90 * S]
        assert s.next_after(anchor) == anchor + 30 * S
        assert s.next_after(anchor + 30 * S - 1) == anchor + 30 * S
        assert s.next_after(anchor + 30 * S) == anchor + 60 * S

    def test_before_anchor_returns_anchor(self):
        anchor = at("2026-05-05T10:00:07Z")
        s = interval(30 * S, anchor)
        assert s.next_after(anchor - 1) == anchor
        assert s.next_after(anchor - 10 * DAY) == anchor

    def test_no_drift_far_in_the_future(self):
        anchor = at("2026-05-05T10:00:00.123456Z")
        every = 7 * S + 250_000
        s = interval(every, anchor)
        far = anchor + 10**15 + 12_345  # about 31 years later, off-grid
        nxt = s.next_after(far)
        assert (nxt - anchor) % every == 0
        assert far < nxt <= far + every

    def test_slots(self):
        s = interval(10 * S, 0)
        assert s.slots(5 * S, 35 * S, 2) == SlotWindow(3, [20 * S, 30 * S])
        assert s.slots(10 * S, 30 * S, 5) == SlotWindow(3, [10 * S, 20 * S, 30 * S])
        assert s.slots(11 * S, 19 * S, 5) == SlotWindow(0, [])
        assert s.slots(10 * S, 10 * S, 0) == SlotWindow(1, [])
        assert s.slots(30 * S, 10 * S, 5) == SlotWindow(0, [])

    def test_slots_before_anchor_start_at_anchor(self):
        s = interval(10 * S, 100 * S)
        assert s.slots(0, 120 * S, 10) == SlotWindow(3, [100 * S, 110 * S, 120 * S])
        assert s.slots(0, 99 * S, 10) == SlotWindow(0, [])

    def test_slots_large_count_is_exact(self):
        s = interval(100_000, 0)
        window = s.slots(0, DAY, 2)
        assert window.count == 864_001
        assert window.newest == [DAY - 100_000, DAY]
        assert not window.capped

    def test_bounds(self):
        assert interval(100_000, 0).every == 100_000
        assert interval(366 * DAY, 0).every == 366 * DAY
        assert interval(30 * S, 0).text == "every 30s"

    @pytest.mark.parametrize("every", [0, 99_999, -S, 366 * DAY + 1, 367 * DAY])
    def test_out_of_range(self, every):
        with pytest.raises(BadInput) as info:
            interval(every, 0)
        assert info.value.field == "every"
        assert "out of range" in str(info.value)
        assert "\n" not in str(info.value)


class TestOnce:
    def test_fires_once_then_none(self):
        when = at("2026-06-01T12:00:00Z")
        s = once(when, now=at("2026-05-01T00:00:00Z"))
        assert s.next_after(when - 1) == when
        assert s.next_after(when) is None
        assert preview(s, 0, 5) == [when]
        assert s.text == "at 2026-06-01T12:00:00+00:00"

    def test_slots(self):
        s = OnceSchedule(100)
        assert s.slots(0, 100, 5) == SlotWindow(1, [100])
        assert s.slots(100, 200, 5) == SlotWindow(1, [100])
        assert s.slots(101, 200, 5) == SlotWindow(0, [])
        assert s.slots(0, 99, 5) == SlotWindow(0, [])
        assert s.slots(0, 100, 0) == SlotWindow(1, [])

    @pytest.mark.parametrize("delta", [0, -1, -DAY])
    def test_past_instant_is_refused(self, delta):
        now = at("2026-05-01T00:00:00Z")
        with pytest.raises(BadInput) as info:
            once(now + delta, now)
        assert info.value.field == "at"
        assert "past" in str(info.value)
        assert "\n" not in str(info.value)


# --------------------------------------------------------------------------- jitter


class TestJitter:
    def test_zero_jitter_is_zero(self):
        assert all(jitter_offset("t", slot, 0) == 0 for slot in range(0, 50 * S, S))

    def test_within_bounds(self):
        jitter = 5 * S
        offsets = [jitter_offset("backup", slot * 30 * S, jitter) for slot in range(500)]
        assert all(0 <= off <= jitter for off in offsets)

    def test_small_jitter_reaches_both_ends(self):
        offsets = {jitter_offset("t", slot, 1) for slot in range(200)}
        assert offsets == {0, 1}

    def test_stable_for_same_task_and_slot(self):
        slot = at("2026-05-05T10:00:00Z")
        first = jitter_offset("backup", slot, 60 * S)
        assert all(jitter_offset("backup", slot, 60 * S) == first for _ in range(5))

    def test_differs_across_slots_and_tasks(self):
        slots = [at("2026-05-05T10:00:00Z") + k * 30 * S for k in range(50)]
        offsets = [jitter_offset("backup", slot, 60 * S) for slot in slots]
        assert len(set(offsets)) > 1
        other = [jitter_offset("report", slot, 60 * S) for slot in slots]
        assert offsets != other


# --------------------------------------------------------------------------- errors


class TestCronErrors:
    @pytest.mark.parametrize(
        ("expr", "needle"),
        [
            ("* * * *", "4 fields"),
            ("* * * * * * *", "7 fields"),
            ("", "0 fields"),
            ("60 * * * *", "not valid cron"),
            ("* 24 * * *", "not valid cron"),
            ("* * 32 * *", "not valid cron"),
            ("* * * 13 *", "not valid cron"),
            ("61 * * * * *", "not valid cron"),
            ("a b c d e", "not valid cron"),
            ("@reboot", "unknown macro"),
            ("@fortnightly", "unknown macro"),
        ],
    )
    def test_rejected(self, expr, needle):
        with pytest.raises(BadInput) as info:
            cron(expr)
        assert info.value.field == "cron"
        assert needle in str(info.value)
        assert str(info.value).startswith("cron: ")
        assert "\n" not in str(info.value)

    def test_field_name_can_be_chosen(self):
        with pytest.raises(BadInput) as info:
            cron("* * *", field="schedule")
        assert info.value.field == "schedule"

    @pytest.mark.parametrize("tz", ["Mars/Olympus", "Europe/Berln", "", "../etc/passwd"])
    def test_unknown_zone(self, tz):
        with pytest.raises(BadInput) as info:
            cron("0 9 * * *", tz)
        assert info.value.field == "tz"
        assert "\n" not in str(info.value)

    def test_check_zone(self):
        assert check_zone("Europe/Berlin") == "Europe/Berlin"
        with pytest.raises(BadInput) as info:
            check_zone("Nowhere/City")
        assert "unknown time zone" in str(info.value)


# --------------------------------------------------------------------------- spec

NOW = at("2026-05-01T00:00:00Z")


def raw(**fields):
    base = {"name": "backup", "cron": "0 3 * * *", "command": ["echo", "hi"]}
    base.update(fields)
    return {key: value for key, value in base.items() if value is not None}


class TestBuildSpec:
    def test_cron_defaults(self):
        spec = build_spec(raw(), NOW)
        assert (spec.name, spec.kind, spec.expr, spec.tz) == ("backup", "cron", "0 3 * * *", "UTC")
        assert (spec.misfire, spec.concurrency) == ("run_once", "forbid")
        assert spec.command == ["echo", "hi"]
        assert spec.enabled is True
        assert spec.timeout is None and spec.jitter == 0
        assert isinstance(spec.schedule(NOW), CronSchedule)

    def test_cron_in_zone(self):
        spec = build_spec(raw(cron="0 9 * * *", tz="America/New_York"), NOW)
        assert spec.schedule_text() == "0 9 * * * (America/New_York)"
        assert spec.schedule(NOW).next_after(at("2026-07-10T00:00:00Z")) == at(
            "2026-07-10T13:00:00Z"
        )

    def test_interval(self):
        spec = build_spec(raw(cron=None, every="30s"), NOW)
        assert spec.kind == "interval"
        assert spec.schedule_text() == "every 30s"
        schedule = spec.schedule(NOW)
        assert isinstance(schedule, IntervalSchedule)
        assert schedule.next_after(NOW) == NOW + 30 * S

    def test_interval_with_anchor(self):
        spec = build_spec(raw(cron=None, every="1h", anchor="2026-04-01T00:15:00Z"), NOW)
        assert spec.anchor == at("2026-04-01T00:15:00Z")
        assert spec.schedule(NOW).next_after(NOW) == at("2026-05-01T00:15:00Z")

    def test_once(self):
        spec = build_spec(raw(cron=None, at="2026-06-01T12:00:00Z"), NOW)
        assert spec.kind == "once"
        assert spec.schedule(NOW).next_after(NOW) == at("2026-06-01T12:00:00Z")
        assert spec.schedule_text() == "at 2026-06-01T12:00:00+00:00"

    def test_all_options(self):
        spec = build_spec(
            raw(
                misfire="run_all",
                concurrency="replace",
                timeout="5m",
                jitter="10s",
                cwd="/tmp",
                env={"A": "1"},
                disabled=True,
            ),
            NOW,
        )
        assert (spec.misfire, spec.concurrency) == ("run_all", "replace")
        assert (spec.timeout, spec.jitter) == (5 * MINUTE, 10 * S)
        assert (spec.cwd, spec.env, spec.enabled) == ("/tmp", {"A": "1"}, False)

    def test_json_round_trip_and_hash(self):
        spec = build_spec(raw(jitter="10s"), NOW)
        assert type(spec).from_json(spec.to_json()) == spec
        disabled = build_spec(raw(jitter="10s", disabled=True), NOW)
        assert disabled.definition_hash() == spec.definition_hash()
        changed = build_spec(raw(jitter="11s"), NOW)
        assert changed.definition_hash() != spec.definition_hash()

    def test_stored_text_and_hash_stay_as_they_were(self):
        """Rows already stored keep matching: a sync compares their hash with the file's,
        so a new encoding would make every declared task look changed."""
        fields = {"name": "a", "cron": "0 9 * * 1-5", "tz": "Europe/Berlin", "jitter": "3s"}
        fields |= {"command": ["echo", "h\u00e9"], "env": {"K": "v"}, "timeout": "5m"}
        spec = build_spec(fields | {"retries": 2, "retry_on": "exit,timeout"}, NOW)
        assert spec.definition_hash() == "6adaa41743bef18d"
        assert spec.to_json() == (
            '{"anchor": null, "command": ["echo", "h\\u00e9"], "concurrency": "forbid",'
            ' "cwd": null, "enabled": true, "env": {"K": "v"}, "expr": "0 9 * * 1-5",'
            ' "jitter": 3000000, "kind": "cron", "misfire": "run_once", "name": "a",'
            ' "pause_after": null, "retries": 2, "retry_delay": 10000000,'
            ' "retry_max_delay": 3600000000, "retry_on": ["exit", "timeout"],'
            ' "timeout": 300000000, "tz": "Europe/Berlin"}'
        )
        every = build_spec({"name": "b", "every": "90s", "command": ["true"]}, NOW)
        assert every.definition_hash() == "de65e4b8a17949fd"

    @pytest.mark.parametrize(
        ("fields", "field"),
        [
            ({"cron": "* * * *"}, "cron"),
            ({"cron": "* * * * * * *"}, "cron"),
            ({"cron": "0 25 * * *"}, "cron"),
            ({"cron": "@sometimes"}, "cron"),
            ({"cron": 5}, "cron"),
            ({"tz": "Mars/Olympus"}, "tz"),
            ({"tz": 3}, "tz"),
            ({"cron": None, "every": "50ms"}, "every"),
            ({"cron": None, "every": "367d"}, "every"),
            ({"cron": None, "every": "often"}, "every"),
            ({"cron": None, "every": 30}, "every"),
            ({"cron": None, "at": "2026-04-30T23:59:59Z"}, "at"),
            ({"cron": None, "at": "2026-05-01T00:00:00Z"}, "at"),
            ({"cron": None, "at": "soon"}, "at"),
            ({"cron": None, "every": "1h", "anchor": "later"}, "anchor"),
            ({"name": "Backup"}, "name"),
            ({"name": "-backup"}, "name"),
            ({"name": "a" * 65}, "name"),
            ({"name": "has space"}, "name"),
            ({"name": None}, "name"),
            ({"timeout": "forever"}, "timeout"),
            ({"timeout": "0s"}, "timeout"),
            ({"jitter": "2d"}, "jitter"),
            ({"jitter": "x"}, "jitter"),
            ({"misfire": "sometimes"}, "misfire"),
            ({"concurrency": "parallel"}, "concurrency"),
            ({"command": None}, "command"),
            ({"command": []}, "command"),
            ({"command": "echo hi"}, "command"),
            ({"command": ["", "x"]}, "command"),
            ({"command": ["echo", 1]}, "command"),
            ({"env": {"A": 1}}, "env"),
            ({"env": ["A=1"]}, "env"),
            ({"cwd": 5}, "cwd"),
            ({"disabled": "yes"}, "disabled"),
            ({"every": "30s"}, "schedule"),
            ({"at": "2026-06-01T00:00:00Z"}, "schedule"),
            ({"cron": None}, "schedule"),
            ({"colour": "red"}, "colour"),
        ],
    )
    def test_bad_input_names_the_field(self, fields, field):
        with pytest.raises(BadInput) as info:
            build_spec(raw(**fields), NOW)
        assert info.value.field == field
        message = str(info.value)
        assert message.startswith(f"{field}: ")
        assert "\n" not in message

    def test_two_schedules_message(self):
        with pytest.raises(BadInput, match="exactly one of cron, every or at"):
            build_spec(raw(every="30s"), NOW)

    @pytest.mark.parametrize("name", ["a", "backup", "db.backup-2", "x_y", "0" * 64])
    def test_good_names(self, name):
        assert check_name(name) == name


# --------------------------------------------------------------------------- properties

ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]
RANGE_START = to_micros(datetime(2024, 1, 1, tzinfo=UTC))
RANGE_END = to_micros(datetime(2030, 12, 31, tzinfo=UTC))


def _transitions(zone: str) -> list[int]:
    """UTC instants (to the minute) where the zone's offset changes, 2024..2030."""
    tz = ZoneInfo(zone)

    def offset(value: int) -> timedelta | None:
        return from_micros(value).astimezone(tz).utcoffset()

    found: list[int] = []
    day = RANGE_START
    while day < RANGE_END:
        if offset(day) != offset(day + DAY):
            low, high = day // MINUTE, (day + DAY) // MINUTE
            while high - low > 1:
                mid = (low + high) // 2
                if offset(mid * MINUTE) == offset(day):
                    low = mid
                else:
                    high = mid
            found.append(high * MINUTE)
        day += DAY
    return found


TRANSITIONS = {zone: _transitions(zone) for zone in ZONES}


def test_transition_table_is_sane():
    assert TRANSITIONS["UTC"] == []
    assert at("2026-03-29T01:00:00Z") in TRANSITIONS["Europe/Berlin"]
    assert at("2026-11-01T06:00:00Z") in TRANSITIONS["America/New_York"]
    assert at("2026-10-03T15:30:00Z") in TRANSITIONS["Australia/Lord_Howe"]
    assert len(TRANSITIONS["Europe/Berlin"]) == 14


@st.composite
def field_values(draw, low: int, high: int):
    """A cron field over [low, high] as (text, set of matching values)."""
    kind = draw(st.sampled_from(["star", "step", "list", "range", "range_step", "one"]))
    if kind == "star":
        return "*", set(range(low, high + 1))
    if kind == "step":
        step = draw(st.integers(2, max(2, (high - low) // 2)))
        return f"*/{step}", set(range(low, high + 1, step))
    if kind == "list":
        values = sorted(draw(st.sets(st.integers(low, high), min_size=1, max_size=4)))
        return ",".join(map(str, values)), set(values)
    if kind == "one":
        a = draw(st.integers(low, high))
        return str(a), {a}
    # A one-value range ("5-5") is that value, as in cron.
    a = draw(st.integers(low, high))
    b = draw(st.integers(a, high))
    if kind == "range":
        return f"{a}-{b}", set(range(a, b + 1))
    step = draw(st.integers(1, 7))
    return f"{a}-{b}/{step}", set(range(a, b + 1, step))


@st.composite
def cron_cases(draw, seconds: bool = False):
    """(expression, zone, minute set, hour set, by real time?), plus an optional seconds
    field first. Cron runs a job by real time when its minute or hour field starts
    with "*"."""
    minute, minutes = draw(field_values(0, 59))
    hour, hours = draw(field_values(0, 23))
    zone = draw(st.sampled_from(ZONES))
    expr = f"{minute} {hour} * * *"
    if seconds:
        second, _ = draw(field_values(0, 59))
        expr = f"{second} {expr}"
    return expr, zone, minutes, hours, minute.startswith("*") or hour.startswith("*")


@st.composite
def windows(draw, zone: str, longest: int):
    """A closed range [start, end] in 2024..2030, often holding a DST transition."""
    width = draw(st.integers(0, longest))
    if TRANSITIONS[zone] and draw(st.booleans()):
        start = draw(st.sampled_from(TRANSITIONS[zone])) - draw(st.integers(0, width))
    else:
        start = draw(st.integers(RANGE_START, RANGE_END))
    return start, start + width


def oracle_fires(
    zone: str, minutes: set[int], hours: set[int], start: int, end: int, real: bool = False
) -> list[int]:
    """Fire instants in [start, end], worked out independently of the module.

    By real time (`real`): every whole minute whose local wall time matches.
    Otherwise a wall time fires at the first instant whose local wall clock reaches it:
    walk the UTC minutes keeping the furthest wall time seen so far; a minute
    fires if a matching wall time lies in (furthest before, wall now]. A wall
    time in a gap so fires at the transition, one in a repeated hour only on
    its first pass.
    """
    tz = ZoneInfo(zone)
    step = timedelta(minutes=1)
    first = -(-start // MINUTE) * MINUTE
    if real:
        walls = ((m, from_micros(m).astimezone(tz)) for m in range(first, end + 1, MINUTE))
        return [m for m, wall in walls if wall.minute in minutes and wall.hour in hours]
    # Wall times reached before `first` must not fire again: start the furthest
    # wall time at the largest wall time seen over the previous hours.
    furthest = max(
        from_micros(first - k * MINUTE).astimezone(tz).replace(tzinfo=None) for k in range(1, 181)
    )
    found: list[int] = []
    moment = first
    while moment <= end:
        wall = from_micros(moment).astimezone(tz).replace(tzinfo=None)
        if wall > furthest:
            probe = furthest + step
            while probe <= wall:
                if probe.minute in minutes and probe.hour in hours:
                    found.append(moment)
                    break
                probe += step
            furthest = wall
        moment += MINUTE
    return found


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_property_cron_next_after_increases_and_preview_agrees(data):
    expr, zone, _, _, _ = data.draw(cron_cases(seconds=data.draw(st.booleans())))
    s = cron(expr, zone)
    start, _ = data.draw(windows(zone, 6 * HOUR))
    start += data.draw(st.integers(0, S - 1))
    times = preview(s, start, 6)
    assert len(times) == 6
    assert all(a < b for a, b in zip([start, *times], times, strict=False))
    current, repeated = start, []
    for _ in range(6):
        current = s.next_after(current)
        repeated.append(current)
    assert times == repeated
    # Any point between two fire times leads to the next one: nothing is skipped.
    for before, after in zip([start, *times], times, strict=False):
        inside = data.draw(st.integers(before, after - 1))
        assert s.next_after(inside) == after


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_property_cron_matches_independent_oracle(data):
    expr, zone, minutes, hours, real = data.draw(cron_cases())
    s = cron(expr, zone)
    start, end = data.draw(windows(zone, 4 * HOUR))
    expected = oracle_fires(zone, minutes, hours, start, end, real)
    assert fires_in(s, start, end) == expected
    keep = data.draw(st.integers(0, 5))
    window = s.slots(start, end, keep)
    assert window.count == len(expected)
    assert window.newest == (expected[-keep:] if keep else [])


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_property_cron_slots_count_matches_preview(data):
    seconds = data.draw(st.booleans())
    expr, zone, _, _, _ = data.draw(cron_cases(seconds=seconds))
    s = cron(expr, zone)
    start, end = data.draw(windows(zone, 10 * MINUTE if seconds else 3 * HOUR))
    keep = data.draw(st.integers(0, 4))
    window = s.slots(start, end, keep)
    following = preview(s, start - 1, window.count + 1)
    in_range, beyond = following[:-1], following[-1]
    assert all(start <= t <= end for t in in_range)
    assert beyond > end
    assert window.newest == (in_range[-keep:] if keep else [])
    assert not window.capped


@settings(max_examples=200, deadline=None)
@given(
    every=st.integers(schedules.MIN_INTERVAL, schedules.MAX_INTERVAL),
    anchor=st.integers(RANGE_START, RANGE_END),
    after=st.integers(RANGE_START - 400 * DAY, RANGE_END + 100 * 366 * DAY),
)
def test_property_interval_on_grid_and_after(every, anchor, after):
    s = interval(every, anchor)
    times = preview(s, after, 5)
    assert len(times) == 5
    assert all((t - anchor) % every == 0 and t >= anchor for t in times)
    assert times[0] > after
    assert times[0] - after <= every or (after < anchor and times[0] == anchor)
    assert all(b - a == every for a, b in itertools.pairwise(times))


@settings(max_examples=200, deadline=None)
@given(
    every=st.integers(schedules.MIN_INTERVAL, 3600 * S),
    anchor=st.integers(RANGE_START, RANGE_END),
    start_offset=st.integers(-50, 50),
    width=st.integers(0, 60),
    keep=st.integers(0, 5),
)
def test_property_interval_slots_match_preview(every, anchor, start_offset, width, keep):
    s = interval(every, anchor)
    start = anchor + start_offset * every // 3
    end = start + width * every // 4
    in_range = [t for t in preview(s, start - 1, 100) if t <= end]
    window = s.slots(start, end, keep)
    assert window.count == len(in_range)
    assert window.newest == (in_range[-keep:] if keep else [])
