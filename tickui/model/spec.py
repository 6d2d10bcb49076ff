"""A task's definition as a user gives it, validated field by field."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field, fields
from functools import lru_cache

from tickui.common import checks
from tickui.common.errors import BadInput
from tickui.common.timeutil import format_duration, iso, parse_duration, parse_instant
from tickui.model import retries as rules

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    # Imported where a schedule is made or read: the command line's parser takes this
    # module's names and policies without loading the schedules.
    from typing import Any

    from tickui.schedules import triggers as schedules

NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}", re.ASCII)  # always fullmatch
MISFIRE_POLICIES = ("run_once", "skip", "run_all")
OVERLAP_POLICIES = ("forbid", "allow", "replace", "buffer_one")
MAX_JITTER = 86400 * 1_000_000
MAX_TIMEOUT = 366 * 86400 * 1_000_000
MAX_ARGS = 4096
MAX_ARG = 128 * 1024


@dataclass(slots=True)
class TaskSpec:
    """What a task is, independent of its run-time state (enabled, next run, history)."""

    name: str
    kind: str  # cron | interval | once
    expr: str  # the cron text, the interval in microseconds, or the instant in microseconds
    command: list[str]
    tz: str = "UTC"
    misfire: str = "run_once"
    concurrency: str = "forbid"
    timeout: int | None = None
    jitter: int = 0
    anchor: int | None = None
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    enabled: bool = True
    retries: int = 0
    retry_delay: int = rules.DEFAULT_DELAY
    retry_max_delay: int = rules.DEFAULT_MAX_DELAY
    retry_on: tuple[str, ...] = rules.DEFAULT_ON
    pause_after: int | None = None

    def schedule(self, anchor: int) -> schedules.Schedule:
        schedules = _triggers()  # once per due task a scan: an import statement costs 1 µs
        if self.kind == "cron":
            return schedules.CronSchedule(self.expr, self.tz)
        if self.kind == "interval":
            return schedules.IntervalSchedule(int(self.expr), self.anchor or anchor)
        return schedules.OnceSchedule(int(self.expr))

    def schedule_text(self) -> str:
        if self.kind == "cron":  # only a cron's text needs the cron parser
            from tickui.schedules import triggers as schedules

            return schedules.CronSchedule(self.expr, self.tz).text
        if self.kind == "interval":
            return f"every {format_duration(int(self.expr))}"
        return f"at {iso(int(self.expr))}"

    def _data(self) -> dict[str, Any]:
        """The fields by name, as `dataclasses.asdict` gives them but without its deep
        copy (which took most of a 10,000-task sync): the values are only encoded."""
        return {name: getattr(self, name) for name in _FIELDS}

    def definition_hash(self) -> str:
        """Changes exactly when the definition does; the enabled flag is run-time state."""
        data = self._data()
        data.pop("enabled")
        for key, default in _LATER_DEFAULTS.items():  # a definition from before them
            if data[key] == default:  # hashes as it did then
                data.pop(key)
        import hashlib  # loads OpenSSL: a listing never hashes a definition

        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def to_json(self) -> str:
        return json.dumps(self._data(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TaskSpec:
        data = json.loads(text)
        if "retry_on" in data:
            data["retry_on"] = tuple(data["retry_on"])
        return cls(**data)

    @property
    def retry_policy(self) -> rules.Policy:
        return rules.Policy(
            self.retries, self.retry_delay, self.retry_max_delay, self.retry_on, self.pause_after
        )


_FIELDS = tuple(item.name for item in fields(TaskSpec))

# Fields added after definitions were first stored, with their defaults.
_LATER_DEFAULTS: dict[str, Any] = {
    "retries": 0,
    "retry_delay": rules.DEFAULT_DELAY,
    "retry_max_delay": rules.DEFAULT_MAX_DELAY,
    "retry_on": rules.DEFAULT_ON,
    "pause_after": None,
}


@lru_cache(maxsize=1)
def _triggers() -> Any:
    """The schedules' module, loaded when first needed (--help starts without it)."""
    from tickui.schedules import triggers

    return triggers


