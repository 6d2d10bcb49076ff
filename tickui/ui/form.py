"""The add-task form: checked on every keystroke, with a preview of the fire times."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static

from tickui.errors import BadInput
from tickui.redact import safe_text
from tickui.schedules import preview
from tickui.spec import TaskSpec, build_spec
from tickui.store import default_anchor
from tickui.ui.cells import stamp_text

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
