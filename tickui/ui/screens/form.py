"""The add/edit task form: checked on every keystroke, with a reading of the schedule and
its next fire times in the task's own zone."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Collapsible, Footer, Input, Label, Select, Static
from textual.widgets._select import SelectOverlay

from tickui.common.errors import BadInput
from tickui.common.redact import safe_text
from tickui.common.timeutil import MICROS, format_duration, iso, parse_duration
from tickui.model.export import spec_fields
from tickui.model.records import Task
from tickui.model.retries import DEFAULT_DELAY
from tickui.model.spec import TaskSpec, build_spec, check_name
from tickui.schedules.cron import MACROS
from tickui.schedules.triggers import preview
from tickui.store import default_anchor
from tickui.ui.screens.dialogs import ConfirmScreen

SCHEDULE_KINDS = [("every (duration)", "every"), ("cron", "cron"), ("at (instant)", "at")]
MISFIRE = [("run_once", "run_once"), ("skip", "skip"), ("run_all", "run_all")]
CONCURRENCY = [
    ("forbid", "forbid"),
    ("allow", "allow"),
    ("replace", "replace"),
    ("buffer_one", "buffer_one"),
]
KIND_OF = {"interval": "every", "cron": "cron", "once": "at"}
MISFIRE_HELP = {
    "run_once": "Late (after downtime): run once for all the missed slots.",
    "skip": "Late (after downtime): record the missed slots skipped, wait for the next.",
    "run_all": "Late (after downtime): run every missed slot (the newest 100), in turn.",
}
CONCURRENCY_HELP = {
    "forbid": "Still running at the next slot: skip the new slot.",
    "allow": "Still running at the next slot: run both at once.",
    "replace": "Still running at the next slot: cancel the old run, start the new one.",
    "buffer_one": "Still running at the next slot: it waits and starts when the run ends"
    " (one waits at most; further slots are skipped).",
}
KIND_HELP = {
    "every": "A duration, e.g. 500ms, 30s, 5m, 2h, 1d.",
    "at": "One instant: 2027-01-15T09:00Z or 2027-01-15T09:00+01:00.",
}
# Fields the user must fill; an empty one is "still to fill in", never an error.
REQUIRED = (("name", "name"), ("expr", "schedule"), ("command", "command"))
_CRON_FIELD = r"[0-9A-Za-z*/,?LW#-]+"
_LOOKS_LIKE_CRON = re.compile(rf"(@\w+|{_CRON_FIELD}(\s+{_CRON_FIELD}){{4,5}})")


def form_spec(values: dict[str, str], now: int) -> TaskSpec:
    """The form's fields as a task definition, or BadInput naming the field."""
    raw: dict[str, Any] = {"name": values["name"].strip()}
    raw[values["kind"]] = values["expr"].strip()
    for key in ("tz", "timeout", "jitter", "retries", "retry_delay", "pause_after"):
        if values.get(key, "").strip():
            raw[key] = values[key].strip()
    raw["misfire"] = values["misfire"]
    raw["concurrency"] = values["concurrency"]
    # kept from the task being edited (the form does not show them)
    for key in ("anchor", "cwd", "env", "disabled", "retry_max_delay", "retry_on"):
        if values.get(key) is not None:
            raw[key] = values[key]
    try:
        raw["command"] = shlex.split(values["command"])
    except ValueError as exc:
        raise BadInput("command", str(exc)) from None
    return build_spec(raw, now)


def duration_field(micros: int) -> str:
    """A duration as the form's text, exact: "5m", else seconds with 6 decimals."""
    text = format_duration(micros)
    if parse_duration(text) != micros:
        text = f"{micros / MICROS:.6f}".rstrip("0").rstrip(".") + "s"
    return text


def spec_values(spec: TaskSpec) -> dict[str, str]:
    """A task's definition as the form's fields: form_spec of these gives the spec back."""
    if spec.kind == "interval":
        expr = duration_field(int(spec.expr))
    elif spec.kind == "once":
        expr = iso(int(spec.expr))
    else:
        expr = spec.expr
    return {
        "name": spec.name,
        "kind": KIND_OF[spec.kind],
        "expr": expr,
        "tz": spec.tz,
        "timeout": duration_field(spec.timeout) if spec.timeout else "",
        "jitter": duration_field(spec.jitter) if spec.jitter else "",
        "misfire": spec.misfire,
        "concurrency": spec.concurrency,
        "command": shlex.join(spec.command),
        "retries": str(spec.retries) if spec.retries else "",
        "retry_delay": (
            "" if spec.retry_delay == DEFAULT_DELAY else duration_field(spec.retry_delay)
        ),
        "pause_after": str(spec.pause_after) if spec.pause_after else "",
    }


