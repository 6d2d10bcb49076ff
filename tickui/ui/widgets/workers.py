"""The Workers pane: the `tickui worker` processes the engine hears from over Kafka.

Shown only where it means something (the hosted engine dispatches to Kafka, or the
database has workers on record); told what to show, it repaints only the lines whose
text changed, as the Ticks pane does. Rows never outgrow the pane: the last line then
says how many more there are (`tickui workers` lists them all).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from tickui.common.redact import safe_text
from tickui.common.timeutil import MICROS
from tickui.dispatch.refusals import security_lines
from tickui.model.records import Occurrence
from tickui.ui.view.cells import Cell, span
from tickui.ui.view.columns import OCCURRENCE_COLUMNS, OCCURRENCE_COLUMNS_WITH_WORKER, WORKER_AT
from tickui.ui.view.layout import Column, content_widths, fit_row, header_row, layout_columns
from tickui.ui.widgets.table import RowTable

# Column(title, min, preferred, priority, flex): see table.layout_columns. In the side
# pane's 36 cells WORKER, STATE, RUN and SEEN show; at 80 columns (22 cells) RUN goes;
# HOST and VERSION take wider panes.
WORKER_COLUMNS = [
    Column("WORKER", 6, 18, flex=True),
    Column("STATE", 5, 8, flex=True),
    Column("SEEN", 7, 9, priority=1, right=True),  # the last heartbeat, "2s ago"
    Column("RUN", 5, priority=2, right=True),  # running / slots
    Column("HOST", 6, 16, priority=3, flex=True),
    Column("VERSION", 7, 9, priority=4, flex=True),
]
STATE_STYLE = {"alive": "green", "lost": "bold red", "draining": "yellow", "drained": "dim"}
STATE_ORDER = {"lost": 0, "alive": 1, "draining": 2, "drained": 3}  # trouble on top


def ago(last_seen: int | None, now: int) -> str:
    """ "2s ago", "3m05s ago"; "-" when never heard from."""
    if last_seen is None:
        return "-"
    gap = max(0, now - last_seen)
    if gap < 60 * MICROS:
        return f"{gap // MICROS}s ago"
    return f"{span(gap)} ago"


def ordered(workers: Sequence[Any]) -> list[Any]:
    """Trouble first, then by id as people count (w2 before w10)."""
    return sorted(workers, key=lambda w: (STATE_ORDER.get(w.state, 4), natural(str(w.id))))


def natural(text: str) -> tuple:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text))


def worker_cells(worker: Any, now: int) -> list[Cell]:
    running = len(worker.running or ())
    busy = "bold" if worker.slots and running >= worker.slots else ""
    return [
        (safe_text(str(worker.id)), "bold"),
        (str(worker.state), STATE_STYLE.get(worker.state, "")),
        (ago(worker.last_seen, now), "bright_black"),
        (f"{running}/{worker.slots}", busy),
        (safe_text(str(worker.host or "-")), "bright_black"),
        (safe_text(str(worker.version or "-")), "bright_black"),
    ]


def title_for(workers: Sequence[Any], width: int = 10_000) -> str:
    """ "Workers · 1 lost · 3 alive": how many in each state, trouble first, as many
    states as fit `width` (the border's room for a title)."""
    counts: dict[str, int] = {}
    for worker in workers:
        counts[worker.state] = counts.get(worker.state, 0) + 1
    title = "Workers"
    for state in sorted(counts, key=lambda s: STATE_ORDER.get(s, 4)):
        longer = f"{title} · {counts[state]} {state}"
        if len(longer) > width:
            break
        title = longer
    return title


class WorkerLines(Widget):
    """A header and one line per worker, laid out by column priority to the pane's width;
    `show` repaints the lines whose cells changed (SEEN moves once a second)."""

    DEFAULT_CSS = "WorkerLines { height: auto; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.rows: list[list[Cell]] = []
        self._laid: tuple[int, tuple] | None = None
        self._layout: list[tuple[int, int]] = []

    def show(self, rows: list[list[Cell]]) -> None:
        old, self.rows = self.rows, rows
        if len(rows) != len(old) or self._wanted(rows) != self._wanted(old):
            self.refresh(layout=len(rows) != len(old))  # the grid moved: every line
            return
        width = self.size.width
        for y, (before, now) in enumerate(zip(old, rows, strict=True), start=1):
            if before != now:
                self.refresh(Region(0, y, width, 1))
        visible = self.visible()
        if len(rows) + 1 > visible > 0:
            self.refresh(Region(0, visible - 1, width, 1))  # "… N more"

    @staticmethod
    def _wanted(rows: list[list[Cell]]) -> tuple:
        return tuple(sorted(content_widths(WORKER_COLUMNS, rows).items()))

    def layout(self, width: int) -> list[tuple[int, int]]:
        wanted = self._wanted(self.rows)
        if self._laid != (width, wanted):
            self._layout = layout_columns(WORKER_COLUMNS, width, dict(wanted))
            self._laid = (width, wanted)
        return self._layout

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return 1 + max(1, len(self.rows))

    def visible(self) -> int:
        """Lines of this widget inside its pane (the pane's height is capped; the rows
        below it are counted on the last line instead of scrolled to)."""
        parent, region = self.parent, self.region
        if not isinstance(parent, Widget) or not region.height:
            return self.size.height
        return max(0, min(self.size.height, parent.content_region.bottom - region.y))

    def render_line(self, y: int) -> Strip:
        width, base = self.size.width, self.rich_style
        layout = self.layout(width)
        if y == 0:
            return self._strip(Text(header_row(WORKER_COLUMNS, layout), "bold"), width, base)
        if not self.rows:
            if y == 1:
                return self._strip(Text("no worker has reported yet", "bright_black"), width, base)
            return Strip.blank(width, base)
        visible = self.visible()
        hidden = len(self.rows) + 1 - visible
        if hidden > 0 and y == visible - 1:
            more = f"… {hidden + 1} more (tickui workers lists all)"
            return self._strip(Text(more, "bright_black"), width, base)
        if y > len(self.rows):
            return Strip.blank(width, base)
        line = Text()
        for text, style in fit_row(WORKER_COLUMNS, layout, self.rows[y - 1]):
            line.append(text, style)
        return self._strip(line, width, base)

    def _strip(self, text: Text, width: int, base: Style) -> Strip:
        text.truncate(width, overflow="ellipsis")
        segments = Segment.apply_style(text.render(self.app.console), style=base)
        return Strip(segments).adjust_cell_length(width, base)


class WorkersPane(Vertical):
    """The workers, and above them why dispatch is failing (the broker is down) when it is."""

    DEFAULT_CSS = """
    WorkersPane { overflow: hidden hidden; }
    WorkersPane #workers-problem {
        display: none;
        max-height: 2;
        color: $text-error;
        text-style: bold;
    }
    WorkersPane #workers-security {
        display: none;
        max-height: 3;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._problem: str | None = None
        self._security: tuple[tuple[str, bool], ...] = ()
        self._shown: list[Any] = []  # the workers last shown, in order, for the title

    def compose(self) -> ComposeResult:
        yield Static(id="workers-problem")
        yield Static(id="workers-security")
        yield WorkerLines(id="worker-lines")

    def on_mount(self) -> None:
        self.border_title = "Workers"

    def on_resize(self) -> None:
        self._retitle()  # as many states as fit the border's new width

    def _retitle(self) -> None:
        title = title_for(self._shown, (self.outer_size.width or 40) - 5)  # "╭─ " and " ─╮"
        if self.border_title != title:
            self.border_title = title

    def show(
        self,
        workers: Sequence[Any],
        now: int,
        problem: str | None = None,
        security: Sequence[tuple[str, bool]] = (),
    ) -> None:
        """`security`: (text, alarm) lines on signing (refusals.security_lines); only the
        alarms show here (an insecure party, messages refused)."""
        shown = self._shown = ordered(workers)
        self.query_one(WorkerLines).show([worker_cells(w, now) for w in shown])
        self._retitle()
        if problem != self._problem:
            self._problem = problem
            line = self.query_one("#workers-problem", Static)
            line.display = problem is not None
            line.update(Text(f"⚠ {safe_text(problem)}" if problem else ""))
        alarms = tuple((text, alarm) for text, alarm in security if alarm)
        if alarms != self._security:
            self._security = alarms
            line = self.query_one("#workers-security", Static)
            line.display = bool(alarms)
            shown = Text()
            for n, (text, _) in enumerate(alarms):
                shown.append(("\n" if n else "") + f"⚠ {text}", "bold yellow")
            line.update(shown)


class WorkersFeed:
    """The Workers pane read when it can have changed: each second while runs go to
    workers, else only when another process committed. `pane` finds the pane (it raises
    while the dashboard is not mounted), `start` runs a read in the background."""

    def __init__(
        self,
        pane: Callable[[], WorkersPane],
        start: Callable[[Coroutine[Any, Any, None]], object],
    ) -> None:
        self.pane = pane
        self.start = start
        self.host: Any = None  # set once the dashboard's host is up
        self._workers_shown = False
        self._workers_reading = False

    def dispatches_to_workers(self) -> bool:
        return self.host is not None and self.host.engine.dispatcher.remote

    def due(self, committed: bool = False) -> None:
        """Once a second: a fresh read while the pane shows or runs go to workers; else
        only after another process `committed` (an engine there may record workers)."""
        wanted = committed or self._workers_shown or self.dispatches_to_workers()
        if self._workers_reading or not wanted:
            return
        self.start(self.read())

    async def read(self) -> None:
        host = self.host
        if host is None or host.closed or self._workers_reading:
            return
        lister = getattr(host.store, "list_workers", None)
        self._workers_reading = True
        try:
            workers = await lister() if lister is not None else []
            engines = await host.store.dispatch_security() if lister is not None else []
        except Exception:  # the store went away: the next second tries again
            return
        finally:
            self._workers_reading = False
        show = self.dispatches_to_workers() or bool(workers)
        with contextlib.suppress(Exception):  # the dashboard is not mounted yet (or any more)
            pane = self.pane()
            if show:
                pane.show(
                    workers,
                    host.clock.now(),
                    host.engine.dispatcher.dispatch_problem,
                    security_lines(workers, engines),
                )
            if pane.display != show:
                pane.display = show
            self._workers_shown = show


class WorkerColumn:
    """The Occurrences pane's WORKER column, on once a shown run names a worker."""

    def __init__(self, table: RowTable) -> None:
        self.table = table
        self.on = False

    def cells(self, occ: Occurrence, cells: list[Cell]) -> list[Cell]:
        """The WORKER cell put in place while the column shows."""
        if self.on:
            cells.insert(WORKER_AT, (safe_text(occ.worker or "-"), "bright_black"))
        return cells

    def note(self, occ: Occurrence) -> None:
        """A run shown names a worker: the WORKER column comes (and stays)."""
        if not self.on and getattr(occ, "worker", None):
            self.show(True)

    def show(self, on: bool) -> None:
        self.on = on
        self.table.set_columns(OCCURRENCE_COLUMNS_WITH_WORKER if on else OCCURRENCE_COLUMNS)
