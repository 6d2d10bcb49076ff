"""The timeline: the next hours (6h, 24h or 7d) as a time axis across the pane, a row per
task marking when it fires, a density row counting the runs in each column, and the
zone's clock changes marked and named. Pure: fire counts, `now`, the zone and the width
in; lines of styled text out (no widgets, no I/O).

A line is the task's name, then one cell a column (`cols` columns across the span, each
`span / cols` long), then the number of its runs in the span. Columns start at `start`
(now): the hour labels fall where the zone's wall clock reaches the hour, so a day with a
DST change has a 23- or 25-hour axis and its labels show it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

from rich.text import Text

from tickui.common.timeutil import MICROS, from_micros
from tickui.ui.view.cells import TimeView
from tickui.ui.view.fire_counts import Counts

HOUR = 3600 * MICROS
SPANS = (6 * HOUR, 24 * HOUR, 7 * 24 * HOUR)  # the zoom steps
SPAN_NAMES = {6 * HOUR: "6h", 24 * HOUR: "24h", 7 * 24 * HOUR: "7d"}
NAME_MIN, NAME_MAX = 8, 24  # the name gutter's width
TOTAL_WIDTH = 6  # the runs-in-span gutter on the right
# a column's runs on a shade of its share of the busiest column's
SHADES = ("", "grey50", "yellow3", "dark_orange", "red3")
BARS = "▁▂▃▄▅▆▇█"
DIM = "bright_black"  # disabled or paused: what would fire, were it on
FIRE, DST_MARK = "│", "▼"
SHIFTED = "bold yellow"  # a fire time a DST gap or fold moves or doubles

ON, OFF, PAUSED = "on", "off", "paused"


@dataclass(frozen=True, slots=True)
class Axis:
    """`cols` columns `step` long from `start` (the first column is the one now is in),
    in `zone`; `span` is the zoom step they show (`cols * step`, to a column)."""

    start: int
    step: int
    cols: int
    zone: tzinfo
    zone_name: str
    name_width: int = NAME_MIN
    span: int = 24 * HOUR

    def column(self, moment: int) -> int:
        return (moment - self.start) // self.step

    def edge(self, column: int) -> int:
        return self.start + column * self.step

    @property
    def end(self) -> int:
        return self.start + self.cols * self.step

    def local(self, moment: int) -> datetime:
        return from_micros(moment).astimezone(self.zone)


@dataclass(frozen=True, slots=True)
class ClockChange:
    """The zone's offset changes at `at`: e.g. GMT to BST, clocks forward an hour."""

    at: int
    before: datetime  # the wall clock just before
    after: datetime  # and at the change

    @property
    def shift(self) -> timedelta:
        return self.after.utcoffset() - self.before.utcoffset()  # type: ignore[operator]

    def words(self) -> str:
        """`clocks go forward 1h at Sun 01:00 (GMT → BST)`."""
        shift = self.shift
        way = "forward" if shift > timedelta(0) else "back"
        size = _hours(abs(shift))
        when = (self.before + timedelta(microseconds=1)).strftime("%a %d %b %H:%M")
        names = f"{self.before.tzname()} → {self.after.tzname()}"
        return f"clocks go {way} {size} at {when} {self.before.tzname()} ({names})"


def _hours(delta: timedelta) -> str:
    minutes = int(delta.total_seconds()) // 60
    hours, rest = divmod(minutes, 60)
    return f"{hours}h{rest:02d}m" if rest and hours else f"{rest}m" if rest else f"{hours}h"


def zone_of(view: TimeView) -> tuple[tzinfo, str]:
    """The axis's zone for the dashboard's time view, and its name: the IANA name where
    there is one (`Europe/London`); in the task zones view, the machine's zone (one axis
    has one zone), said so."""
    zone = view.zone()
    if view.mode == "utc":
        return zone, "UTC"
    name = zone.key if isinstance(zone, ZoneInfo) and zone.key else view.label()
    return zone, f"{name} (local)" if view.mode == "task" else name