def looks_like_cron(text: str) -> bool:
    """A cron expression typed where a duration goes ("*/5 * * * *", "@daily")."""
    return bool(_LOOKS_LIKE_CRON.fullmatch(text.strip()))


def describe_cron(expr: str) -> str:
    """A human reading, 24-hour clock: "At 09:00, only on Monday"; "" when it has none."""
    from cron_descriptor import ExpressionDescriptor, Options

    text = MACROS.get(expr.strip().lower(), expr.strip())
    options = Options()
    options.use_24hour_time_format = True
    try:
        return ExpressionDescriptor(text, options).get_description()
    except Exception:  # the library's own errors; the form's check names the real problem
        return ""


def fire_time(moment: int, zone: tzinfo, seconds: bool) -> str:
    """ "Mon 2027-01-18 09:00 CET": weekday, date and time in the task's zone."""
    local = datetime.fromtimestamp(moment / MICROS, UTC).astimezone(zone)
    return local.strftime("%a %Y-%m-%d %H:%M" + (":%S" if seconds else "") + " %Z")


def _offset(moment: int, zone: tzinfo) -> object:
    return datetime.fromtimestamp(moment / MICROS, UTC).astimezone(zone).utcoffset()


def _zone_label(zone: tzinfo, now: int) -> str:
    key = getattr(zone, "key", None)
    return key or datetime.fromtimestamp(now / MICROS, zone).tzname() or str(zone)


def fire_times(times: list[int], zone: tzinfo) -> list[str]:
    seconds = any(t % (60 * MICROS) for t in times)
    return [fire_time(t, zone, seconds) for t in times]


class ChoiceField(Select[str]):
    """A select of the form: a choice made in its list (enter or a click) moves on to the
    next field, as enter does in a text field; enter on the same select would only open
    the list again, round and round."""

    @on(SelectOverlay.UpdateSelection)
    def _chosen(self) -> None:
        self.call_after_refresh(self.screen.focus_next)


