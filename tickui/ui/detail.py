"""One task on a screen of its own: definition, next fire times, recent runs, output."""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Static

from tickui.dispatch import read_tail
from tickui.models import Occurrence, Task
from tickui.redact import safe_text
from tickui.schedules import preview
from tickui.timeutil import format_duration
from tickui.ui.cells import STATE_STYLE, code_text, detail_text, duration, lateness, stamp_text


@dataclass(frozen=True)
class DetailSource:
    """What the detail screen needs from whoever shows it, handed down rather than
    reached for: the task's live row, its run history, the time, and how to cancel."""

    current_task: Callable[[Task], Task]
    history: Callable[[str, int], Awaitable[list[Occurrence]]]
    now: Callable[[], int]
    cancel: Callable[[Occurrence | None], Awaitable[None]]
    open_run: Callable[[Occurrence], None] | None = None


class DetailScreen(Screen[None]):
    """One task: its definition, next 10 fire times, recent runs and the selected run's output."""

    BINDINGS = [
        Binding("escape,backspace", "app.pop_screen", "Back"),
        Binding("up,k", "pick(-1)", "Older/newer", show=False),
        Binding("down,j", "pick(1)", "Older/newer", show=False),
        Binding("r", "app.run_now", "Run now"),
        Binding("c", "cancel_selected", "Cancel run"),
    ]

    def __init__(self, task: Task, source: DetailSource) -> None:
        super().__init__()
        self.task_row = task
        self.source = source
        self.recent: list[Occurrence] = []
        self.picked = 0

    def compose(self) -> ComposeResult:
        with Horizontal(id="detail-top"):
            yield Static(id="detail-facts")
            yield Static(id="detail-next")
        yield Static(id="detail-runs")
        yield Static(id="detail-output")
        yield Footer()

    async def on_mount(self) -> None:
        self.query_one("#detail-facts").border_title = f"Task {self.task_row.name}"
        self.query_one("#detail-next").border_title = "Next 10 fire times (UTC)"
        self.query_one("#detail-runs").border_title = "Recent runs (↑/↓ to pick)"
        self.query_one("#detail-output").border_title = "Output"
        await self.reload()
        self.set_interval(0.25, self.reload)

    async def reload(self) -> None:
        source = self.source
        # The dashboard's rows are kept current (engine notices, other processes' commits);
        # only this task's run history is read here.
        self.task_row = source.current_task(self.task_row)
        picked = self.recent[self.picked].id if self.recent else None
        self.recent = await source.history(self.task_row.name, 12)
        ids = [o.id for o in self.recent]
        self.picked = ids.index(picked) if picked in ids else 0
        self.render_all(source.now())

    def render_all(self, now: int) -> None:
        self.query_one("#detail-facts", Static).update(task_facts(self.task_row))
        times = preview(self.task_row.schedule, now, 10) if self.task_row.enabled else []
        self.query_one("#detail-next", Static).update(
            "\n".join(stamp_text(t) for t in times) or "none (disabled or finished)"
        )
        self.query_one("#detail-runs", Static).update(runs_table(self.recent, self.picked, now))
        occ = self.recent[self.picked] if self.recent else None
        output = self.query_one("#detail-output", Static)
        if occ is None:
            output.update(Text("no runs yet", "bright_black"))
            return
        output.border_title = f"Output of run {occ.id} ({occ.state})"
        tail = [safe_text(line) for line in read_tail(occ.log_path, 4000).splitlines()[-12:]]
        output.update(Text("\n".join(tail) or "(no output)", "" if tail else "bright_black"))

    def action_pick(self, step: int) -> None:
        if self.recent:
            self.picked = max(0, min(len(self.recent) - 1, self.picked + step))
            self.render_all(self.source.now())

    def action_open_selected(self) -> None:
        occ = self.recent[self.picked] if self.recent else None
        if occ is not None and self.source.open_run is not None:
            self.source.open_run(occ)

    async def action_cancel_selected(self) -> None:
        occ = self.recent[self.picked] if self.recent else None
        await self.source.cancel(occ)


def task_facts(task: Task) -> Table:
    spec = task.spec
    table = Table.grid(padding=(0, 1))
    table.add_column(style="bright_black", no_wrap=True)
    table.add_column()
    table.add_row("schedule", f"{spec.schedule_text()} ({spec.tz})")
    enabled = Text("enabled", "green") if task.enabled else Text("disabled", "yellow")
    if not task.enabled and task.note:
        enabled.append(f": {safe_text(task.note)}")
    table.add_row("state", enabled)
    table.add_row("misfire", spec.misfire)
    table.add_row("concurrency", spec.concurrency)
    table.add_row("timeout", format_duration(spec.timeout) if spec.timeout else "none")
    table.add_row("jitter", format_duration(spec.jitter) if spec.jitter else "none")
    table.add_row("command", safe_text(shlex.join(spec.command)))
    table.add_row("source", f"{task.source}, generation {task.generation}")
    table.add_row("missed/skipped", f"{task.stats.missed}/{task.stats.skipped}")
    return table


def runs_table(recent: list[Occurrence], picked: int, now: int) -> Table:
    table = Table(box=None, padding=(0, 1), expand=True, header_style="bold")
    for title in ("ID", "STATE", "KIND", "SCHEDULED", "LATE", "TOOK", "CODE", "DETAIL"):
        table.add_column(title, no_wrap=True, overflow="ellipsis")
    for index, occ in enumerate(recent):
        table.add_row(
            str(occ.id),
            Text(occ.state, STATE_STYLE.get(occ.state, "")),
            occ.kind,
            stamp_text(occ.scheduled_for),
            lateness(occ),
            duration(occ, now),
            code_text(occ) or "-",
            detail_text(occ),
            style="reverse" if index == picked else None,
        )
    return table
