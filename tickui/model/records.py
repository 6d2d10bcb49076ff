"""Rows as the rest of tickui sees them, and their public JSON form."""

from __future__ import annotations

from dataclasses import dataclass, field

from tickui.common.timeutil import format_duration, iso
from tickui.model.spec import TaskSpec
from tickui.model.states import ACTIVE

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:  # a listing reads records without building their schedules
    from typing import Any

    from tickui.schedules.triggers import Schedule


@dataclass(slots=True)
class TaskStats:
    """What the history says of a task: its last run, how many runs it missed or skipped,
    and how its last `STATS_WINDOW` finished runs went (skips are not runs)."""

    last_state: str | None = None
    last_scheduled_for: int | None = None
    last_started_at: int | None = None
    last_finished_at: int | None = None
    missed: int = 0
    skipped: int = 0
    active: int = 0
    last_result: str | None = None  # the last finished run: succeeded, failed or cancelled
    success_rate: float | None = None  # 0..1 over the window; None before any finished run
    median_duration_us: int | None = None  # succeeded and failed runs that started
    finished: int = 0  # finished runs in the window
    retry_attempt: int | None = None  # a retry waits to start: its attempt number
    retry_at: int | None = None  # and when it is due


STATS_WINDOW = 100
FINISHED = ("succeeded", "failed", "cancelled")


@dataclass(slots=True)
class Task:
    """A task as stored: its definition (`spec`), where it came from, whether it is on,
    its next run and its recent runs' stats. (Each of these records has a docstring: one
    without has dataclasses work out its signature for it, on every start.)"""

    id: int
    name: str
    spec: TaskSpec
    source: str
    enabled: bool
    note: str | None
    generation: int
    created_at: int
    updated_at: int
    anchor: int
    next_run_at: int | None
    due_at: int | None
    stats: TaskStats = field(default_factory=TaskStats)
    overridden: bool = False  # a tickui.toml task edited by hand, until the file changes it

    @property
    def schedule(self) -> Schedule:
        return self.spec.schedule(self.anchor)

    def to_json(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "name": self.name,
            "schedule": spec.schedule_text(),
            "kind": spec.kind,
            "tz": spec.tz,
            "enabled": self.enabled,
            "note": self.note,
            "next_run_at": iso(self.next_run_at) if self.enabled else None,
            "due_at": iso(self.due_at) if self.enabled else None,
            "misfire": spec.misfire,
            "concurrency": spec.concurrency,
            "timeout": format_duration(spec.timeout) if spec.timeout else None,
            "jitter": format_duration(spec.jitter) if spec.jitter else None,
            "retries": spec.retries,
            "retry_delay": format_duration(spec.retry_delay),
            "retry_max_delay": format_duration(spec.retry_max_delay),
            "retry_on": list(spec.retry_on),
            "pause_after": spec.pause_after,
            "command": list(spec.command),
            "cwd": spec.cwd,
            "source": self.source,
            "overridden": self.overridden,
            "generation": self.generation,
            "created_at": iso(self.created_at),
            "last_state": self.stats.last_state,
            "last_scheduled_for": iso(self.stats.last_scheduled_for),
            "last_started_at": iso(self.stats.last_started_at),
            "missed": self.stats.missed,
            "skipped": self.stats.skipped,
        }


@dataclass(slots=True)
class Occurrence:
    """One slot of a task (or a retry, a backfill, a run-now): its state and times, who
    ran it and how it ended."""

    id: int
    task_id: int
    task: str
    kind: str
    scheduled_for: int
    state: str
    claimed_at: int
    covers: int = 1
    missed: int = 0
    accepted_at: int | None = None
    started_at: int | None = None
    finished_at: int | None = None
    exit_code: int | None = None
    error_code: str | None = None
    detail: str | None = None
    command_id: str | None = None
    run_id: str | None = None
    owner: str | None = None
    lease_token: int | None = None
    pid: int | None = None
    pgid: int | None = None
    pid_start: int | None = None
    event_cursor: int = 0
    generation: int = 0
    log_path: str | None = None
    attempt: int = 1  # 2, 3, ... for retries of the slot
    retry_of: int | None = None  # the first attempt's id, for a retry
    retry_at: int | None = None  # when a queued retry may start
    worker: str | None = None  # the worker (Kafka dispatch) that started it
    deadline: int | None = None  # handed to workers: none may start it after this

    @property
    def engine_host(self) -> str | None:
        """The host of the engine that claimed it (its owner is host:pid:nonce): where its
        local run's journal and output are kept."""
        return self.owner.split(":", 1)[0] if self.owner else None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "task": self.task,
            "kind": self.kind,
            "scheduled_for": iso(self.scheduled_for),
            "state": self.state,
            "claimed_at": iso(self.claimed_at),
            "accepted_at": iso(self.accepted_at),
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "exit_code": self.exit_code,
            "error_code": self.error_code,
            "detail": self.detail,
            "covers": self.covers,
            "missed": self.missed,
            "run_id": self.run_id,
            "log_path": self.log_path,
            "attempt": self.attempt,
            "retry_of": self.retry_of,
            "retry_at": iso(self.retry_at),
            "worker": self.worker,
        }


OCCURRENCE_COLUMNS = (
    "id",
    "task_id",
    "task",
    "kind",
    "scheduled_for",
    "state",
    "claimed_at",
    "covers",
    "missed",
    "accepted_at",
    "started_at",
    "finished_at",
    "exit_code",
    "error_code",
    "detail",
    "command_id",
    "run_id",
    "owner",
    "lease_token",
    "pid",
    "pgid",
    "pid_start",
    "event_cursor",
    "generation",
    "log_path",
    "attempt",
    "retry_of",
    "retry_at",
    "worker",
    "deadline",
)


def occurrence_from_row(row: Any) -> Occurrence:
    return Occurrence(*row)
