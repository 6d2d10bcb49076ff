"""Tasks as `tickui.toml` `[[task]]` entries (`tickui task export`), and a TaskSpec as
the fields build_spec takes. Pure: no I/O.

The entries read back through the config loader give the same definitions: every field
is written exactly (durations in their shortest exact unit, instants in ISO with their
microseconds, strings escaped as TOML basic strings)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields
from typing import Any

from tickui.common.errors import BadInput
from tickui.common.timeutil import MICROS, format_duration, iso
from tickui.model.records import Task
from tickui.model.spec import TaskSpec

# Fields of the retry work (spec.py), written when the spec has them and they are set.
_RETRY_FIELDS = ("retries", "retry_delay", "retry_max_delay", "retry_on", "pause_after")
_RETRY_DURATIONS = ("retry_delay", "retry_max_delay")


def duration_text(micros: int) -> str:
    """Exact: whole milliseconds in their shortest unit, else seconds with six decimals."""
    if micros % 1000 == 0:
        return format_duration(micros)
    return f"{micros / MICROS:.6f}s"


def spec_fields(spec: TaskSpec) -> dict[str, Any]:
    """A TaskSpec as the fields build_spec takes, exactly; build_spec of them gives an
    equal TaskSpec (edit_task checks that, the export round-trip test too)."""
    key = {"cron": "cron", "interval": "every", "once": "at"}[spec.kind]
    expr: Any = spec.expr
    if spec.kind == "interval":
        expr = duration_text(int(spec.expr))
    elif spec.kind == "once":
        expr = iso(int(spec.expr))
    raw: dict[str, Any] = {
        "name": spec.name,
        key: expr,
        "tz": spec.tz,
        "misfire": spec.misfire,
        "concurrency": spec.concurrency,
        "command": list(spec.command),
        "env": dict(spec.env),
        "disabled": not spec.enabled,
    }
    if spec.timeout is not None:
        raw["timeout"] = duration_text(spec.timeout)
    if spec.jitter:
        raw["jitter"] = duration_text(spec.jitter)
    if spec.anchor is not None:
        raw["anchor"] = iso(spec.anchor)
    if spec.cwd is not None:
        raw["cwd"] = spec.cwd
    # The retry fields: written when not the default.
    defaults = {f.name: f.default for f in fields(spec)}
    for name in _RETRY_FIELDS:
        value = getattr(spec, name, None)
        if name not in defaults or value is None or value == defaults[name]:
            continue
        if name in _RETRY_DURATIONS:
            value = duration_text(value)
        elif isinstance(value, tuple | list):
            value = list(value)
        raw[name] = value
    return raw


def toml_string(text: str, field: str = "value") -> str:
    """A TOML basic string: quote, backslash and control characters escaped."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char == '"':
            out.append('\\"')
        elif char == "\\":
            out.append("\\\\")
        elif char == "\t":
            out.append("\\t")
        elif char == "\n":
            out.append("\\n")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        elif 0xD800 <= code <= 0xDFFF:
            raise BadInput(field, "holds bytes that are not UTF-8; TOML cannot write them")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _value(value: Any, field: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return toml_string(value, field)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(item, field) for item in value) + "]"
    if isinstance(value, dict):
        items = (f"{toml_string(k, field)} = {_value(v, field)}" for k, v in value.items())
        return "{ " + ", ".join(items) + " }" if value else "{}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


# The order fields are written in; anything else after them, sorted.
_ORDER = (
    "name",
    "cron",
    "every",
    "at",
    "tz",
    "anchor",
    "misfire",
    "concurrency",
    "timeout",
    "jitter",
    "retries",
    "retry_delay",
    "retry_max_delay",
    "retry_on",
    "pause_after",
    "cwd",
    "env",
    "disabled",
    "command",
)


def task_entry(task: Task) -> str:
    """One `[[task]]` table. `disabled` is the task's state now; a disable note (which
    the file has no field for) is kept as a comment above the entry."""
    raw = spec_fields(task.spec)
    raw["disabled"] = not task.enabled
    if not raw["env"]:
        del raw["env"]
    if not raw["disabled"]:
        del raw["disabled"]
    keys = [k for k in _ORDER if k in raw] + sorted(k for k in raw if k not in _ORDER)
    lines = []
    if not task.enabled and task.note:
        note = " ".join(task.note.split())
        lines.append(f"# disabled: {toml_string(note)[1:-1]}")
    lines.append("[[task]]")
    lines += [f"{key} = {_value(raw[key], f'{task.name}.{key}')}" for key in keys]
    return "\n".join(lines)


def export_text(tasks: Iterable[Task]) -> str:
    """Every task as `[[task]]` entries, blank lines between, ending in a newline."""
    entries = [task_entry(task) for task in tasks]
    return "\n\n".join(entries) + "\n" if entries else ""
