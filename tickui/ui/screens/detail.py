"""One task on a screen of its own: definition, next fire times, recent runs, output."""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, tzinfo

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Static

from tickui.common.options import default
from tickui.common.redact import safe_text
from tickui.common.timeutil import MICROS, format_duration
from tickui.dispatch import read_tail
from tickui.model.audit import AuditEntry
from tickui.model.coordination import RemoteOutput
from tickui.model.records import Occurrence, Task
from tickui.model.upcoming import Fire, explain
from tickui.ui.keys import DETAIL_DASHBOARD_ACTIONS, QUITTING_OFF, bindings, rank
from tickui.ui.view.audit import AUDIT_SHOWN, audit_text
from tickui.ui.view.cells import (
    CODE_STYLE,
    STATE_STYLE,
    Cell,
    TimeView,
    detail_text,
    duration,
    lateness,
    outcome_code,
    span,
    when_text,
)
from tickui.ui.view.fires import next_lines, why_text
from tickui.ui.view.layout import Column, FittedTable
from tickui.ui.widgets.panes import KeyFooter

BARS = "▁▂▃▄▅▆▇█"
SPARK_RUNS = 40  # runs read for the sparkline; the table shows the newest RUNS_SHOWN
RUNS_SHOWN = 12
WORKER_WIDTH = 16  # the runs table's WORKER column at most
DETAIL_WIDTH = 200  # and its DETAIL (the rest of the width, as much as it needs)
UTC_VIEW = TimeView("utc")
# The on-time window the engine gives a slot by default: a task later than this is behind.
GRACE = default("engine", "misfire_grace")


@dataclass(frozen=True)
class DetailSource:
    """What the detail screen needs from whoever shows it, handed down rather than
    reached for: the task's live row, its run history, the time, how to cancel, the zone
    times are shown in (UTC when not given) and why slots were skipped or missed (per
    reason: skipped occurrences, missed slots; Store.miss_reasons by task id), and what
    its r, e and E do to the task (the dashboard's own actions, given this task)."""

    current_task: Callable[[Task], Task]
    history: Callable[[str, int], Awaitable[list[Occurrence]]]
    now: Callable[[], int]
    cancel: Callable[[Occurrence | None], Awaitable[None]]
    open_run: Callable[[Occurrence], None] | None = None
    view: Callable[[], TimeView] | None = None
    reasons: Callable[[int], Awaitable[dict[str, tuple[int, int]]]] | None = None
    remote: Callable[[int], Awaitable[RemoteOutput | None]] | None = None  # a worker's report
    run_now: Callable[[Task], Awaitable[None]] | None = None
    toggle_enabled: Callable[[Task], Awaitable[None]] | None = None
    edit: Callable[[Task], None] | None = None
    quitting: Callable[[], bool] = lambda: False  # quit waits for the runs: r, e, E, enter off
    audit: Callable[[str, int], Awaitable[list[AuditEntry]]] | None = None  # who did what


def _footer_rank(action: str) -> int:
    """This screen's own keys (back, run now, cancel) drop first when the footer is narrow,
    rightmost first; the dashboard's keys bound here, and ? and q, keep their ranks."""
    return rank(action) if action in (*DETAIL_DASHBOARD_ACTIONS, "help", "quit") else rank("")


