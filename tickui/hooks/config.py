"""`[[hook]]` entries of `tickui.toml`: what to tell, about which tasks, to whom.

Each entry is checked whole here (one line naming the field on any problem); a hook that
passes can be delivered without another check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tickui.common import checks, options
from tickui.common.errors import BadInput
from tickui.common.timeutil import MICROS

EVENTS = (
    "failed", "recovered", "paused", "missed", "breaker_open", "breaker_closed", "refused",
    "audit",
)  # fmt: skip
TASK_EVENTS = frozenset({"failed", "recovered", "paused", "missed", "audit"})
FORMATS = options.option("hook", "format").choices
KEYS = ("name", "on", "tasks", "url", "command", "format", "timeout")
_TIMEOUT = options.option("hook", "timeout")
DEFAULT_TIMEOUT = options.default("hook", "timeout")
MIN_TIMEOUT = options.micros(_TIMEOUT.low)
MAX_TIMEOUT = options.micros(_TIMEOUT.high)
MAX_PATTERNS = 100
MAX_ARGS = 256
HOOK_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}", re.ASCII)


@dataclass(frozen=True)
class HookConfig:
    """One `[[hook]]`: exactly one of `url` and `command` is set."""

    name: str
    on: frozenset[str]
    tasks: tuple[str, ...] = ()  # names or fnmatch globs; empty: every task
    url: str | None = None
    command: tuple[str, ...] | None = None
    format: str = "json"
    timeout: int = DEFAULT_TIMEOUT  # microseconds, per attempt

    @property
    def timeout_s(self) -> float:
        return self.timeout / MICROS

    @property
    def target(self) -> str:
        """What the hook reaches, as shown to people: a URL's scheme and host only (a
        webhook's path is often its secret), or a command's program."""
        if self.url is not None:
            parts = urlsplit(self.url)
            return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}"
        assert self.command is not None
        return self.command[0]


def parse_hook(raw: Any, index: int) -> HookConfig:
    """One `[[hook]]` table, checked; BadInput names the field."""
    if not isinstance(raw, dict):
        raise BadInput("", "hook entries must be [[hook]] tables")
    for key in raw:
        if key not in KEYS:
            raise BadInput(str(key), f"unknown field (known: {', '.join(KEYS)})")
    name = raw.get("name", f"hook-{index + 1}")
    if not isinstance(name, str) or not HOOK_NAME.fullmatch(name):
        raise BadInput("name", f"{checks.shown(name)} is not a valid name ([a-z0-9][a-z0-9._-]*)")
    on = _events(raw.get("on"))
    tasks = _patterns(raw.get("tasks", []))
    has_url, has_command = "url" in raw, "command" in raw
    if has_url == has_command:
        which = "both" if has_url else "neither"
        raise BadInput("url", f"give exactly one of url and command ({which} given)")
    url = _url(raw["url"]) if has_url else None
    command = _command(raw["command"]) if has_command else None
    fmt = raw.get("format", options.option("hook", "format").default)
    if fmt not in FORMATS:
        raise BadInput("format", f"{checks.shown(fmt)} is not one of {', '.join(FORMATS)}")
    if fmt != "json" and command is not None:
        raise BadInput("format", "applies to url hooks only (a command gets the event JSON)")
    timeout = checks.duration(
        raw.get("timeout", _TIMEOUT.default), "timeout", MIN_TIMEOUT, MAX_TIMEOUT
    )
    return HookConfig(name, on, tasks, url, command, fmt, timeout)


def _events(value: Any) -> frozenset[str]:
    if value is None:
        raise BadInput("on", f"missing: a list of events ({', '.join(EVENTS)})")
    if not isinstance(value, list) or not value:
        raise BadInput("on", f"{checks.shown(value)} is not a non-empty list of events")
    for item in value:
        if item not in EVENTS:
            raise BadInput("on", f"{checks.shown(item)} is not one of {', '.join(EVENTS)}")
    return frozenset(value)


def _patterns(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > MAX_PATTERNS:
        raise BadInput("tasks", f"must be a list of task names or globs (at most {MAX_PATTERNS})")
    for item in value:
        checks.text(item, "tasks", limit=200, empty=False)
        if any(c.isspace() for c in item):
            raise BadInput("tasks", f"{checks.shown(item)} is not a task name or glob")
    return tuple(value)


def _url(value: Any) -> str:
    checks.text(value, "url", limit=4096, empty=False)
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value):
        raise BadInput("url", "must not contain spaces or control characters")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        raise BadInput("url", f"{checks.shown(value)} is not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise BadInput("url", f"{checks.shown(value)} is not an http:// or https:// URL")
    if not parts.hostname:
        raise BadInput("url", f"{checks.shown(value)} names no host")
    if port is not None and not 1 <= port <= 65535:
        raise BadInput("url", f"port {port} is out of range (1 to 65535)")
    return value


def _command(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or len(value) > MAX_ARGS:
        raise BadInput("command", "must be a non-empty list of arguments (argv)")
    for item in value:
        checks.text(item, "command", limit=4096)
    if not value[0]:
        raise BadInput("command", "the program (its first item) is empty")
    return tuple(value)
