"""The timeline's lines (tickui.ui.view.timeline) and fire counts (view.fire_counts): pure,
from schedules, `now`, a zone and a width."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from rich.console import Console

from tickui.common.timeutil import MICROS, to_micros
from tickui.model.records import Task
from tickui.model.spec import build_spec
from tickui.schedules.triggers import CronSchedule, IntervalSchedule, preview
from tickui.ui.view import task_times as tt
from tickui.ui.view import timeline as tl
from tickui.ui.view.fire_counts import CAP, FireCache, interval_counts

MINUTE = 60 * MICROS
HOUR = 60 * MINUTE
LONDON = ZoneInfo("Europe/London")
NEW_YORK = ZoneInfo("America/New_York")
CONSOLE = Console()


def at(*args: int, zone=UTC) -> int:
    return to_micros(datetime(*args, tzinfo=zone))


def axis_of(start: int, span: int, cols: int, zone=UTC, name: str = "UTC") -> tl.Axis:
    """An axis of exactly `cols` columns (make_axis picks them from a width)."""
    width = cols + tl.NAME_MIN + 1 + tl.TOTAL_WIDTH
    axis = tl.make_axis(start, span, width, zone, name)
    assert axis.cols == cols
    return axis


def task(task_id: int, name: str, now: int, enabled: bool = True, note=None, **fields) -> Task:
    spec = build_spec({"name": name, "command": ["true"], **fields}, now)
    return Task(task_id, name, spec, "cli", enabled, note, 1, now, now, now, now, now)


def track(axis: tl.Axis, line) -> str:
    """The columns of a task or density line, without its gutters."""
    return line.plain[axis.name_width + 1 : axis.name_width + 1 + axis.cols]


# ---- the axis ------------------------------------------------------------------------


def test_hour_labels_start_at_their_hours_column_and_midnight_names_the_day() -> None:
    start = at(2027, 1, 15, 8, 0)  # a Friday
    axis = axis_of(start, 24 * HOUR, 144)  # 10 minutes a column: every hour fits
    labels = tl.axis_labels(axis)
    assert [text for _, text in labels][:3] == ["09:00", "10:00", "11:00"]
    assert ("Sat" in dict(labels).values()) and len(labels) == 23  # 09:00 .. 07:00
    for column, text in labels:
        hour = 24 if text == "Sat" else int(text[:2]) + (24 if text < "08" else 0)
        moment = at(2027, 1, 15, 0, 0) + hour * HOUR
        assert column == axis.column(moment) == (moment - start) // (10 * MINUTE)
    top, rule = tl.axis_lines(axis, [])
    offset = axis.name_width + 1
    assert top.plain[offset + 6 : offset + 11] == "09:00"  # 09:00 is 6 columns in
    assert rule.plain[offset + 6] == "┬"


def test_a_narrow_axis_labels_fewer_hours_and_never_overlaps() -> None:
    start = at(2027, 1, 15, 8, 0)
    for cols in (20, 40, 60, 100):
        labels = tl.axis_labels(axis_of(start, 24 * HOUR, cols))
        assert labels, cols
        ends = [column + len(text) for column, text in labels]
        assert all(end < following for end, (following, _) in zip(ends, labels[1:], strict=False))
        assert ends[-1] <= cols
    labels = tl.axis_labels(axis_of(start, 24 * HOUR, 60))
    assert [t for _, t in labels][:3] == ["09:00", "12:00", "15:00"]  # every 3 hours


def test_seven_days_label_the_midnights() -> None:
    axis = axis_of(at(2027, 1, 15, 8, 0), 7 * 24 * HOUR, 168)  # an hour a column
    assert [t for _, t in tl.axis_labels(axis)] == [
        "Sat 16", "Sun 17", "Mon 18", "Tue 19", "Wed 20", "Thu 21", "Fri 22",
    ]  # fmt: skip


# ---- a task's marks --------------------------------------------------------------------


def test_a_task_every_15_minutes_marks_every_column_after_now() -> None:
    now = at(2027, 1, 15, 8, 0)
    every15 = task(1, "every-15m", now, cron="*/15 * * * *")
    times = tt.TaskTimes()
    axis = axis_of(now, 6 * HOUR, 24)  # 15 minutes a column
    counts = times.counts(every15, axis)
    assert counts.per_column == (0,) + (1,) * 23  # 08:00 itself is now, not next
    assert counts.total == 23
    line = tl.task_line(axis, "every-15m", counts)
    assert track(axis, line) == " " + "│" * 23
    assert line.plain.endswith("23")
    halves = times.counts(every15, axis_of(now, 6 * HOUR, 48))  # 7.5 minutes a column
    assert halves.per_column == (0, 0) + (1, 0) * 23
    assert halves.total == 23


def test_marks_fall_in_the_column_of_each_fire_time() -> None:
    now = at(2027, 1, 15, 8, 7)
    daily = task(1, "daily", now, cron="40 17 * * *")
    axis = axis_of(now, 24 * HOUR, 96)  # 15 minutes a column, from 08:00
    counts = tt.TaskTimes().counts(daily, axis)
    assert axis.start == at(2027, 1, 15, 8, 0)
    assert [c for c, n in enumerate(counts.per_column) if n] == [(9 * 60 + 40) // 15]


def test_interval_counts_match_walking_the_fire_times() -> None:
    start = at(2027, 1, 15, 8, 0) + 123_456
    for every, anchor in ((7 * MINUTE, start - 5 * HOUR), (90 * MINUTE, start + 2 * HOUR),
                          (11 * MICROS, start - 3), (13 * HOUR, start + 1)):  # fmt: skip
        schedule = IntervalSchedule(every, anchor)
        for cols in (7, 50, 200):
            step = 24 * HOUR // cols
            counts = interval_counts(schedule, start, step, cols)
            walked = [0] * cols
            moment = schedule.next_after(start)
            while moment < start + step * cols:
                walked[(moment - start) // step] += 1
                moment += every
            assert list(counts.per_column) == walked, (every, cols)


def test_cron_counts_match_the_schedules_fire_times_across_a_dst_change() -> None:
    start = at(2027, 3, 27, 12, 0)
    schedule = CronSchedule("*/20 * * * *", "Europe/London")
    step, cols = 15 * MINUTE, 96
    counts = FireCache().counts("k", schedule, start, step, cols)
    fires = [t for t in preview(schedule, start, 100) if t < start + step * cols]
    # 12:00 Sat to 13:00 Sun by the wall clock, less now's 12:00 and the lost 01:xx
    assert counts.total == len(fires) == 25 * 3 - 1 - 3 and not counts.estimated
    for moment in fires:
        assert counts.per_column[(moment - start) // step] >= 1


def test_a_schedule_firing_more_than_the_cap_is_estimated_past_it_and_says_so() -> None:
    start = at(2027, 1, 15, 8, 0)
    every_second = CronSchedule("* * * * * *", "UTC")
    counts = FireCache().counts("s", every_second, start, 15 * MINUTE, 96)
    assert counts.estimated
    assert abs(counts.total - 24 * 3600) < 24 * 36  # within 1%
    assert counts.per_column[0] == 15 * 60 - 1  # counted exactly up to the CAPth fire
    assert CAP < 15 * 60 * 3


def test_the_fire_cache_extends_as_the_axis_moves_and_shares_a_key() -> None:
    start = at(2027, 1, 15, 8, 0)
    cache = FireCache()
    hourly = CronSchedule("0 * * * *", "UTC")
    first = cache.counts("h", hourly, start, HOUR, 24)
    later = cache.counts("h", hourly, start + 5 * HOUR, HOUR, 24)
    assert first.total == later.total == 23  # the start's own hour is now, not next
    assert cache.times("h", hourly, start + 5 * HOUR, start + 8 * HOUR) == [
        start + 6 * HOUR, start + 7 * HOUR,
    ]  # fmt: skip
    cache.forget(set())
    assert len(cache) == 0


# ---- the density row -------------------------------------------------------------------


def test_density_counts_the_runs_of_the_tasks_that_are_on_in_each_column() -> None:
    now = at(2027, 1, 15, 8, 0)
    tasks = [
        task(1, "a", now, cron="*/15 * * * *"),
        task(2, "b", now, cron="*/15 * * * *"),  # shares a's count
        task(3, "c", now, cron="0 * * * *"),
        task(4, "off", now, enabled=False, cron="* * * * *"),  # not run: not counted
    ]
    axis = axis_of(now, 6 * HOUR, 24)
    density = tt.TaskTimes().density(tasks, axis)
    hourly = {4 * h for h in range(1, 6)}
    expected = tuple(0 if c == 0 else 3 if c in hourly else 2 for c in range(24))
    assert density.per_column == expected
    assert density.total == 23 * 2 + 5
    line = tl.density_line(axis, density)
    assert track(axis, line) == "·" + "".join("3" if c in hourly else "2" for c in range(1, 24))
    assert line.plain.endswith(str(density.total))
    offset = axis.name_width + 1
    style = [str(line.get_style_at_offset(CONSOLE, offset + c)) for c in (1, 4)]
    assert "bold" not in style[0] and "bold" in style[1]  # the busiest columns are bold


def test_density_of_many_runs_is_a_bar_against_the_busiest_column() -> None:
    levels = tl.density_levels([0, 10, 40, 39, 20])
    assert levels == [0, 1, 4, 4, 2]
    now = at(2027, 1, 15, 8, 0)
    busy = [task(i, f"t{i}", now, cron="* * * * *") for i in range(3)]
    axis = axis_of(now, 6 * HOUR, 24)
    shown = track(axis, tl.density_line(axis, tt.TaskTimes().density(busy, axis)))
    assert set(shown[1:]) == {"█"} and shown[0] == "█"  # 45 a column, 42 in the first


def test_the_busiest_column_is_named_in_the_title() -> None:
    now = at(2027, 1, 15, 8, 0)
    tasks = [task(1, "a", now, cron="0 * * * *"), task(2, "b", now, cron="0 10 * * *")]
    axis = axis_of(now, 6 * HOUR, 24)
    title = tl.title(axis, tt.TaskTimes().density(tasks, axis)).plain
    assert title == "next 6h from Fri 08:00 · UTC · busiest 10:00–10:14: 2 runs"
    alone = tl.title(axis, tt.TaskTimes().density(tasks[1:], axis)).plain
    assert alone.endswith("busiest 10:00–10:14: 1 run")


# ---- clock changes -----------------------------------------------------------------------


def test_a_spring_forward_day_in_london_is_marked_and_named() -> None:
    start = at(2027, 3, 27, 12, 0)
    axis = axis_of(start, 24 * HOUR, 144, LONDON, "Europe/London")  # every hour fits
    changes = tl.clock_changes(axis)
    assert [c.at for c in changes] == [at(2027, 3, 28, 1, 0)]
    words = changes[0].words()
    assert words == "clocks go forward 1h at Sun 28 Mar 01:00 GMT (GMT → BST)"
    assert tl.change_line(changes).plain == "▼ " + words
    _, rule = tl.axis_lines(axis, changes)
    column = axis.column(changes[0].at)
    assert rule.plain[axis.name_width + 1 + column] == "▼"
    labels = [text for _, text in tl.axis_labels(axis)]
    assert "Sun" in labels and "01:00" not in labels and "02:00" in labels  # 01:xx is skipped


def test_a_fall_back_day_in_new_york_shows_the_repeated_hour_twice() -> None:
    start = at(2027, 11, 6, 16, 0)  # Sat 12:00 EDT
    axis = axis_of(start, 24 * HOUR, 200, NEW_YORK, "America/New_York")  # every hour fits
    changes = tl.clock_changes(axis)
    assert [c.at for c in changes] == [at(2027, 11, 7, 6, 0)]
    assert changes[0].words() == "clocks go back 1h at Sun 07 Nov 02:00 EDT (EDT → EST)"
    labels = [text for _, text in tl.axis_labels(axis)]
    assert labels.count("01:00") == 2 and len(labels) == 24  # 25 hours: now's hour not labelled


def test_no_change_in_the_span_says_nothing() -> None:
    axis = axis_of(at(2027, 6, 1, 0, 0), 7 * 24 * HOUR, 168, LONDON, "Europe/London")
    assert tl.clock_changes(axis) == [] and tl.change_line([]) is None


def test_a_fixed_time_job_in_the_gap_is_marked_where_it_runs_at_the_jump() -> None:
    start = at(2027, 3, 27, 12, 0)
    axis = axis_of(start, 24 * HOUR, 96, LONDON, "Europe/London")
    gap_job = task(1, "in-the-gap", start, cron="30 1 * * *", tz="Europe/London")
    counts = tt.TaskTimes().counts(gap_job, axis)
    change = tl.clock_changes(axis)[0]
    assert [c for c, n in enumerate(counts.per_column) if n] == [axis.column(change.at)]


# ---- disabled and paused ---------------------------------------------------------------


def test_disabled_and_paused_tasks_are_dimmed_and_say_so_instead_of_a_count() -> None:
    now = at(2027, 1, 15, 8, 0)
    axis = axis_of(now, 6 * HOUR, 24)
    off = task(1, "off", now, enabled=False, note="on hold", cron="0 * * * *")
    note = "paused after 3 consecutive failures"
    stopped = task(2, "flaky", now, enabled=False, note=note, cron="0 * * * *")
    assert tt.task_state(off) == tl.OFF and tt.task_state(stopped) == tl.PAUSED
    times = tt.TaskTimes()
    line = tl.task_line(axis, "off", times.counts(off, axis), tl.OFF)
    assert line.plain.endswith("   off") and track(axis, line).count("│") == 5
    mark = axis.name_width + 1 + 4
    assert str(line.get_style_at_offset(CONSOLE, mark)) == "bright_black"
    assert str(line.get_style_at_offset(CONSOLE, 0)) == "bright_black"  # the name too
    on = tl.task_line(axis, "on", times.counts(off, axis), tl.ON)
    assert str(on.get_style_at_offset(CONSOLE, mark)) == "green"
    paused = tl.task_line(axis, "flaky", times.counts(off, axis), tl.PAUSED)
    assert paused.plain.endswith("paused") and "dim" in str(paused.get_style_at_offset(CONSOLE, 0))


def test_the_axis_zone_follows_the_dashboards_time_view() -> None:
    from tickui.ui.view.cells import TimeView

    assert tl.zone_of(TimeView("utc")) == (UTC, "UTC")
    assert tl.zone_of(TimeView("local", LONDON)) == (LONDON, "Europe/London")
    assert tl.zone_of(TimeView("task", NEW_YORK)) == (NEW_YORK, "America/New_York (local)")


def test_interval_grids_sharing_a_period_sum_as_each_counted_alone() -> None:
    now = at(2027, 1, 15, 8, 0) + 4321
    axis = axis_of(now, 24 * HOUR, 97)
    tasks = [
        task(i, f"t{i}", now, every=every, anchor=anchor)
        for i, (every, anchor) in enumerate(
            [("5m", "2027-01-15T07:01:07Z"), ("5m", "2027-01-14T00:00:00Z"),
             ("5m", "2027-01-15T07:01:07Z"), ("7m", "2027-01-15T06:00:00Z"),
             ("5m", "2027-01-15T12:00:00Z"),  # anchored later: counted on its own
             ("90s", "2027-01-15T07:59:59Z")]
        )
    ]  # fmt: skip
    alone = [0] * axis.cols
    times = tt.TaskTimes()
    for one in tasks:
        tt.add_counts(alone, times.counts(one, axis))
    assert tt.TaskTimes().density(tasks, axis).per_column == tuple(alone)
    assert sum(alone) > 24 * 60 // 5 * 3


def test_fire_times_a_clock_change_moves_or_doubles_are_marked_in_yellow() -> None:
    start = at(2027, 3, 27, 12, 0)
    axis = axis_of(start, 24 * HOUR, 96, LONDON, "Europe/London")
    times = tt.TaskTimes()
    moved = task(1, "moved", start, cron="30 1 * * *", tz="Europe/London")  # 01:30 is lost
    plain = task(2, "plain", start, cron="30 4 * * *", tz="Europe/London")
    jump = axis.column(at(2027, 3, 28, 1, 0))
    assert times.dst_columns(moved, axis) == {jump}
    assert times.dst_columns(plain, axis) == frozenset()
    line = tl.task_line(axis, "moved", times.counts(moved, axis), shifted={jump})
    mark = axis.name_width + 1 + jump
    assert line.plain[mark] == "│"
    assert str(line.get_style_at_offset(CONSOLE, mark)) == "bold yellow"
    fall = axis_of(at(2027, 11, 6, 16, 0), 24 * HOUR, 96, NEW_YORK, "America/New_York")
    twice = task(3, "twice", start, cron="*/30 * * * *", tz="America/New_York")
    doubled = times.dst_columns(twice, fall)  # 01:00 and 01:30 happen twice: all four
    assert len(doubled) >= 2 and all(fall.column(at(2027, 11, 7, 5, 0)) <= c for c in doubled)


def test_a_total_always_fits_its_gutter_with_a_space_before_it() -> None:
    assert tl.total_text(23, False) == "23"
    assert tl.total_text(9999, True) == "≈9999"
    assert tl.total_text(12_345, False) == "12.3k"
    assert tl.total_text(12_345, True) == "≈12k"
    assert tl.total_text(127_400, True) == "≈127k"
    assert tl.total_text(4_500_000, False) == "4.5M"
    for count in (0, 9, 999, 9_999, 10_000, 99_949, 99_950, 999_499, 999_500, 10**7, 10**10):
        for estimated in (False, True):
            shown = tl.total_text(count, estimated)
            assert len(shown) < tl.TOTAL_WIDTH, (count, shown)