def check_name(name: str, field: str = "name") -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        shown = checks.shown(name)
        raise BadInput(field, f"{shown} is not a valid task name ([a-z0-9][a-z0-9._-]{{0,63}})")
    return name


def _given(raw: dict[str, Any], key: str, default: str) -> Any:
    """The value given for `key`, the default only when none was given ('' is given)."""
    value = raw.get(key)
    return default if value is None else value


def _choice(value: Any, options: tuple[str, ...], field: str) -> str:
    if not isinstance(value, str) or value not in options:
        raise BadInput(field, f"{checks.shown(value)} is not one of {', '.join(options)}")
    return value


def _duration(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, str):
        raise BadInput(field, f"{value!r} is not a duration text such as '30s'")
    return parse_duration(value, field)


@lru_cache(maxsize=4096)
def _checked_cron(text: str, tz: str, now: int) -> str:
    """The stored text of a valid cron expression in `tz` (BadInput if it is not): the
    same for the same arguments, so a file's many tasks sharing an expression check it
    once."""
    from tickui.schedules import triggers as schedules

    return schedules.cron(text, tz, now=now).expr


@lru_cache(maxsize=4096)
def _shortest_gap(kind: str, expr: str, tz: str, now: int) -> int:
    """The smallest spacing between fire times (sampled for cron), which jitter must stay
    under so that jittered runs keep their order."""
    from tickui.schedules import triggers as schedules

    if kind == "interval":
        return int(expr)
    if kind == "once":
        return MAX_JITTER + 1
    times = schedules.preview(schedules.CronSchedule(expr, tz), now, 50)
    return min((b - a for a, b in itertools.pairwise(times)), default=MAX_JITTER + 1)


def build_spec(raw: dict[str, Any], now: int, allow_past: bool = False) -> TaskSpec:
    """Validate user-given fields (CLI flags or a [[task]] table) into a TaskSpec.

    Keys: name, cron | every | at, tz, misfire, concurrency, timeout, jitter,
    anchor, command (list of strings), cwd, env, disabled. `allow_past` accepts a
    one-time instant that has passed (a declared task that already ran is simply done).
    """
    from tickui.schedules import triggers as schedules

    for key in raw:
        if key not in _KNOWN:
            raise BadInput(key, "unknown field")
    name = check_name(raw.get("name"))
    given = [key for key in ("cron", "every", "at") if raw.get(key) is not None]
    if len(given) != 1:
        raise BadInput("schedule", "give exactly one of cron, every or at")
    kind_key = given[0]
    tz = raw.get("tz")
    tz = "UTC" if tz is None else tz
    if not isinstance(tz, str) or not tz.strip() or not tz.isascii() or "\x00" in tz:
        raise BadInput("tz", f"{checks.shown(tz)} is not a time zone name")
    schedules.check_zone(tz)
    anchor = None
    if raw.get("anchor") is not None:
        anchor = parse_instant(str(raw["anchor"]), "anchor")
    if kind_key == "cron":
        if not isinstance(raw["cron"], str):
            raise BadInput("cron", f"{raw['cron']!r} is not a cron text")
        checks.text(raw["cron"], "cron", limit=1000)
        kind, expr = "cron", _checked_cron(raw["cron"], tz, now)
    elif kind_key == "every":
        every = _duration(raw["every"], "every")
        schedules.interval(every, anchor or now)
        kind, expr = "interval", str(every)
    else:
        at = parse_instant(str(raw["at"]), "at")
        if not allow_past:
            schedules.once(at, now)
        kind, expr = "once", str(at)
    command = raw.get("command")
    if (
        not isinstance(command, list)
        or not command
        or not all(isinstance(part, str) for part in command)
        or not command[0]
    ):
        raise BadInput("command", "give the command as a non-empty list of strings (after --)")
    if len(command) > MAX_ARGS:
        raise BadInput("command", f"has more than {MAX_ARGS} arguments")
    for index, part in enumerate(command):
        checks.text(part, f"command[{index}]", limit=MAX_ARG)
    timeout = None
    if raw.get("timeout") is not None:
        timeout = _duration(raw["timeout"], "timeout")
        if timeout <= 0:
            raise BadInput("timeout", "must be above zero")
        if timeout > MAX_TIMEOUT:
            raise BadInput("timeout", "is over 366d")
    jitter = 0
    if raw.get("jitter") is not None:
        jitter = _duration(raw["jitter"], "jitter")
        if jitter > MAX_JITTER:
            raise BadInput("jitter", "is over 1d")
    if jitter and jitter >= _shortest_gap(kind, expr, tz, now):
        raise BadInput("jitter", "must be shorter than the time between two runs")
    env = raw.get("env")
    env = {} if env is None else env
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise BadInput("env", "must map names to strings")
    for key, value in env.items():
        checks.env_name(key, "env")
        checks.text(value, f"env.{key}", limit=MAX_ARG)
    cwd = raw.get("cwd")
    if cwd is not None:
        checks.directory(cwd, "cwd")
    disabled = raw.get("disabled", False)
    if not isinstance(disabled, bool):
        raise BadInput("disabled", f"{disabled!r} is not true or false")
    retry = retry_fields(raw)
    return TaskSpec(
        name=name,
        kind=kind,
        expr=expr,
        command=list(command),
        tz=tz,
        misfire=_choice(_given(raw, "misfire", "run_once"), MISFIRE_POLICIES, "misfire"),
        concurrency=_choice(_given(raw, "concurrency", "forbid"), OVERLAP_POLICIES, "concurrency"),
        timeout=timeout,
        jitter=jitter,
        anchor=anchor,
        cwd=cwd,
        env=dict(env),
        enabled=not disabled,
        **retry,
    )