def make_axis(
    now: int, span: int, width: int, zone: tzinfo, zone_name: str, name_width: int = NAME_MIN
) -> Axis:
    """The axis for a pane `width` cells wide: the name gutter (within NAME_MIN and
    NAME_MAX, at most a third of the width), the runs gutter, and the columns between them
    (at least one), each a whole number of seconds long, the first the one `now` is in
    (so the axis moves a column at a time, not at every tick)."""
    name_width = max(NAME_MIN, min(name_width, NAME_MAX, width // 3))
    cols = max(1, width - name_width - 1 - TOTAL_WIDTH)
    step = max(MICROS, span // cols // MICROS * MICROS)
    return Axis(now - now % step, step, cols, zone, zone_name, name_width, span)


# ---- the zone's clock changes ------------------------------------------------------------


def clock_changes(axis: Axis) -> list[ClockChange]:
    """The instants in the span at which the zone's offset changes (sampled hourly, each
    found to the second: no zone changes twice within an hour)."""
    found = []
    moment = axis.start
    offset = axis.local(moment).utcoffset()
    while moment < axis.end:
        following = min(moment + HOUR, axis.end)
        now_offset = axis.local(following).utcoffset()
        if now_offset != offset:
            low, high = moment // MICROS, following // MICROS
            while high - low > 1:
                mid = (low + high) // 2
                if axis.local(mid * MICROS).utcoffset() == offset:
                    low = mid
                else:
                    high = mid
            at = high * MICROS
            found.append(ClockChange(at, axis.local(at - 1), axis.local(at)))
            offset = now_offset
        moment = following
    return found


# ---- the axis --------------------------------------------------------------------------

_STEPS = (1, 2, 3, 4, 6, 12, 24)  # hours between labels, the first that fits


def _marks(axis: Axis) -> list[tuple[int, datetime]]:
    """Each instant in the span at which the wall clock shows a whole hour (both passes of
    a repeated hour), with its local time."""
    found = []
    moment = axis.start - axis.start % (15 * 60 * MICROS)  # offsets are whole quarters
    while moment < axis.end:
        if moment > axis.start:
            local = axis.local(moment)
            if local.minute == 0 and local.second == 0:
                found.append((moment, local))
        moment += 15 * 60 * MICROS
    return found


def _label(local: datetime, step: int, days: bool, short: bool) -> str:
    if days:
        return local.strftime("%a" if short else "%a %d")
    if local.hour == 0 and step < 24:
        return local.strftime("%a")  # midnight names the day
    return local.strftime("%H" if short else "%H:%M")


def axis_labels(axis: Axis) -> list[tuple[int, str]]:
    """(column, label) of the hour (or, over days, midnight) marks that fit, each label
    starting at its mark's column with a space before the next: every hour if they fit,
    else every 2, 3, 4, 6, 12 hours as "20:00"; else the same steps as "20"."""
    marks = _marks(axis)
    days = axis.span > 2 * 24 * HOUR
    for short in (False, True):
        for step in (24,) if days else _STEPS:
            chosen = [
                (axis.column(m), _label(local, step, days, short))
                for m, local in marks
                if local.hour % step == 0
            ]
            if _fits(chosen, axis.cols):
                return chosen
    return []


def _fits(labels: list[tuple[int, str]], cols: int) -> bool:
    last_end = -1
    for column, text in labels:
        if column <= last_end or column + len(text) > cols:
            return False
        last_end = column + len(text)
    return True


def _gutter(text: str, width: int) -> str:
    return text[: width - 1] + "…" if len(text) > width else text.ljust(width)


def total_text(count: int, estimated: bool) -> str:
    """A span's runs in at most TOTAL_WIDTH - 1 characters (a space stays before it):
    9999, 12.3k, 127k, 4.5M, with "≈" before an estimate, as precise as fits."""
    about = "≈" if estimated else ""
    room = TOTAL_WIDTH - 1 - len(about)
    if len(str(count)) <= room and count < 10_000:
        return about + str(count)
    for unit, size in (("k", 10**3), ("M", 10**6), ("G", 10**9)):
        for digits in (1, 0):
            shown = f"{count / size:.{digits}f}"
            if float(shown) < 1000 and len(shown) + 1 <= room:
                return f"{about}{shown}{unit}"
    return about + "many"


def _busiest(axis: Axis, density: Counts) -> str:
    """`02:00–02:26`, with the days over a span of days or across midnight."""
    peak = max(range(axis.cols), key=lambda c: density.per_column[c])
    low, high = axis.local(axis.edge(peak)), axis.local(axis.edge(peak + 1) - 1)
    days = axis.span > 2 * 24 * HOUR or low.date() != high.date()
    form = "%a %H:%M" if days else "%H:%M"
    end = high.strftime("%H:%M" if low.date() == high.date() else form)
    runs = density.per_column[peak]
    about = "≈" if density.estimated else ""
    return f"{low.strftime(form)}–{end}: {about}{runs} run{'' if runs == 1 else 's'}"


def title(axis: Axis, density: Counts | None) -> Text:
    """`next 24h from Sat 19:30 · Europe/London · busiest 02:00–02:26: 12 runs`."""
    start = axis.local(axis.start)
    text = Text()
    text.append(f"next {SPAN_NAMES.get(axis.span, _hours(timedelta(microseconds=axis.span)))}")
    text.append(f" from {start.strftime('%a %H:%M')}", "bold")
    text.append(f" · {axis.zone_name}", "cyan")
    if density is not None and density.total:
        text.append(f" · busiest {_busiest(axis, density)}", "yellow")
    return text


def change_line(changes: Sequence[ClockChange]) -> Text | None:
    """`▼ clocks go forward 1h at Sun 28 Mar 01:00 GMT (GMT → BST)`; None with no change."""
    if not changes:
        return None
    return Text(f"{DST_MARK} " + "; ".join(c.words() for c in changes), "bold yellow")


def axis_lines(axis: Axis, changes: Sequence[ClockChange]) -> list[Text]:
    """Two lines: the hour labels, and a rule with a tick under each label and the clock
    changes marked."""
    labels = axis_labels(axis)
    top = [" "] * axis.cols
    rule = ["─"] * axis.cols
    for column, text in labels:
        top[column : column + len(text)] = list(text)
        rule[column] = "┬"
    label_line = Text(" " * (axis.name_width + 1) + "".join(top))
    rule_line = Text(_gutter(axis.zone_name, axis.name_width) + " ", "cyan")
    rule_line.append("".join(rule), DIM)
    label_line.append(" " * TOTAL_WIDTH)
    rule_line.append("runs".rjust(TOTAL_WIDTH), DIM)
    offset = axis.name_width + 1
    for change in changes:
        column = axis.column(change.at)
        rule_line.stylize("bold yellow", offset + column, offset + column + 1)
        rule_line = _put(rule_line, offset + column, DST_MARK)
    return [label_line, rule_line]


def _put(line: Text, at: int, char: str) -> Text:
    """`line` with the cell at `at` replaced by `char`, its style kept."""
    plain = line.plain
    out = line.copy()
    out.plain = plain[:at] + char + plain[at + 1 :]
    return out


# ---- the rows ----------------------------------------------------------------------------


def task_line(
    axis: Axis,
    name: str,
    counts: Counts,
    state: str = ON,
    changes: Sequence[ClockChange] = (),
    shifted: Collection[int] = (),
) -> Text:
    """One task: its name, a mark in each column it fires in, its runs in the span. A task
    that is off or paused is dimmed, what it would run shown, and says so instead of a
    count (its runs are not in the density row). `shifted`: the columns of fire times a
    DST gap or fold moves or doubles (`dst_columns`), marked in yellow."""
    dim = state != ON
    name_style = "bold red dim" if state == PAUSED else DIM if dim else "bold"
    line = Text()
    line.append(_gutter(name, axis.name_width) + " ", name_style)
    fire_style = DIM if dim else "green"
    track = []
    clock_columns = {axis.column(c.at) for c in changes}
    for column, count in enumerate(counts.per_column):
        if count:
            track.append((FIRE, SHIFTED if column in shifted and not dim else fire_style))
        elif column in clock_columns:
            track.append(("┊", "yellow dim"))
        else:
            track.append((" ", ""))
    line.append_text(_runs(track))
    total = state if dim else total_text(counts.total, counts.estimated)
    line.append(total.rjust(TOTAL_WIDTH), DIM if dim else "")
    return line


def _runs(cells: list[tuple[str, str]]) -> Text:
    """Cells as a Text, runs of one style as one span."""
    text = Text()
    for char, style in cells:
        text.append(char, style)
    return text


def density_levels(counts: Sequence[int]) -> list[int]:
    """Each column's shade: 0 for no run, else 1 to 4 in proportion to the busiest
    column's runs (4: more than three quarters of them)."""
    peak, top = max(counts, default=0), len(SHADES) - 1
    return [-(-c * top // peak) if c else 0 for c in counts]


def density_line(axis: Axis, density: Counts) -> Text:
    """How many runs fall in each column (the tasks that are on), on a shade of their
    share of the busiest column's: the count itself while no column has 10, else a bar
    of eighths of the busiest; the total on the right."""
    line = Text()
    line.append(_gutter("runs", axis.name_width) + " ", "bold")
    counts = density.per_column
    peak = max(counts, default=0)
    track = []
    for count, level in zip(counts, density_levels(counts), strict=True):
        if not level:
            track.append(("·", DIM))
            continue
        bold = " bold" if count == peak else ""
        if peak < 10:  # the digit on the shade
            track.append((str(count), f"black on {SHADES[level]}{bold}"))
        else:  # a bar in the shade
            track.append((BARS[-(-count * len(BARS) // peak) - 1], SHADES[level] + bold))
    line.append_text(_runs(track))
    line.append(total_text(density.total, density.estimated).rjust(TOTAL_WIDTH), "bold")
    return line


def empty_line(axis: Axis, text: str) -> Text:
    return Text(" " * (axis.name_width + 1) + text, DIM)