class AddTaskScreen(ModalScreen[TaskSpec | None]):
    """Add a task, or edit one (`task` given): checks the definition on every keystroke,
    reads the schedule back in words and previews its next 5 fire times."""

    DEFAULT_CSS = """
    AddTaskScreen {
        align: center middle;
    }
    AddTaskScreen #add-box {
        width: 76;
        max-width: 95%;
        height: auto;
        max-height: 96%;
    }
    AddTaskScreen .field {
        height: auto;
        width: 1fr;
    }
    AddTaskScreen .row {
        height: auto;
    }
    AddTaskScreen .label {
        color: $text-muted;
        text-style: bold;
    }
    AddTaskScreen .help {
        color: $text-muted;
        height: auto;
        padding: 0 1;
    }
    AddTaskScreen .field-error {
        color: $error;
        height: auto;
        padding: 0 1;
        display: none;
    }
    AddTaskScreen #verdict {
        height: auto;
        margin-top: 1;
    }
    AddTaskScreen .buttons {
        height: auto;
    }
    AddTaskScreen #failing {
        border-top: none;
        padding: 0;
        background: $surface;
    }
    AddTaskScreen #failing > Contents {
        padding: 0;
    }
    """
    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "submit", "Save"),
    ]

    def __init__(
        self,
        now: Callable[[], int],
        task: Task | None = None,
        zone_for_preview: tzinfo | None = None,
        taken: Callable[[str], bool] | None = None,
    ) -> None:
        """`zone_for_preview`: the dashboard's zone; fire times show in the task's own zone
        and, when this one differs, in this one too. `taken`: whether another task has a
        name, so a clash is said under Name while typing instead of after saving (the store
        still refuses one that appears meanwhile)."""
        super().__init__()
        self.taken = taken
        self.now = now
        self.task_row = task
        self.zone_for_preview = zone_for_preview
        self.spec: TaskSpec | None = None
        self.field_errors: dict[str, Text] = {}  # input id: what is wrong with it
        self.said = ""  # the verdict's kind last shown: hint, error or ok ("" before any)
        self.initial: dict[str, Any] | None = None  # the values it opened with

    def compose(self) -> ComposeResult:
        task = self.task_row
        start = spec_values(task.spec) if task is not None else {}
        title = f"Edit task {task.name}" if task is not None else "Add a task"
        save = "Save (ctrl+s)" if task is not None else "Add (ctrl+s)"

        def field(label: str, widget: Input | Select, *help_ids: str) -> Vertical:
            extra = [Static(id=i, classes="help") for i in help_ids]
            if isinstance(widget, Input):  # its own error line, right where the user types
                extra.insert(0, Static(id=f"{widget.id}-error", classes="field-error"))
            return Vertical(Label(label, classes="label"), widget, *extra, classes="field")

        def box(key: str, placeholder: str) -> Input:
            return Input(start.get(key, ""), placeholder=placeholder, id=key)

        with VerticalScroll(id="add-box", classes="dialog"):
            yield Label(title, classes="dialog-title")
            yield field("Name", box("name", "e.g. backup"))
            with Horizontal(classes="row"):
                kind = ChoiceField(
                    SCHEDULE_KINDS, value=start.get("kind", "every"), allow_blank=False, id="kind"
                )
                yield field("Schedule kind", kind)
                yield field(
                    "Schedule",
                    box("expr", "30s | 0 9 * * MON | 2027-01-01T00:00Z"),
                    "schedule-help",
                )
            with Horizontal(classes="row"):
                misfire = start.get("misfire", "run_once")
                yield field(
                    "Misfire",
                    ChoiceField(MISFIRE, value=misfire, allow_blank=False, id="misfire"),
                    "misfire-help",
                )
                concurrency = start.get("concurrency", "forbid")
                yield field(
                    "Concurrency",
                    ChoiceField(
                        CONCURRENCY, value=concurrency, allow_blank=False, id="concurrency"
                    ),
                    "concurrency-help",
                )
            with Horizontal(classes="row"):
                yield field("Time zone", box("tz", "UTC"))
                yield field("Timeout", box("timeout", "none, e.g. 5m"))
                yield field("Jitter", box("jitter", "none, e.g. 10s"))
            failing = bool(start.get("retries") or start.get("pause_after"))
            with (
                Collapsible(
                    title="When runs fail: retries, pause", collapsed=not failing, id="failing"
                ),
                Horizontal(classes="row"),
            ):
                yield field("Retries", box("retries", "0, up to 100"))
                yield field("First retry after", box("retry_delay", "10s (doubles)"))
                yield field("Pause after", box("pause_after", "never, e.g. 3 failures"))
            yield field("Command", box("command", "e.g. sh -c 'echo hi'"))
            yield Static(id="verdict")
            with Horizontal(classes="buttons", id="buttons"):
                yield Button(save, variant="primary", id="add", disabled=True)
                yield Button("Cancel (esc)", id="cancel")
        yield Footer()

    def on_mount(self) -> None:
        if self.app.is_headless:  # snapshots: a blinking cursor is not deterministic
            for widget in self.query(Input):
                widget.cursor_blink = False
        self.query_one("#name", Input).focus()
        self.initial = self.values()
        self.check()

    @property
    def edited(self) -> bool:
        """Something was typed or chosen since it opened: leaving loses it, so it asks."""
        return self.initial is not None and self.values() != self.initial

    def values(self) -> dict[str, Any]:
        fields: dict[str, Any] = {w.id: w.value for w in self.query(Input) if w.id}
        for select in self.query(Select):
            fields[select.id or ""] = str(select.value)
        if self.task_row is not None:  # what the form does not show stays as it was
            spec = self.task_row.spec
            fields.update(anchor=spec.anchor and iso(spec.anchor), cwd=spec.cwd)
            fields.update(env=spec.env or None, disabled=not spec.enabled or None)
            kept = spec_fields(spec)
            for key in ("retry_max_delay", "retry_on"):
                fields[key] = kept.get(key)
        return fields

    @on(Input.Changed)
    @on(Select.Changed)
    def check(self) -> None:
        values = self.values()
        self.query_one("#misfire-help", Static).update(MISFIRE_HELP[values["misfire"]])
        self.query_one("#concurrency-help", Static).update(CONCURRENCY_HELP[values["concurrency"]])
        self.query_one("#schedule-help", Static).update(schedule_help(values))
        spec, verdict = self.verdict(values, self.now())
        self.spec = spec
        widget = self.query_one("#verdict", Static)
        widget.update(verdict)
        said = "ok" if spec else "error" if verdict.plain.startswith("✗") else "hint"
        widget.set_class(said == "error", "-error")
        for line in self.query(".field-error").results(Static):
            error = self.field_errors.get((line.id or "").removesuffix("-error"))
            shown = said == "error" and error is not None
            line.update(error if shown and error is not None else "")
            line.display = shown
        self.query_one("#add", Button).disabled = spec is None
        if said == "ok" and self.said not in ("ok", ""):  # not on opening: edit starts at the top
            # Whole and valid: on a short terminal bring the verdict and the buttons into
            # view. Errors show under their own field instead, so a half-typed value
            # ("5" on the way to "5m") never scrolls the field being typed in away.
            self.call_after_refresh(self.reveal_verdict)  # once laid out at its new height
        self.said = said

    def reveal_verdict(self) -> None:
        """The verdict and the buttons are the form's last lines: show its end."""
        self.query_one("#add-box", VerticalScroll).scroll_end(animate=False)

    def verdict(self, values: dict[str, Any], now: int) -> tuple[TaskSpec | None, Text]:
        """The spec (None until it is whole and valid) and what to say about it. An empty
        required field is "still to fill in", never an error: nothing is red before the
        user has typed something wrong."""
        missing = [label for key, label in REQUIRED if not values[key].strip()]
        filled = dict(values)
        if not values["name"].strip():
            filled["name"] = "x"
        if not values["expr"].strip():
            filled["kind"], filled["expr"] = "every", "1h"
        if not values["command"].strip():
            filled["command"] = "true"
        errors: dict[str, tuple[str, str]] = {}  # input id: (under the field, in the verdict)
        if values["name"].strip():  # a bad name is said even while another field is bad
            try:
                check_name(values["name"].strip())
            except BadInput as exc:
                errors["name"] = (exc.message, str(exc))
                filled["name"] = "x"
        spec = None
        try:
            spec = form_spec(filled, now)
        except BadInput as exc:
            errors.setdefault(input_of(exc.field), (exc.message, str(exc)))
        own = self.task_row.name if self.task_row is not None else None
        clash = (
            spec is not None
            and "name" not in errors
            and bool(values["name"].strip())
            and spec.name != own
            and self.taken is not None
            and self.taken(spec.name)
        )
        if clash:
            message = f"a task named {spec.name!r} exists already"
            errors["name"] = (message, f"name: {message}")
        self.field_errors = {
            field: Text(f"✗ {safe_text(under)}", "bold red") for field, (under, _) in errors.items()
        }
        if errors or spec is None:
            first = next(iter(errors.values()))[1] if errors else "not valid"
            return None, Text(f"✗ {safe_text(first)}", "bold red")
        if missing:
            hint = Text(f"To fill in: {', '.join(missing)}.", "italic")
            if "schedule" not in missing:
                hint.append_text(self.times(spec, now))
            return None, hint
        return spec, Text("✓ ", "bold green").append_text(self.times(spec, now))

    def times(self, spec: TaskSpec, now: int) -> Text:
        """The next 5 fire times with weekday and date in the task's zone, each also in the
        dashboard's zone when that one reads differently."""
        anchor = self.task_row.anchor if self.task_row is not None else default_anchor(spec, now)
        found = preview(spec.schedule(anchor), now, 5)
        zone, other = ZoneInfo(spec.tz), self.zone_for_preview
        if other is not None and all(_offset(t, other) == _offset(t, zone) for t in found):
            other = None
        text = Text(f"\nNext 5 fire times ({spec.tz})", "bold")
        if other is not None:
            text.append(f" · also in {_zone_label(other, now)}", "bold")
        text.append(":\n", "bold")
        lines = fire_times(found, zone)
        if other is not None:
            seconds = any(t % (60 * MICROS) for t in found)
            lines = [
                f"{line}  ({fire_time(t, other, seconds)})"
                for line, t in zip(lines, found, strict=True)
            ]
        text.append("\n".join(lines) or "none")
        return text

    def action_submit(self) -> None:
        if self.spec is not None:
            self.dismiss(self.spec)

    @on(Input.Submitted)
    def entered(self, event: Input.Submitted) -> None:
        """Enter saves a valid form; on one not yet valid it moves to the next field."""
        event.stop()
        if self.spec is not None:
            self.action_submit()
        else:
            self.focus_next()

    @on(Collapsible.Toggled)
    def toggled(self, event: Collapsible.Toggled) -> None:
        """Enter on "When runs fail" opens it and moves into it (or closes it and moves
        past it), as enter moves on from every other field."""
        event.stop()
        self.call_after_refresh(self.focus_next)

    @on(Button.Pressed, "#add")
    def add(self) -> None:
        self.action_submit()

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        """Closed at once when nothing was typed; otherwise after a yes, as what was typed
        is lost."""
        if not self.edited:
            self.dismiss(None)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.dismiss(None)

        self.app.push_screen(
            ConfirmScreen(
                "Discard this form? What you typed is lost.", "Discard (y)", "Keep editing (n)"
            ),
            answered,
        )


def input_of(field: str) -> str | None:
    """The form's input a BadInput's field is about (None: one the form does not show)."""
    if field.startswith("command"):
        return "command"
    if field in ("cron", "every", "at", "schedule"):
        return "expr"
    return field if field in ("name", "tz", "timeout", "jitter") else None


def schedule_help(values: dict[str, Any]) -> Text:
    """The line under the schedule: cron in words, or what the field takes."""
    kind, expr = values["kind"], values["expr"].strip()
    if kind == "cron":
        if not expr:
            return Text("Five fields (minute hour day month weekday) or @daily, in the zone.")
        return Text(describe_cron(expr) or "")
    if kind == "every" and looks_like_cron(expr):
        return Text("This looks like cron: choose cron as the schedule kind.", "yellow")
    return Text(KIND_HELP[kind])