RETRY_KEYS = ("retries", "retry_delay", "retry_max_delay", "retry_on", "pause_after")
_KNOWN = frozenset(
    (
        "name",
        "cron",
        "every",
        "at",
        "tz",
        "misfire",
        "concurrency",
        "timeout",
        "jitter",
        "anchor",
        "command",
        "cwd",
        "env",
        "disabled",
        *RETRY_KEYS,
    )
)


def retry_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """retries (0..100), retry_delay (100ms..7d, default 10s), retry_max_delay (100ms..7d,
    default 1h or retry_delay when that is longer; never below retry_delay), retry_on (a
    comma text or a list of exit, timeout, interrupted, dispatch) and pause_after
    (1..1000), each checked with its bounds."""
    out: dict[str, Any] = {}
    if raw.get("retries") is not None:
        out["retries"] = checks.number(raw["retries"], "retries", 0, rules.MAX_RETRIES, True)
    low, high = rules.MIN_DELAY, rules.MAX_DELAY
    first = rules.DEFAULT_DELAY
    if raw.get("retry_delay") is not None:
        first = out["retry_delay"] = checks.duration(raw["retry_delay"], "retry_delay", low, high)
    if raw.get("retry_max_delay") is not None:
        cap = checks.duration(raw["retry_max_delay"], "retry_max_delay", low, high)
        if cap < first:
            raise BadInput("retry_max_delay", "must not be shorter than retry_delay")
        out["retry_max_delay"] = cap
    elif first > rules.DEFAULT_MAX_DELAY:
        out["retry_max_delay"] = first
    if raw.get("retry_on") is not None:
        out["retry_on"] = _retry_on(raw["retry_on"])
    if raw.get("pause_after") is not None:
        out["pause_after"] = checks.number(
            raw["pause_after"], "pause_after", 1, rules.MAX_PAUSE_AFTER, True
        )
    return out


def _retry_on(value: Any) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise BadInput("retry_on", f"{checks.shown(value)} is not a list of failure kinds")
    chosen = []
    for item in items:
        word = item.strip(" ") if isinstance(item, str) else item
        if word not in rules.REASONS:
            raise BadInput(
                "retry_on", f"{checks.shown(item)} is not one of {', '.join(rules.REASONS)}"
            )
        if word not in chosen:
            chosen.append(word)
    return tuple(w for w in rules.REASONS if w in chosen)
