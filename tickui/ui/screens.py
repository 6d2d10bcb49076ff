"""Screens over the dashboard: help, confirmations, the add form and a task's detail."""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Footer, Input, Label, Select, Static

from tickui.dispatch import read_tail
from tickui.errors import BadInput
from tickui.models import Occurrence, Task
from tickui.redact import safe_text
from tickui.schedules import preview
from tickui.spec import TaskSpec, build_spec
from tickui.store import default_anchor
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


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def __init__(self, keys: list[tuple[str, str]]) -> None:
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for key, description in self.keys:
            table.add_row(key, description)
        with Vertical(id="help-box", classes="dialog"):
            yield Label("Keys", classes="dialog-title")
            yield Static(table)
            yield Label("Also in the command palette (ctrl+p). Esc closes.", classes="hint")


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, classes="dialog-title")
            with Horizontal(classes="buttons"):
                yield Button("Delete (y)", variant="error", id="yes")
                yield Button("Keep (n)", id="no")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class QuitScreen(ModalScreen[str | None]):
    """Asked on quit while runs are active: wait for them, cancel them, or stay."""

    BINDINGS = [
        Binding("w", "choose('wait')", "Wait for them"),
        Binding("c", "choose('cancel')", "Cancel them"),
        Binding("escape", "choose(None)", "Stay"),
    ]

    def __init__(self, active: int) -> None:
        super().__init__()
        self.active = active

    def compose(self) -> ComposeResult:
        runs = "1 run is" if self.active == 1 else f"{self.active} runs are"
        with Vertical(classes="dialog"):
            yield Label(f"{runs} still active. Quit how?", classes="dialog-title")
            with Horizontal(classes="buttons"):
                yield Button("Wait (w)", variant="primary", id="wait")
                yield Button("Cancel them (c)", variant="error", id="cancel")
                yield Button("Stay (esc)", id="stay")

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "stay" else event.button.id)


SCHEDULE_KINDS = [("every (duration)", "every"), ("cron", "cron"), ("at (instant)", "at")]
MISFIRE = [("run_once", "run_once"), ("skip", "skip"), ("run_all", "run_all")]
CONCURRENCY = [("forbid", "forbid"), ("allow", "allow"), ("replace", "replace")]


def form_spec(values: dict[str, str], now: int) -> TaskSpec:
    """The add form's fields as a task definition, or BadInput naming the field."""
    raw: dict[str, Any] = {"name": values["name"].strip()}
    raw[values["kind"]] = values["expr"].strip()
    for key in ("tz", "timeout", "jitter"):
        if values.get(key, "").strip():
            raw[key] = values[key].strip()
    raw["misfire"] = values["misfire"]
    raw["concurrency"] = values["concurrency"]
    try:
        raw["command"] = shlex.split(values["command"])
    except ValueError as exc:
        raise BadInput("command", str(exc)) from None
    return build_spec(raw, now)


class AddTaskScreen(ModalScreen[TaskSpec | None]):
    """A form that checks the definition on every keystroke and previews its fire times."""

    BINDINGS = [
        Binding("escape", "dismiss(None)", "Cancel"),
        Binding("ctrl+s", "submit", "Add task"),
    ]

    def __init__(self, now: Callable[[], int]) -> None:
        super().__init__()
        self.now = now
        self.spec: TaskSpec | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="add-box", classes="dialog"):
            yield Label("Add a task", classes="dialog-title")
            yield Input(placeholder="name, e.g. backup", id="name")
            with Horizontal(classes="row"):
                yield Select(SCHEDULE_KINDS, value="every", allow_blank=False, id="kind")
                yield Input(placeholder="30s | */5 * * * * | 2027-01-01T00:00Z", id="expr")
            with Horizontal(classes="row"):
                yield Select(MISFIRE, value="run_once", allow_blank=False, id="misfire")
                yield Select(CONCURRENCY, value="forbid", allow_blank=False, id="concurrency")
            with Horizontal(classes="row"):
                yield Input(placeholder="time zone (UTC)", id="tz")
                yield Input(placeholder="timeout, e.g. 5m", id="timeout")
            yield Input(placeholder="command, e.g. sh -c 'echo hi'", id="command")
            yield Static(id="verdict")
            with Horizontal(classes="buttons"):
                yield Button("Add (ctrl+s)", variant="primary", id="add", disabled=True)
                yield Button("Cancel (esc)", id="cancel")

    def on_mount(self) -> None:
        if self.app.is_headless:  # snapshots: a blinking cursor is not deterministic
            for box in self.query(Input):
                box.cursor_blink = False
        self.query_one("#name", Input).focus()
        self.check()

    def values(self) -> dict[str, str]:
        fields = {w.id: w.value for w in self.query(Input) if w.id}
        for select in self.query(Select):
            fields[select.id or ""] = str(select.value)
        return fields

    @on(Input.Changed)
    @on(Select.Changed)
    def check(self) -> None:
        verdict = self.query_one("#verdict", Static)
        now = self.now()
        try:
            spec = form_spec(self.values(), now)
        except BadInput as exc:
            self.spec = None
            verdict.update(Text(f"✗ {safe_text(exc)}", "bold red"))
            verdict.set_class(True, "-error")
        else:
            self.spec = spec
            times = preview(spec.schedule(default_anchor(spec, now)), now, 5)
            lines = Text("✓ next runs (UTC): ", "bold green")
            lines.append(", ".join(stamp_text(t)[11:] for t in times) or "none")
            verdict.update(lines)
            verdict.set_class(False, "-error")
        self.query_one("#add", Button).disabled = self.spec is None

    def action_submit(self) -> None:
        if self.spec is not None:
            self.dismiss(self.spec)

    @on(Button.Pressed, "#add")
    def add(self) -> None:
        self.action_submit()

    @on(Button.Pressed, "#cancel")
    def cancel(self) -> None:
        self.dismiss(None)


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
