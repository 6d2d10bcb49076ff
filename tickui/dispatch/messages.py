"""What the engine and its workers say to each other on Kafka: four topics, one JSON object
per message. Pure: building and checking messages, no I/O.

- `tickui.runs.v1` (key: task name): a `RunCommand` per occurrence to run.
- `tickui.events.v1` (key: command id): `RunEvent`s, a transition then one outcome.
- `tickui.workers.v1` (key: worker id): a `Heartbeat` every 2 s from each worker.
- `tickui.control.v1` (key: worker id, or command id when no worker has it): `Control`
  (a cancel, a request to send a run's outcome again, or, key `due`, the instant the next
  run is due: workers poll slowly at rest and fast around it).

Every parse refuses a malformed message with `BadMessage` (one line, redacted); whoever
consumes logs it and skips the message, it is never fatal. Times are ISO 8601 UTC strings
on the wire and microseconds inside tickui.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tickui.common.redact import redact
from tickui.common.timeutil import iso, parse_instant
from tickui.model.occurrence import (
    RUN_CANCELED,
    RUN_CANCELLED,
    RUN_COMPLETED,
    RUN_FAILED,
    RUN_INTERRUPTED,
    RUN_TRANSITION,
)

RUNS_TOPIC = "tickui.runs.v1"
EVENTS_TOPIC = "tickui.events.v1"
WORKERS_TOPIC = "tickui.workers.v1"
CONTROL_TOPIC = "tickui.control.v1"
TOPICS = (RUNS_TOPIC, EVENTS_TOPIC, WORKERS_TOPIC, CONTROL_TOPIC)
DEFAULT_GROUP = "tickui-workers"
DEFAULT_PARTITIONS = 12  # of the runs topic: up to 12 workers share the work
HEARTBEAT_EVERY_S = 2.0
WORKER_TIMEOUT_S = 10.0  # silent for longer than this: lost
MAX_MESSAGE_BYTES = 1024 * 1024
TAIL_MAX_BYTES = 4096  # of a run's output carried in its outcome event
VERSION = 1

OUTCOMES = (RUN_COMPLETED, RUN_FAILED, RUN_CANCELED, RUN_CANCELLED, RUN_INTERRUPTED)
EVENT_TYPES = (RUN_TRANSITION, *OUTCOMES)
WORKER_STATES = ("alive", "draining", "drained")
CONTROL_TYPES = ("cancel", "resend", "due")
DUE_KEY = b"due"  # the key of a `due` control

# Error codes only distributed runs have.
WORKER_LOST = "WORKER_LOST"  # its worker went silent while it ran
DISPATCH_TIMEOUT = "DISPATCH_TIMEOUT"  # no worker started it before its deadline
DEADLINE = "DEADLINE"  # a worker got it after its deadline and did not start it


class BadMessage(ValueError):
    """A message that is not what its topic carries; the text is one redacted line."""


def new_event_id() -> str:
    return uuid.uuid4().hex


def _when(value: int | None) -> str | None:
    return iso(value)


def encode(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), sort_keys=True).encode()


def _decode(raw: bytes | None, what: str) -> dict[str, Any]:
    if raw is None:
        raise BadMessage(f"{what}: empty message")
    if len(raw) > MAX_MESSAGE_BYTES:
        raise BadMessage(f"{what}: {len(raw)} bytes, over {MAX_MESSAGE_BYTES}")
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadMessage(redact(f"{what}: not JSON ({exc})")[:300]) from None
    except RecursionError:
        raise BadMessage(f"{what}: JSON nested too deeply") from None
    if not isinstance(value, dict):
        raise BadMessage(f"{what}: not a JSON object")
    return value


def _str(data: Mapping[str, Any], key: str, what: str, optional: bool = False) -> str | None:
    value = data.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or len(value) > 4096:
        raise BadMessage(f"{what}: {key!r} must be a non-empty string")
    return value


def _int(data: Mapping[str, Any], key: str, what: str, optional: bool = False) -> int | None:
    value = data.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadMessage(f"{what}: {key!r} must be an integer")
    return value


def _instant(data: Mapping[str, Any], key: str, what: str, optional: bool = False) -> int | None:
    text = _str(data, key, what, optional)
    if text is None:
        return None
    try:
        return parse_instant(text, key)
    except Exception:
        raise BadMessage(f"{what}: {key!r} is not an ISO 8601 instant") from None


# ---- runs: engine -> workers -------------------------------------------------------------


@dataclass(frozen=True)
class RunCommand:
    """Run `argv` once, if it can start before `deadline` (micros, UTC)."""

    command_id: str
    occurrence_id: int
    task: str
    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: str | None
    timeout_s: float | None
    scheduled_for: int
    attempt: int
    deadline: int
    owner: str  # the engine that claimed it
    lease_token: int
    kind: str = "scheduled"
    # the engine's worker_timeout: a worker fences its runs before it runs out
    worker_timeout_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "command_id": self.command_id,
            "occurrence_id": self.occurrence_id,
            "task": self.task,
            "kind": self.kind,
            "argv": list(self.argv),
            "env": dict(self.env),
            "cwd": self.cwd,
            "timeout_s": self.timeout_s,
            "scheduled_for": _when(self.scheduled_for),
            "attempt": self.attempt,
            "deadline": _when(self.deadline),
            "engine": {
                "owner": self.owner,
                "lease_token": self.lease_token,
                **({"worker_timeout_s": self.worker_timeout_s} if self.worker_timeout_s else {}),
            },
        }

    def encode(self) -> bytes:
        return encode(self.to_json())

    @classmethod
    def decode(cls, raw: bytes | None) -> RunCommand:
        what = "run command"
        data = _decode(raw, what)
        argv = data.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise BadMessage(f"{what}: 'argv' must be a non-empty list of strings")
        env = data.get("env") or {}
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise BadMessage(f"{what}: 'env' must map strings to strings")
        timeout = data.get("timeout_s")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise BadMessage(f"{what}: 'timeout_s' must be a positive number or null")
        engine = data.get("engine")
        if not isinstance(engine, dict):
            raise BadMessage(f"{what}: 'engine' must be an object")
        cwd = data.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise BadMessage(f"{what}: 'cwd' must be a string or null")
        silent = engine.get("worker_timeout_s")
        if silent is not None and (
            isinstance(silent, bool) or not isinstance(silent, int | float) or silent <= 0
        ):
            raise BadMessage(f"{what}: 'worker_timeout_s' must be a positive number")
        return cls(
            command_id=_str(data, "command_id", what) or "",
            occurrence_id=_int(data, "occurrence_id", what) or 0,
            task=_str(data, "task", what) or "",
            argv=tuple(argv),
            env=env,
            cwd=cwd or None,
            timeout_s=float(timeout) if timeout is not None else None,
            scheduled_for=_instant(data, "scheduled_for", what) or 0,
            attempt=_int(data, "attempt", what) or 1,
            deadline=_instant(data, "deadline", what) or 0,
            owner=_str(engine, "owner", what) or "",
            lease_token=_int(engine, "lease_token", what) or 0,
            kind=_str(data, "kind", what, optional=True) or "scheduled",
            worker_timeout_s=float(silent) if silent is not None else None,
        )


# ---- events: workers -> engine -----------------------------------------------------------


@dataclass(frozen=True)
class RunEvent:
    """One fact about a run, as the worker saw it. `payload` is what the event log keeps:
    a transition has `state` ("running"), `worker`, `host`, `pid`, `log_path`; an outcome
    has `exit_code`, `error_code`, `detail` and `tail` (the redacted end of the output)."""

    event_id: str
    type: str
    command_id: str
    run_id: str | None
    worker: str
    at: int
    payload: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "event_id": self.event_id,
            "type": self.type,
            "command_id": self.command_id,
            "run_id": self.run_id,
            "worker": self.worker,
            "at": _when(self.at),
            "payload": self.payload,
        }

    def encode(self) -> bytes:
        return encode(self.to_json())

    @classmethod
    def decode(cls, raw: bytes | None) -> RunEvent:
        what = "run event"
        data = _decode(raw, what)
        kind = data.get("type")
        if kind not in EVENT_TYPES:
            raise BadMessage(f"{what}: unknown type {str(kind)[:60]!r}")
        payload = data.get("payload") or {}
        if not isinstance(payload, dict):
            raise BadMessage(f"{what}: 'payload' must be an object")
        return cls(
            event_id=_str(data, "event_id", what) or "",
            type=kind,
            command_id=_str(data, "command_id", what) or "",
            run_id=_str(data, "run_id", what, optional=True),
            worker=_str(data, "worker", what) or "",
            at=_instant(data, "at", what) or 0,
            payload=payload,
        )


# ---- heartbeats: workers -> engine -------------------------------------------------------


@dataclass(frozen=True)
class Heartbeat:
    worker: str
    host: str
    slots: int
    running: tuple[str, ...]  # command ids
    version: str
    at: int
    state: str = "alive"  # alive, draining (SIGTERM: no new commands), drained (gone)
    group: str = DEFAULT_GROUP
    log_dir: str | None = None
    refused: dict[str, int] = field(default_factory=dict)  # messages refused, by kind
    insecure: bool = False  # runs without a key: signs nothing, checks nothing
    # Which of the worker's heartbeats this is: its process's start (micros) and a count
    # from 1. Newer is a later start, or the same start and a higher count: an old one
    # sent again is older, whatever the clocks did meanwhile.
    boot: int = 0
    seq: int = 0
    # the next instant the engine said a run is due, that the worker waits for (micros; 0:
    # none): it polls fast from a little before it
    due: int = 0

    @property
    def order(self) -> tuple[int, int]:
        return (self.boot, self.seq) if self.seq else (self.at, 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "refused": dict(self.refused),
            "insecure": self.insecure,
            "boot": self.boot,
            "seq": self.seq,
            "worker": self.worker,
            "host": self.host,
            "slots": self.slots,
            "running": list(self.running),
            "version": self.version,
            "at": _when(self.at),
            "state": self.state,
            "group": self.group,
            "log_dir": self.log_dir,
            "due": _when(self.due) if self.due else None,
        }

    def encode(self) -> bytes:
        return encode(self.to_json())

    @classmethod
    def decode(cls, raw: bytes | None) -> Heartbeat:
        what = "heartbeat"
        data = _decode(raw, what)
        running = data.get("running") or []
        if not isinstance(running, list) or not all(isinstance(c, str) for c in running):
            raise BadMessage(f"{what}: 'running' must be a list of command ids")
        state = data.get("state") or "alive"
        if state not in WORKER_STATES:
            raise BadMessage(f"{what}: unknown state {str(state)[:40]!r}")
        refused = data.get("refused") or {}
        if not isinstance(refused, dict) or not all(
            isinstance(k, str) and len(k) <= 40 and isinstance(v, int) and not isinstance(v, bool)
            for k, v in refused.items()
        ) or len(refused) > 32:  # fmt: skip
            raise BadMessage(f"{what}: 'refused' must map kinds to counts")
        return cls(
            worker=_str(data, "worker", what) or "",
            host=_str(data, "host", what) or "",
            slots=_int(data, "slots", what) or 0,
            running=tuple(running),
            version=_str(data, "version", what, optional=True) or "?",
            at=_instant(data, "at", what) or 0,
            state=state,
            group=_str(data, "group", what, optional=True) or DEFAULT_GROUP,
            log_dir=_str(data, "log_dir", what, optional=True),
            refused=refused,
            insecure=data.get("insecure") is True,
            boot=_int(data, "boot", what, optional=True) or 0,
            seq=_int(data, "seq", what, optional=True) or 0,
            due=_instant(data, "due", what, optional=True) or 0,
        )


# ---- control: engine -> workers ----------------------------------------------------------


@dataclass(frozen=True)
class Control:
    """`cancel`: stop the command (and never start it if it has not started). `resend`:
    publish the command's outcome event again (the engine lost it with a broker restart);
    a worker that does not know the command answers `run.interrupted`. `due`: a run is due
    at `due` (micros, UTC), for every worker (no command id): the worker holding one of the
    runs topic's `partitions` its commands go to (any worker, when none is named) polls
    fast around it."""

    type: str
    command_id: str
    worker: str | None  # the worker running it; None: whichever has it
    reason: str = ""
    at: int = 0
    due: int = 0  # of a `due` control
    partitions: tuple[int, ...] = ()  # of a `due` control: () for every partition

    @classmethod
    def next_due(cls, due: int, at: int, partitions: tuple[int, ...] = ()) -> Control:
        return cls("due", "", None, "", at, due, partitions)

    def to_json(self) -> dict[str, Any]:
        said = {
            "v": VERSION,
            "type": self.type,
            "command_id": self.command_id or None,
            "worker": self.worker,
            "reason": self.reason,
            "at": _when(self.at),
        }
        if self.type == "due":
            said["due"] = _when(self.due)
            if self.partitions:
                said["partitions"] = list(self.partitions)
        return said

    def encode(self) -> bytes:
        return encode(self.to_json())

    @classmethod
    def decode(cls, raw: bytes | None) -> Control:
        what = "control message"
        data = _decode(raw, what)
        kind = data.get("type")
        if kind not in CONTROL_TYPES:
            raise BadMessage(f"{what}: unknown type {str(kind)[:40]!r}")
        reason = data.get("reason") or ""
        due = kind == "due"
        return cls(
            type=kind,
            command_id=_str(data, "command_id", what, optional=due) or "",
            worker=_str(data, "worker", what, optional=True),
            reason=str(reason)[:200],
            at=_instant(data, "at", what, optional=True) or 0,
            due=(_instant(data, "due", what) or 0) if due else 0,
            partitions=_partitions(data, what) if due else (),
        )


MAX_DUE_PARTITIONS = 1024


def _partitions(data: Mapping[str, Any], what: str) -> tuple[int, ...]:
    """A due control's partitions: absent for every one (as older engines say it)."""
    value = data.get("partitions")
    if value is None:
        return ()
    if (
        not isinstance(value, list)
        or len(value) > MAX_DUE_PARTITIONS
        or not all(type(p) is int and 0 <= p < 1_000_000 for p in value)
    ):
        raise BadMessage(f"{what}: 'partitions' must be a list of partition numbers")
    return tuple(value)