class DetailScreen(Screen[None]):
    """One task: its definition, next 10 fire times (and why, when one is not plain), recent
    runs and the selected run's output."""

    BINDINGS = [
        Binding("escape,backspace", "app.pop_screen", "Back"),
        Binding("up,k", "pick(-1)", "Older/newer", show=False),
        Binding("down,j", "pick(1)", "Older/newer", show=False),
        Binding("r", "run_now", "Run now"),
        Binding("c", "cancel_selected", "Cancel run"),
        *bindings(actions=DETAIL_DASHBOARD_ACTIONS),
    ]

    def __init__(self, task: Task, source: DetailSource) -> None:
        super().__init__()
        self.task_row = task
        self.source = source
        self.recent: list[Occurrence] = []
        self.runs: list[Occurrence] = []  # more of them, for the sparkline
        self.picked = 0
        self.reasons: dict[str, tuple[int, int]] = {}
        self.reasons_for: tuple[int, int, int] | None = None  # (task id, missed, skipped)
        self.remote: RemoteOutput | None = None  # the picked run's worker report
        self.remote_for: tuple[int, str] | None = None  # (run id, state) it was read for
        self.upcoming: list[Fire] = []
        self.fires_for: tuple | None = None
        self.actions: list[AuditEntry] = []  # the task's recent audit entries
        self.actions_for: tuple | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(id="detail-top"):
            yield Static(id="detail-facts")
            yield Static(id="detail-next")
        yield Static(id="detail-why")
        yield Static(id="detail-runs")
        yield Static(id="detail-audit")
        yield Static(id="detail-output")
        yield KeyFooter(_footer_rank)  # its own keys, dropping the least used first; ? and q stay

    async def on_mount(self) -> None:
        self.query_one("#detail-output").border_title = "Output"
        await self.reload()
        self.set_interval(0.25, self.reload)

    async def reload(self) -> None:
        source = self.source
        # The dashboard's rows are kept current (engine notices, other processes' commits);
        # only this task's run history is read here.
        self.task_row = source.current_task(self.task_row)
        picked = self.recent[self.picked].id if self.recent else None
        self.runs = await source.history(self.task_row.name, SPARK_RUNS)
        self.recent = self.runs[:RUNS_SHOWN]
        ids = [o.id for o in self.recent]
        self.picked = ids.index(picked) if picked in ids else 0
        stats = self.task_row.stats
        key = (self.task_row.id, stats.missed, stats.skipped)
        if source.reasons is not None and key != self.reasons_for:  # read when counts move
            self.reasons = await source.reasons(self.task_row.id)
            self.reasons_for = key
        await self._read_remote()
        await self._read_audit(source.now())
        self.render_all(source.now())

    async def _read_audit(self, now: int) -> None:
        """The task's recent audit entries, read again when the task or its newest run
        moved, and every 2 s (an action that moved neither: a refused run-now)."""
        if self.source.audit is None:
            return
        task, newest = self.task_row, self.runs[0] if self.runs else None
        key = (task.name, task.updated_at, newest and (newest.id, newest.state), now // 2_000_000)
        if key != self.actions_for:
            self.actions = await self.source.audit(task.name, AUDIT_SHOWN)
            self.actions_for = key

    async def _read_remote(self) -> None:
        """The picked run's worker report, read again only when the pick or its state moved."""
        occ = self.recent[self.picked] if self.recent else None
        if occ is None or not occ.worker or self.source.remote is None:
            self.remote, self.remote_for = None, None
            return
        key = (occ.id, occ.state)
        if key != self.remote_for:
            self.remote = await self.source.remote(occ.id)
            self.remote_for = key

    def zone(self) -> tzinfo:
        view = self.source.view() if self.source.view is not None else UTC_VIEW
        return view.zone(self.task_row.spec.tz)

    def render_all(self, now: int) -> None:
        zone = self.zone()
        named = zone_name(zone, now)
        facts = self.query_one("#detail-facts", Static)
        facts.border_title = f"Task {self.task_row.name}"
        facts.update(task_facts(self.task_row, self.runs, self.reasons, now))
        fires = self.fires(now)
        upcoming = self.query_one("#detail-next", Static)
        title = f"Next 10 fire times ({named})"
        fits = upcoming.size.width == 0 or len(title) + 4 <= upcoming.size.width
        upcoming.border_title = title if fits else f"Next ({named})"
        # The zone is in the title: each line is the 19-character stamp, which fits the
        # pane at 80 columns.
        upcoming.update(next_lines(fires, zone) or "none (disabled or finished)")
        why = self.query_one("#detail-why", Static)
        reasons = why_text(fires, zone)
        why.display = reasons is not None
        if reasons is not None:
            why.border_title = f"Why these times ({named}; • in the list)"
            why.update(reasons)
        runs = self.query_one("#detail-runs", Static)
        runs.border_title = f"Recent runs, times {named} (↑/↓ to pick)"
        runs.update(runs_table(self.recent, self.picked, now, zone))
        actions = self.query_one("#detail-audit", Static)
        actions.display = bool(self.actions)  # none recorded (or none read): no pane
        actions.border_title = f"Recent actions, times {named}"
        actions.update(audit_text(self.actions, now, zone))
        occ = self.recent[self.picked] if self.recent else None
        output = self.query_one("#detail-output", Static)
        if occ is None:
            output.update(Text("no runs yet", "bright_black"))
            return
        if occ.worker:
            output.border_title = f"Output of run {occ.id} ({occ.state}, on {occ.worker})"
            reported = self.remote.tail if self.remote is not None else ""
            empty = "(no output reported yet)" if occ.active else "(no output reported)"
        else:
            output.border_title = f"Output of run {occ.id} ({occ.state})"
            reported = read_tail(occ.log_path, 4000)
            empty = "(no output)"
        tail = [safe_text(line) for line in reported.splitlines()[-12:]]
        output.update(Text("\n".join(tail) or empty, "" if tail else "bright_black"))

    def fires(self, now: int) -> list[Fire]:
        """The next 10 fire times and why, worked out again once a second or when the task
        changes (a task far behind takes the planner tens of milliseconds)."""
        task = self.task_row
        key = (task.id, task.generation, task.enabled, task.next_run_at, now // MICROS)
        if key != self.fires_for:
            self.fires_for = key
            self.upcoming = (
                explain(task.spec, task.anchor, task.next_run_at, now, GRACE, 10)
                if task.enabled
                else []
            )
        return self.upcoming

    async def action_pick(self, step: int) -> None:
        if self.recent:
            self.picked = max(0, min(len(self.recent) - 1, self.picked + step))
            await self._read_remote()
            self.render_all(self.source.now())

    def action_open_selected(self) -> None:
        occ = self.recent[self.picked] if self.recent else None
        if occ is not None and self.source.open_run is not None:
            self.source.open_run(occ)

    async def action_cancel_selected(self) -> None:
        occ = self.recent[self.picked] if self.recent else None
        await self.source.cancel(occ)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return not (action in QUITTING_OFF and self.source.quitting())

    def action_detail(self) -> None:
        """enter, as on the dashboard: here it opens the picked run."""
        self.action_open_selected()

    async def action_run_now(self) -> None:
        if self.source.run_now is not None:
            await self.source.run_now(self.task_row)

    async def action_toggle_enabled(self) -> None:
        if self.source.toggle_enabled is not None:
            await self.source.toggle_enabled(self.task_row)

    def action_edit_task(self) -> None:
        if self.source.edit is not None:
            self.source.edit(self.task_row)


def zone_name(zone: tzinfo, now: int) -> str:
    """ "Europe/Berlin" for a named zone, else its abbreviation now ("CET")."""
    key = getattr(zone, "key", None)
    return key or datetime.fromtimestamp(now / MICROS, zone).tzname() or str(zone)


def task_facts(
    task: Task,
    runs: list[Occurrence] | None = None,
    reasons: dict[str, tuple[int, int]] | None = None,
    now: int = 0,
) -> Table:
    spec = task.spec
    table = Table.grid(padding=(0, 1))
    table.add_column(style="bright_black", no_wrap=True, min_width=9)
    table.add_column(no_wrap=True, overflow="ellipsis")  # one line each: the pane is 10 high
    schedule = spec.schedule_text()
    table.add_row("schedule", schedule if spec.tz in schedule else f"{schedule} ({spec.tz})")
    enabled = Text("enabled", "green") if task.enabled else Text("disabled", "yellow")
    if not task.enabled and task.note:
        enabled.append(f": {safe_text(task.note)}")
    table.add_row("state", enabled)
    table.add_row("policies", f"misfire {spec.misfire} · concurrency {spec.concurrency}")
    timeout = format_duration(spec.timeout) if spec.timeout else "none"
    jitter = format_duration(spec.jitter) if spec.jitter else "none"
    table.add_row("limits", f"timeout {timeout} · jitter {jitter}")
    table.add_row("command", safe_text(shlex.join(spec.command)))
    table.add_row("source", f"{task.source}, generation {task.generation}")
    table.add_row("durations", sparkline(runs or [], now))
    reasons = reasons or {}
    table.add_row("missed", counted(task.stats.missed, reasons, 1))
    table.add_row("skipped", counted(task.stats.skipped, reasons, 0))
    return table


def counted(total: int, reasons: dict[str, tuple[int, int]], which: int) -> Text:
    """ "3: misfire_late 2, misfire_coalesced 1": the count, then its reasons, most first."""
    text = Text(str(total), "yellow" if total else "")
    parts = sorted(
        ((counts[which], reason) for reason, counts in reasons.items() if counts[which]),
        reverse=True,
    )
    if parts:
        text.append(": " + ", ".join(f"{reason} {n}" for n, reason in parts), "bright_black")
    return text


def sparkline(runs: list[Occurrence], now: int) -> Text:
    """One bar per run that started, oldest left, its height the run's duration against
    the longest shown, its colour the outcome (green succeeded, red failed, ...)."""
    took = [
        (occ, (occ.finished_at if occ.finished_at is not None else now) - occ.started_at)
        for occ in reversed(runs)
        if occ.started_at is not None
    ]
    if not took:
        return Text("no runs yet", "bright_black")
    longest = max(max(d for _, d in took), 1)
    text = Text()
    for occ, spent in took:
        level = min(len(BARS) - 1, max(0, spent) * (len(BARS) - 1) // longest)
        text.append(BARS[level], bar_style(occ))
    text.append(f"  longest {span(longest)}", "bright_black")
    return text


def bar_style(occ: Occurrence) -> str:
    """The outcome's colour, without the bold the tables use."""
    return STATE_STYLE.get(occ.state, "").replace("bold ", "")


def runs_table(recent: list[Occurrence], picked: int, now: int, zone: tzinfo) -> FittedTable:
    """ID, STATE and CODE always show: DETAIL takes the width that is left, cut with an
    ellipsis; the other columns keep their content's width while they fit (then they are
    cut too, never run into each other)."""
    columns = [
        Column(title, max([len(title)] + [len(c) for c in _column(recent, title, now, zone)]))
        for title in ("ID", "STATE", "KIND", "SCHEDULED", "LATE", "TOOK", "CODE")
    ]
    workers = any(occ.worker for occ in recent)
    if workers:  # runs on workers (Kafka): which one; cut before anything else is
        columns.append(Column("WORKER", 6, WORKER_WIDTH, flex=True))
    columns.append(Column("DETAIL", 6, DETAIL_WIDTH, flex=True))
    rows: list[list[Cell]] = []
    for occ in recent:
        code = outcome_code(occ)
        cells: list[Cell] = [
            (str(occ.id), ""),
            (occ.state, STATE_STYLE.get(occ.state, "")),
            (kind_word(occ), ""),
            (when_text(occ.scheduled_for, now, zone), ""),
            (lateness(occ), ""),
            (duration(occ, now), ""),
            (code or "-", CODE_STYLE.get(code, "red")),
        ]
        if workers:
            cells.append((safe_text(occ.worker or "-"), "bright_black"))
        rows.append([*cells, (detail_text(occ), "")])
    styles = ["reverse" if index == picked else None for index in range(len(recent))]
    return FittedTable(columns, rows, styles)


def kind_word(occ: Occurrence) -> str:
    return "manual" if occ.kind == "manual" else "sched"


def _column(recent: list[Occurrence], title: str, now: int, zone: tzinfo) -> list[str]:
    cells = {
        "ID": lambda o: str(o.id),
        "STATE": lambda o: o.state,
        "KIND": kind_word,
        "SCHEDULED": lambda o: when_text(o.scheduled_for, now, zone),
        "LATE": lateness,
        "TOOK": lambda o: duration(o, now),
        "CODE": lambda o: outcome_code(o) or "-",
    }[title]
    return [cells(occ) for occ in recent]
