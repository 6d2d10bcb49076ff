"""The dashboard's panes. Each is told what to show (attributes down); none does I/O."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Sparkline, Static

from tickui.breaker import CLOSED, HALF_OPEN, OPEN
from tickui.engine import EngineStatus
from tickui.redact import safe_text
from tickui.ticker import TickerMetrics
from tickui.ui.cells import Cell, clock_text, span
from tickui.ui.rows import OccurrenceRows, TaskRows
from tickui.ui.table import Column, RowSource, RowTable

TASK_COLUMNS = [
    Column("NAME", 16),
    Column("SCHEDULE", 14, priority=3),
    Column("NEXT", 8),
    Column("LEFT", 6),
    Column("LAST", 8, priority=5),
    Column("PASSED", 6, priority=6),
    Column("RESULT", 9),
    Column("ENABLED", 0),
    Column("POLICY", 11, priority=7),
    Column("MISS/SKIP", 9, priority=4),
]
OCCURRENCE_COLUMNS = [
    Column("ID", 6, priority=5),
    Column("STATE", 9),
    Column("TASK", 16),
    Column("KIND", 6, priority=4),
    Column("SCHED", 8, priority=3),
    Column("START", 8),
    Column("LATE", 6, priority=2),
    Column("TOOK", 6),
    Column("CODE", 11, priority=1),
    Column("DETAIL", 0),
]
BREAKER_STYLE = {CLOSED: "bold green", OPEN: "bold white on red", HALF_OPEN: "bold black on yellow"}


class CellSource(RowSource):
    """Rows (`TaskRows` or `OccurrenceRows`) read through their cell function."""

    def __init__(self, rows: TaskRows | OccurrenceRows, cells: Callable[[Any, int], list[Cell]]):
        self.rows = rows
        self.to_cells = cells

    def __len__(self) -> int:
        return len(self.rows)

    def cells(self, index: int, now: int) -> list[Cell] | None:
        row = self.rows.at(index)
        return self.to_cells(row, now) if row is not None else None


class StatusLine(Static):
    """Database, engine and ticker state, the clock, and the time scale when not 1."""

    def show(
        self,
        db: str,
        engine: EngineStatus | None,
        ticker_status: str,
        now: int,
        scale: float,
        demo: bool,
    ) -> None:
        text = Text.assemble((" tickui ", "bold reverse"), " ")
        if demo:
            text.append("DEMO ", "bold magenta")
        text.append("engine ")
        text.append(*engine_state(engine, ticker_status))
        text.append(" │ ticker ", "")
        text.append(ticker_status, "green" if ticker_status == "running" else "yellow")
        text.append(f" │ {clock_text(now)} UTC", "bold")
        if scale != 1:
            text.append(f" │ time ×{scale:g}", "bold magenta")
        text.append(f" │ {db}", "bright_black")
        self.update(text)


def engine_state(status: EngineStatus | None, ticker_status: str) -> tuple[str, str]:
    """running / standby (holder) / stopped / waiting (for its first tick, or for ticks)."""
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
    def __init__(self, title: str, table: RowTable, **kwargs) -> None:
        super().__init__(**kwargs)
        self.border_title = title
        self.table = table

    def compose(self) -> ComposeResult:
        yield self.table


class TicksPane(Vertical):
    metrics: reactive[TickerMetrics | None] = reactive(None, always_update=True)

    def compose(self) -> ComposeResult:
        yield Static(id="tick-facts")
        yield Sparkline([], id="tick-spark")
        yield Static(id="tick-spark-label")

    def on_mount(self) -> None:
        self.border_title = "Ticks"

    def watch_metrics(self, metrics: TickerMetrics | None) -> None:
        if metrics is None:
            return
        self.query_one("#tick-facts", Static).update(tick_facts(metrics))
        data = metrics.publish_recent_ms if metrics.bus != "none" else metrics.lateness_recent_ms
        what = "publish ms" if metrics.bus != "none" else "lateness ms"
        self.query_one("#tick-spark", Sparkline).data = list(data[-60:])
        peak = max(data[-60:]) if data else 0.0
        self.query_one("#tick-spark-label", Static).update(
            Text(f"{what}, last {min(len(data), 60)}: peak {peak:.2f}", "bright_black")
        )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def tick_facts(m: TickerMetrics) -> Table:
    table = Table.grid(padding=(0, 1))
    table.add_column(
        style="bright_black", no_wrap=True, min_width=9
    )  # a long error cannot squeeze it
    table.add_column(no_wrap=True, overflow="ellipsis")
    status_style = "bold green" if m.status == "running" else "bold yellow"
    table.add_row("status", Text(m.status, status_style))
    table.add_row("interval", f"{m.interval_ms} ms · bus {m.bus}")
    table.add_row("sequence", f"{m.current_sequence} ({m.sequence_store}, {m.sequence_state})")
    table.add_row(
        "emitted",
        Text.assemble(
            str(m.ticks_emitted),
            " · failed ",
            (str(m.ticks_failed), "red" if m.ticks_failed else ""),
            " · missed ",
            (str(m.ticks_missed), "yellow" if m.ticks_missed else ""),
        ),
    )
    rate_style = "green" if m.success_rate >= 0.99 else "bold red"
    table.add_row("success", Text(f"{m.success_rate * 100:.1f}%", rate_style))
    table.add_row("lateness", f"p50 {_ms(m.lateness_p50_ms)} · p99 {_ms(m.lateness_p99_ms)}")
    table.add_row("publish", f"last {_ms(m.publish_last_ms)} · max {_ms(m.publish_max_ms)}")
    table.add_row("uptime", span(round(m.uptime_s * 1_000_000)) if m.uptime_s else "-")
    if m.sequence_error:
        table.add_row("seq error", Text(safe_text(m.sequence_error), "red"))
    return table


class BreakerPane(Static):
    metrics: reactive[TickerMetrics | None] = reactive(None, always_update=True)

    def on_mount(self) -> None:
        self.border_title = "Circuit breaker"

    def watch_metrics(self, metrics: TickerMetrics | None) -> None:
        if metrics is not None:
            self.update(breaker_view(metrics))
            self.set_class(metrics.breaker_state == OPEN, "-open")


def breaker_view(m: TickerMetrics) -> Group:
    state = Text(f" {m.breaker_state} ", BREAKER_STYLE.get(m.breaker_state, "bold"))
    facts = Table.grid(padding=(0, 1))
    facts.add_column(style="bright_black", no_wrap=True, min_width=10)
    facts.add_column()
    facts.add_row("failures", f"{m.breaker_failures} of {m.breaker_threshold}")
    probe = "-" if m.breaker_retry_in_s is None else f"in {m.breaker_retry_in_s:.0f}s"
    facts.add_row("next probe", probe)
    facts.add_row("last error", Text(safe_text(m.last_error) if m.last_error else "-", "red"))
    lines = [state, facts]
    if m.transitions:
        lines.append(Text("recent transitions", "bright_black"))
        for t in m.transitions[-4:][::-1]:
            at = (t["at"] or "")[11:19]
            lines.append(Text(f"{at} {t['from']}→{t['to']}: {safe_text(t['reason'])}", "dim"))
    return Group(*lines)
