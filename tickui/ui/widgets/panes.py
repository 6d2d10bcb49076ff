"""The dashboard's panes. Each is told what to show (attributes down); none does I/O."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, tzinfo

from rich.console import Group
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.events import Click
from textual.geometry import Region, Size
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Sparkline, Static

from tickui.common.redact import safe_text
from tickui.engine import EngineStatus
from tickui.ticks.breaker import CLOSED, HALF_OPEN, OPEN
from tickui.ticks.ticker import TickerMetrics
from tickui.ui.view.cells import clock_in, span
from tickui.ui.widgets.table import RowTable

BREAKER_STYLE = {CLOSED: "bold green", OPEN: "bold white on red", HALF_OPEN: "bold black on yellow"}


class StatusLine(Static):
    """Database, engine and ticker state, the clock in the chosen zone, and the time scale
    when not 1. While quitting waits for runs, it says so and how to stop waiting."""

    _shown: Text | None = None

    def _fit(self, head: Text, parts: list[tuple[int, Text]], db: str) -> Text:
        """The line at this width: parts dropped, least needed first, rather than cut
        (a cut left a stray separator); the database last, its start cut ("…/x.db")."""
        width = self.size.width or 10_000
        kept = list(parts)
        while kept and _joined(head, [t for _, t in kept]).cell_len > width:
            kept.remove(max(kept, key=lambda part: part[0]))
        text = _joined(head, [t for _, t in kept])
        room = width - text.cell_len - 4  # " │ " and a cell to spare
        if room >= 8:
            shown = db if len(db) <= room else "…" + db[len(db) - room + 1 :]
            text.append(f" │ {shown}", "bright_black")
        text.no_wrap, text.overflow = True, "ellipsis"  # one line even when the head is long
        return text

    def show(
        self,
        db: str,
        engine: EngineStatus | None,
        ticker_status: str,
        now: int,
        scale: float,
        demo: bool,
        zone: tzinfo = UTC,
        zone_label: str = "UTC",
        waiting: int | None = None,
        watching: bool = False,
        outage: str | None = None,
    ) -> None:
        head = Text.assemble((" tickui ", "bold reverse"), " ")
        if demo:
            head.append("DEMO ", "bold magenta")
        if waiting is not None:
            runs = "1 run" if waiting == 1 else f"{waiting} runs"
            head.append(f"quitting: waiting for {runs} (c cancels them)", "bold black on yellow")
        else:
            head.append("engine ")
            head.append(*engine_state(engine, ticker_status, watching))
        if outage is not None:
            head.append(f" store down: {safe_text(outage)}", "bold white on red")
        clock = clock_in(now, zone)
        # (what is dropped first when the line is short: a higher number), then the text
        parts = [
            (
                2,
                Text.assemble(
                    "ticker ", (ticker_status, "green" if ticker_status == "running" else "yellow")
                ),
            ),
            (1, Text(f"{clock} {zone_label}", "bold")),
        ]
        if scale != 1:
            parts.append((0, Text(f"time ×{scale:g}", "bold magenta")))
        text = self._fit(head, parts, db)
        if text != self._shown:  # the clock moves once a second; nothing else repaints it
            self._shown = text
            self.update(text, layout=False)  # one line, always: no layout pass


def _joined(head: Text, parts: list[Text]) -> Text:
    text = head.copy()
    for part in parts:
        text.append(" │ ")
        text.append_text(part)
    return text


def engine_state(
    status: EngineStatus | None, ticker_status: str, watching: bool = False
) -> tuple[str, str]:
    """running / standby (holder) / stopped / waiting (for its first tick, or for ticks);
    none here, for a dashboard that only watches."""
    if watching:
        return "none here (watching: the lease holder runs)", "bold cyan"
    if status is None or not status.running:
        return "stopped", "bold yellow"
    if status.lease_state == "standby":
        return f"standby (lease held by {status.holder or '?'})", "bold yellow"
    if status.result == "error":
        return f"error: {safe_text(status.detail)}", "bold red"
    if status.lease_state != "held" or ticker_status != "running":
        return "waiting for ticks" if ticker_status != "running" else "waiting", "yellow"
    if status.warning:
        return f"running, {status.warning}", "bold yellow"
    return "running", "bold green"


class Banner(Static):
    """A loud line while publishes are being failed on purpose."""


class TablePane(Vertical):
    """A table under a titled border; `others`: more views of the same rows, hidden
    until the screen shows one instead of the table."""

    def __init__(self, title: str, table: RowTable, *others: Widget, **kwargs) -> None:
        super().__init__(**kwargs)
        self.border_title = title
        self.table = table
        self.others = others

    def compose(self) -> ComposeResult:
        yield self.table
        for view in self.others:
            view.display = False
            yield view


class TicksPane(Vertical):
    """Facts, a sparkline and its label; each part repaints only when its text (or, for
    the sparkline, its values) changed, and never asks for a layout pass unless the number
    of fact lines changed."""

    metrics: reactive[TickerMetrics | None] = reactive(None, always_update=True, repaint=False)
    _label: Text | None = None

    def compose(self) -> ComposeResult:
        yield FactLines(id="tick-facts")
        yield Sparkline([], id="tick-spark")
        yield Static(id="tick-spark-label")

    def on_mount(self) -> None:
        self.border_title = "Ticks"

    def watch_metrics(self, metrics: TickerMetrics | None) -> None:
        if metrics is None:
            return
        self.query_one("#tick-facts", FactLines).show(tick_rows(metrics))
        data = metrics.publish_recent_ms if metrics.bus != "none" else metrics.lateness_recent_ms
        what = "publish ms" if metrics.bus != "none" else "lateness ms"
        recent = list(data[-60:])
        spark = self.query_one("#tick-spark", Sparkline)
        if spark.data != recent:  # only when a new value arrived
            spark.data = recent
        peak = max(recent) if recent else 0.0
        label = Text(f"{what}, last {len(recent)}: peak {peak:.2f}", "bright_black")
        if label != self._label:
            self._label = label
            self.query_one("#tick-spark-label", Static).update(label, layout=False)


class FactLines(Widget):
    """Label and value lines (a grid of two columns, the first 9 wide), drawn line by line:
    `show` repaints only the lines whose text changed."""

    DEFAULT_CSS = "FactLines { height: auto; }"
    LABEL_WIDTH = 9

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.rows: list[tuple[str, Text]] = []

    def show(self, rows: list[tuple[str, Text]]) -> None:
        old, self.rows = self.rows, rows
        if len(rows) != len(old):
            self.refresh(layout=True)
            return
        if _value_width(rows) != _value_width(old):  # the grid's width moved: every line
            self.refresh()
            return
        width = self.size.width
        for y, (before, now) in enumerate(zip(old, rows, strict=True)):
            if before != now:
                self.refresh(Region(0, y, width, 1))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.rows)

    def render_line(self, y: int) -> Strip:
        width, base = self.size.width, self.rich_style
        if y >= len(self.rows):
            return Strip.blank(width, base)
        label, value = self.rows[y]
        # as a two-column grid draws it: the values padded to the widest one (and cut with
        # an ellipsis to the width left), the rest of the line left to the background
        room = max(0, width - self.LABEL_WIDTH - 1)
        cell = value.copy()
        cell.truncate(min(room, _value_width(self.rows)), overflow="ellipsis", pad=True)
        line = Text.assemble((label.ljust(self.LABEL_WIDTH) + " ", "bright_black"), cell)
        segments = Segment.apply_style(line.render(self.app.console), style=base)
        return Strip(segments)  # the styles cache pads it to the width in the background


def _value_width(rows: list[tuple[str, Text]]) -> int:
    return max((value.cell_len for _, value in rows), default=0)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def tick_rows(m: TickerMetrics) -> list[tuple[str, Text]]:
    """The Ticks pane's facts as (label, value) lines: comparable, so an unchanged pane is
    not repainted."""
    status_style = "bold green" if m.status == "running" else "bold yellow"
    rate_style = "green" if m.success_rate >= 0.99 else "bold red"
    rows = [
        ("status", Text(m.status, status_style)),
        ("interval", Text(f"{m.interval_ms} ms · bus {m.bus}")),
        ("sequence", Text(f"{m.current_sequence} ({m.sequence_store}, {m.sequence_state})")),
        (
            "emitted",
            Text.assemble(
                str(m.ticks_emitted),
                " · failed ",
                (str(m.ticks_failed), "red" if m.ticks_failed else ""),
                " · missed ",
                (str(m.ticks_missed), "yellow" if m.ticks_missed else ""),
            ),
        ),
        ("success", Text(f"{m.success_rate * 100:.1f}%", rate_style)),
        ("lateness", Text(f"p50 {_ms(m.lateness_p50_ms)} · p99 {_ms(m.lateness_p99_ms)}")),
        ("publish", Text(f"last {_ms(m.publish_last_ms)} · max {_ms(m.publish_max_ms)}")),
        ("uptime", Text(span(round(m.uptime_s * 1_000_000)) if m.uptime_s else "-")),
    ]
    if m.sequence_error:
        rows.append(("seq error", Text(safe_text(m.sequence_error), "red")))
    return rows


class BreakerPane(Static):
    metrics: reactive[TickerMetrics | None] = reactive(None, always_update=True, repaint=False)

    _shown: tuple | None = None
    note: str = ""  # set before `metrics`: e.g. when it closes after `f` was turned off

    def on_mount(self) -> None:
        self.border_title = "Circuit breaker"

    def watch_metrics(self, metrics: TickerMetrics | None) -> None:
        if metrics is None:
            return
        shown = (breaker_key(metrics), self.note)
        if shown != self._shown:  # a tick that changed nothing here repaints nothing
            self._shown = shown
            self.update(breaker_view(metrics, self.note), layout=False)  # size: the layout's
            self.set_class(metrics.breaker_state == OPEN, "-open")


def _probe(m: TickerMetrics) -> str:
    return "-" if m.breaker_retry_in_s is None else f"in {m.breaker_retry_in_s:.0f}s"


def breaker_key(m: TickerMetrics) -> tuple:
    """What `breaker_view` shows, as plain values."""
    recent = tuple((t["at"], t["from"], t["to"], t["reason"]) for t in m.transitions[-4:])
    return (
        m.breaker_state,
        m.breaker_failures,
        m.breaker_threshold,
        _probe(m),
        m.last_error,
        recent,
    )


def breaker_view(m: TickerMetrics, note: str = "") -> Group:
    state = Text(f" {m.breaker_state} ", BREAKER_STYLE.get(m.breaker_state, "bold"))
    facts = Table.grid(padding=(0, 1))
    facts.add_column(style="bright_black", no_wrap=True, min_width=10)
    facts.add_column()
    facts.add_row("failures", f"{m.breaker_failures} of {m.breaker_threshold}")
    facts.add_row("next probe", _probe(m))
    facts.add_row("last error", Text(safe_text(m.last_error) if m.last_error else "-", "red"))
    lines = [state, facts]
    if note:
        lines.append(Text(note, "yellow"))
    if m.transitions:
        lines.append(Text("recent transitions", "bright_black"))
        for t in m.transitions[-4:][::-1]:
            at = (t["at"] or "")[11:19]
            lines.append(Text(f"{at} {t['from']}→{t['to']}: {safe_text(t['reason'])}", "dim"))
    return Group(*lines)


class KeyFooter(Widget):
    """The screen's keys on one line. When they do not fit, the least important go first
    (`rank`: lower stays longer; rank 0 always shows), so help and quit never drop off.
    Follows the screen's bindings (check_action hides or dims them); a click presses the key."""

    DEFAULT_CSS = """
    KeyFooter {
        dock: bottom;
        height: 1;
        background: $footer-background;
    }
    KeyFooter > .key-footer--key {
        color: $footer-key-foreground;
        text-style: bold;
    }
    KeyFooter > .key-footer--label {
        color: $footer-description-foreground;
    }
    """
    COMPONENT_CLASSES = {"key-footer--key", "key-footer--label"}

    def __init__(self, rank: Callable[[str], int], **kwargs) -> None:
        super().__init__(**kwargs)
        self.rank = rank
        self._spans: list[tuple[int, int, str]] = []  # (start x, end x, key to press)
        self._items: list[tuple[str, str, str, bool, str]] = []

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def _bindings_changed(self, _screen: object) -> None:
        items = self.items()
        if items != self._items:  # focus moves publish this often; repaint on a change only
            self._items = items
            self.refresh()

    def items(self) -> list[tuple[str, str, str, bool, str]]:
        """(key to press, key as shown, label, enabled, action) of each shown binding."""
        seen: set[str] = set()
        found = []
        for _node, binding, enabled, _tip in self.screen.active_bindings.values():
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)
            shown = binding.key_display or self.app.get_key_display(binding)
            found.append((binding.key, shown, binding.description, enabled, binding.action))
        return found

    def fitted(self, width: int) -> list[tuple[str, str, str, bool, str]]:
        """The items that fit in `width`, dropping the highest rank (then the rightmost)."""
        items = self.items()
        keep = list(range(len(items)))
        needed = sum(len(shown) + len(label) + 3 for _, shown, label, _, _ in items)
        while keep and needed > width:
            drop = max(keep, key=lambda i: (self.rank(items[i][4]), i))
            if self.rank(items[drop][4]) == 0:
                break
            keep.remove(drop)
            needed -= len(items[drop][1]) + len(items[drop][2]) + 3
        return [items[i] for i in keep]

    def render(self) -> Text:
        key_style = self.get_component_rich_style("key-footer--key")
        label_style = self.get_component_rich_style("key-footer--label")
        text = Text(no_wrap=True, overflow="crop")
        self._spans = []
        for key, shown, label, enabled, _ in self.fitted(self.size.width):
            start = text.cell_len
            dim = "" if enabled else " dim"
            text.append(f" {shown} ", key_style + Style.parse("bold" + dim))
            text.append(f"{label} ", label_style + Style.parse("none" + dim))
            self._spans.append((start, text.cell_len, key))
        return text

    def on_resize(self) -> None:
        self.refresh()

    def on_click(self, event: Click) -> None:
        for start, end, key in self._spans:
            if start <= event.x < end:
                self.app.simulate_key(key)
                return
