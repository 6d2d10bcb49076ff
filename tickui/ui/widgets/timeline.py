"""The timeline: the tasks' next fire times on a time axis (tickui.ui.view.timeline draws
each line). A `ScrollView` on the Line API: it counts and draws only the task rows on
screen; the density row counts every task's runs once per schedule (tasks that share one
share the count) and again only when the axis moves a column or the tasks change.

Data comes down as attributes: `rows` (the Tasks pane's rows: `len`, `at`, `key_at`,
`index_of`), `now`, and the zone (`time_view`, the dashboard's choice, or `show_zone`);
`span` is a reactive the zoom keys step. Messages go up: `SpanChanged` when the zoom
changes, `Highlighted` when the cursor moves to another task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from datetime import UTC, tzinfo
from typing import Protocol

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tickui.model.records import Task
from tickui.ui.view import task_times
from tickui.ui.view import timeline as view
from tickui.ui.view.cells import TimeView
from tickui.ui.view.fire_counts import Counts

HEAD_LINES = 5  # title, clock change (or blank), hour labels, rule, density
# Up to this many tasks the density is counted at once; past it, a slice at a time
# between other work, the row saying so meanwhile (10,000 tasks each with its own cron
# take seconds the first time).
COUNT_AT_ONCE = 2_000
SLICE = 0.01  # seconds of counting before the loop gets a turn


class TaskSource(Protocol):
    def __len__(self) -> int: ...

    def at(self, index: int) -> Task | None: ...

    def key_at(self, index: int) -> int | None: ...

    def index_of(self, task_id: int) -> int | None: ...


class DayTimeline(ScrollView, can_focus=True):
    """The next 6 hours, 24 hours or 7 days: a row per task with a mark where it fires, a
    density row, the zone's clock changes; `+` and `-` zoom, the cursor keys move."""

    COMPONENT_CLASSES = {"timeline--cursor", "timeline--head"}
    DEFAULT_CSS = """
    DayTimeline {
        background: $surface;
        color: $foreground;
        & > .timeline--head { background: $panel; }
        & > .timeline--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
        }
        &:focus > .timeline--cursor {
            background: $block-cursor-background;
            color: $block-cursor-foreground;
        }
    }
    """
    BINDINGS = [
        Binding("plus,equals_sign", "zoom(-1)", "Zoom in", key_display="+"),
        Binding("minus", "zoom(1)", "Zoom out", key_display="-"),
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "jump(0)", "Top", show=False),
        Binding("end", "jump(-1)", "Bottom", show=False),
    ]

    span: reactive[int] = reactive(24 * view.HOUR)

    class SpanChanged(Message):
        """The zoom changed (the screen may remember it)."""

        def __init__(self, span: int) -> None:
            super().__init__()
            self.span = span

    class Highlighted(Message):
        """The cursor is on another task (the Tasks table may follow it)."""

        def __init__(self, task_id: int | None) -> None:
            super().__init__()
            self.task_id = task_id

    def __init__(
        self,
        rows: TaskSource,
        now: Callable[[], int],
        *,
        zone: tzinfo = UTC,
        zone_name: str = "UTC",
        time_view: Callable[[], TimeView] | None = None,
        id: str | None = None,
    ) -> None:
        """`time_view`: the dashboard's zone choice, read each second (the axis follows
        it); without it, the zone given (or `show_zone`)."""
        super().__init__(id=id)
        self.rows = rows
        self.now = now
        self.time_view = time_view
        self.zone, self.zone_name = view.zone_of(time_view()) if time_view else (zone, zone_name)
        self.times = task_times.TaskTimes()  # the rows on screen
        self._density_times = task_times.TaskTimes()  # every task, for the density row
        self._density: Counts | None = None
        self._density_for: tuple | None = None  # (axis start, step, columns, tasks' version)
        self._density_wanted: tuple | None = None
        self._version = 0  # bumped when the tasks change
        self._cursor = 0
        self._key: int | None = None
        self._axis: view.Axis | None = None
        self._head: list[Text] = []
        self._head_for: tuple | None = None
        self._tasks_seen: int | None = None  # a fingerprint of the tasks the density counted
        self._name_width = view.NAME_MIN
        self._changes: list[view.ClockChange] = []
        self._ticked_start: int | None = None  # the axis start the last second repainted
        self.empty_text = ""

    # ---- data down ---------------------------------------------------------------------

    def show_zone(self, zone: tzinfo, name: str) -> None:
        """The axis in another zone (the hour labels and clock changes are its)."""
        if (zone, name) != (self.zone, self.zone_name):
            self.zone, self.zone_name = zone, name
            self._head_for = None
            self.refresh()

    def sync_size(self) -> None:
        """Tasks were added, removed, reordered or changed: counted and drawn again."""
        count = len(self.rows)
        self.virtual_size = Size(0, count + HEAD_LINES)
        self._name_width = max((len(task.name) for task in self._tasks()), default=view.NAME_MIN)
        index = self.rows.index_of(self._key) if self._key is not None else None
        self._cursor = index if index is not None else max(0, min(self._cursor, count - 1))
        self._key = self.rows.key_at(self._cursor) if count else None
        self._tasks_seen = self._fingerprint()
        self._version += 1
        self._head_for = None
        self.refresh()

    def _tasks(self):
        rows = self.rows
        return (task for task in (rows.at(i) for i in range(len(rows))) if task is not None)

    def _fingerprint(self) -> int:
        """What the density depends on, of every task: a change (a task turned off, a
        schedule edited) shows at the next second."""
        return hash(
            tuple(
                (t.id, t.enabled, t.spec.kind, t.spec.expr, t.spec.tz, t.spec.anchor, t.anchor)
                for t in self._tasks()
            )
        )

    # ---- the cursor ----------------------------------------------------------------------

    @property
    def selected_key(self) -> Hashable | None:
        return self._key

    def select_key(self, key: int) -> bool:
        index = self.rows.index_of(key)
        if index is None:
            return False
        self.move_to(index)
        return True

    def refresh_row(self, index: int) -> None:
        """A task changed: its row repainted if it is on screen."""
        line = HEAD_LINES + index - self.scroll_offset.y
        if HEAD_LINES <= line < self.size.height:
            self.refresh(Region(0, line, self.size.width, 1))

    def refresh_changed(self) -> None:
        """Tasks changed: the rows on screen are drawn again now, not at the next second."""
        self.refresh()

    def show_top(self) -> None:
        """The cursor on the first row (a new filter starts there), as the table does."""
        self.move_to(0)

    def hold_briefly(self) -> None:
        """The table holds its order a moment after a key; the timeline follows the rows'
        order as it is, so nothing moves here that a key would lose."""

    def say_when_empty(self, text: str) -> None:
        """What the first row says while there is no task (as the table's)."""
        if text != self.empty_text:
            self.empty_text = text
            self.refresh()

    def move_to(self, index: int) -> None:
        count = len(self.rows)
        self._cursor = max(0, min(index, count - 1)) if count else 0
        key = self.rows.key_at(self._cursor) if count else None
        if key != self._key:
            self._key = key
            self.post_message(self.Highlighted(key))
        top, visible = self.scroll_offset.y, max(1, self.size.height - HEAD_LINES)
        if self._cursor < top:
            self.scroll_to(y=self._cursor, animate=False, immediate=True)
        elif self._cursor >= top + visible:
            self.scroll_to(y=self._cursor - visible + 1, animate=False, immediate=True)
        self.refresh()

    def action_cursor(self, step: int) -> None:
        self.move_to(self._cursor + step)

    def action_page(self, pages: int) -> None:
        self.move_to(self._cursor + pages * max(1, self.size.height - HEAD_LINES))

    def action_jump(self, where: int) -> None:
        self.move_to(0 if where == 0 else len(self.rows) - 1)

    def action_zoom(self, step: int) -> None:
        spans = view.SPANS
        at = spans.index(self.span) if self.span in spans else 1
        self.span = spans[max(0, min(at + step, len(spans) - 1))]

    def watch_span(self, span: int) -> None:
        self._head_for = None
        self.post_message(self.SpanChanged(span))
        self.refresh()

    # ---- time moves ----------------------------------------------------------------------

    def on_mount(self) -> None:
        self.sync_size()
        self.set_interval(1.0, self._each_second)

    def _each_second(self) -> None:
        """The axis moves a column at a time; a task that changed recounts the density."""
        if not self.display or not self.is_mounted:
            return
        if self.time_view is not None:
            self.show_zone(*view.zone_of(self.time_view()))
        if len(self.rows) + HEAD_LINES != self.virtual_size.height:  # added, gone, filtered
            self.sync_size()
        seen = self._fingerprint()
        if seen != self._tasks_seen:
            self._tasks_seen = seen
            self._version += 1
            self._head_for = None
        start = self._axis_now().start
        if start != self._ticked_start or self._head_for is None:
            self._ticked_start = start
            self.refresh()

    def on_resize(self) -> None:
        self._head_for = None
        self.refresh()

    # ---- painting ------------------------------------------------------------------------

    def _axis_now(self) -> view.Axis:
        width = self.scrollable_content_region.width
        return view.make_axis(
            self.now(), self.span, width, self.zone, self.zone_name, self._name_width
        )

    def _heads(self, axis: view.Axis) -> list[Text]:
        key = (axis, len(self.rows), self._version)
        if key != self._head_for:
            changes = view.clock_changes(axis)
            density = self._density_of(axis)
            change = view.change_line(changes)
            if change is None:
                change = Text("no clock change in this span", view.DIM)
            self._head = [
                view.title(axis, density),
                change,
                *view.axis_lines(axis, changes),
                view.density_line(axis, density)
                if density is not None
                else view.empty_line(axis, "counting the runs…"),
            ]
            self._changes = changes
            self._head_for = key  # a count finishing aside draws them again
        return self._head

    def _density_of(self, axis: view.Axis) -> Counts | None:
        """Every task's runs in each column: counted now for a few tasks, else a slice at
        a time between other work (None until it is done; the heads are drawn again then)."""
        key = (axis.start, axis.step, axis.cols, self._version)
        if key == self._density_for:
            return self._density
        if key == self._density_wanted:
            return None  # being counted
        tasks = list(self._tasks())
        if len(tasks) <= COUNT_AT_ONCE:
            self._density, self._density_for = self._count(tasks, axis), key
            return self._density
        if key != self._density_wanted:
            self._density_wanted = key
            self.run_worker(self._count_aside(key, tasks, axis), group="timeline", exclusive=True)
        return None

    def _count(self, tasks: list[Task], axis: view.Axis) -> Counts:
        self._density_times.changed()
        return self._density_times.density(tasks, axis)

    async def _count_aside(self, key: tuple, tasks: list[Task], axis: view.Axis) -> None:
        """Count in slices of SLICE seconds, the loop running between them; a newer count
        (exclusive) cancels this one between slices."""
        loop = asyncio.get_running_loop()
        self._density_times.changed()
        density, deadline = None, loop.time() + SLICE
        for step in self._density_times.density_steps(tasks, axis):
            if step is not None:
                density = step
            elif loop.time() > deadline:
                await asyncio.sleep(0)
                deadline = loop.time() + SLICE
        if density is not None and key == self._density_wanted:
            self._density, self._density_for = density, key
            self._head_for = None
            self.refresh()

    def render_lines(self, crop):
        self._axis = self._axis_now()
        return super().render_lines(crop)

    def _strip(self, text: Text, width: int, base: Style) -> Strip:
        text.no_wrap, text.overflow = True, "crop"
        segments = list(text.render(self.app.console))
        return Strip(Segment.apply_style(segments, style=base)).adjust_cell_length(width, base)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        axis = self._axis or self._axis_now()
        if y < HEAD_LINES:
            head = self._heads(axis)
            return self._strip(head[y], width, self.get_component_rich_style("timeline--head"))
        index = self.scroll_offset.y + y - HEAD_LINES
        task = self.rows.at(index) if index < len(self.rows) else None
        base = self.rich_style
        if task is None:
            if index == 0 and not len(self.rows):
                said = self.empty_text or "no tasks"
                return self._strip(view.empty_line(axis, said), width, base)
            return Strip.blank(width, base)
        self._heads(axis)
        counts = self.times.counts(task, axis)
        shifted = self.times.dst_columns(task, axis)
        state = task_times.task_state(task)
        line = view.task_line(axis, task.name, counts, state, self._changes, shifted)
        if index == self._cursor:  # the name only: the marks keep their colours
            line.stylize(self.get_component_rich_style("timeline--cursor"), 0, axis.name_width)
        return self._strip(line, width, base)
