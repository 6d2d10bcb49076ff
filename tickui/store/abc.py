"""The store contract: everything the engine, the commands, the dashboard, the hooks and
the dispatchers ask of the database, with the values that cross it.

Callers hold a `Store` and never the class behind it, so the database can change without
them. `Store.open` gives the implementation tickui uses (SQLite, in tickui.store.sqlite).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from tickui.common.errors import StoreError
from tickui.model.audit import Actor, AuditEntry
from tickui.model.coordination import Lease, LeaseResult, RemoteOutput, RunRequest, WorkerInfo
from tickui.model.occurrence import Change, Progress, RuntimeEvent
from tickui.model.planning import Plan
from tickui.model.records import Occurrence, Task, TaskStats
from tickui.model.spec import TaskSpec
from tickui.store.values import Beat, Delivery, DispatchSecurity

DEFAULT_KEEP = 1000  # occurrences kept per task by `prune`


class LeaseLost(StoreError):
    """A claim was made with a token that no longer holds the lease (fencing)."""


@dataclass(slots=True)
class NewEvent:
    at: int
    type: str
    command_id: str | None
    run_id: str | None
    payload: dict[str, Any] = field(default_factory=dict)
    causation_id: str | None = None  # ksadk's runtime names the command here
    event_id: str | None = None  # a worker's id for the event: a second copy is dropped


@dataclass(slots=True)
class Queued:
    """One occurrence to queue: `kind` scheduled, manual or backfill; `retry_at` None
    means due at `scheduled_for`."""

    task_id: int
    task: str
    kind: str
    scheduled_for: int
    generation: int
    retry_at: int | None = None
    attempt: int = 1
    retry_of: int | None = None
    covers: int = 1
    detail: str | None = None


@dataclass(slots=True)
class SyncReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


class FinishedRun(NamedTuple):
    """A succeeded or failed occurrence, as a time-lapse learns a task's habits from it."""

    task: str
    state: str
    started_at: int | None
    finished_at: int | None
    exit_code: int | None


class OutcomeCount(NamedTuple):
    """Occurrences of one task in one state: how many, the slots they missed, and the
    latest a scheduled one started after its slot (µs; None when none started)."""

    task: str
    state: str
    count: int
    missed: int
    late_max: int | None


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_lower(text: str) -> str:
    """Lower case as the store's task filter matches (ASCII only), so a filter in Python
    and the store's keep the same rows."""
    return text.translate(_ASCII_LOWER)


class Store(ABC):
    """One open tickui database. Writes that belong together are one transaction; the
    lease's token fences every claim, so a second engine can never claim a slot twice."""

    path: Path  # the database file (for a PostgreSQL store: its URL, as shown)
    where: str  # the database as it may be shown: a file's path, or a URL without password
    log_dir: Path  # where the runs' output is kept, beside the file
    readonly: bool  # opened by a command that only reads: every write is refused

    # ---- opening and closing ---------------------------------------------------------

    @classmethod
    async def open(cls, path: str | os.PathLike[str], readonly: bool = False) -> Store:
        """Open the database at `path` for writing (created, private, when missing) or,
        with `readonly`, for reading only. On the contract this opens the store `path` names:
        a `postgresql://` URL a PostgreSQL store, anything else a SQLite file; an
        implementation's own `open` opens its kind."""
        from tickui.common.checks import is_store_url

        if isinstance(path, str) and is_store_url(path):
            from tickui.store.postgres import PostgresStore

            return await PostgresStore.open(path, readonly=readonly)
        from tickui.store.sqlite import SQLiteStore

        return await SQLiteStore.open(path, readonly=readonly)

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def checkpoint(self) -> None:
        """Fold recent commits into the main file at a quiet moment (never waits)."""

    @abstractmethod
    async def data_version(self) -> int:
        """Changes whenever another connection commits: a cheap 'has anything changed'."""

    def outage(self) -> str | None:
        """What keeps the store's server from being reached now, in one line; None while
        it answers (and always for a SQLite file, whose faults each call raises)."""
        return None

    def on_commit(self, listener: Callable[[], None]) -> None:  # noqa: B027 (optional)
        """Call `listener` (in the loop) soon after another connection commits, when the
        store can hear that (PostgreSQL's NOTIFY). A SQLite file cannot: its readers look
        at data_version instead, and this does nothing."""

    @abstractmethod
    def on_events(self, listener: Callable[[], None]) -> None:
        """Call `listener` (in the loop) after runtime events are appended through this store."""

    @abstractmethod
    async def announce_request(self) -> None:
        """Tell the engine holding the lease, wherever it runs, that a request waits, so
        it takes it now rather than at its next tick. Best effort, never fails: unheard,
        the request waits for that tick."""

    @abstractmethod
    def hear_requests(self, listener: Callable[[], None] | None) -> None:
        """While the lease is held: call `listener` (in the loop) when another process
        announces a request; None stops. Calling again while listening changes nothing;
        a SQLite file's bell taken by another process is tried again."""

    # ---- tasks -----------------------------------------------------------------------

    @abstractmethod
    async def add_task(
        self, spec: TaskSpec, now: int, source: str = "cli", *, actor: Actor | None = None
    ) -> Task:
        """Add a task. Each change a person makes names its `actor`: the change and its
        audit entry are written in one transaction (see `audit_entries`)."""

    @abstractmethod
    async def find_task(self, name: str) -> Task | None: ...

    @abstractmethod
    async def get_task(self, name: str) -> Task:
        """Task `name`; NotFound when there is none."""

    @abstractmethod
    async def list_tasks(self, with_stats: bool = True) -> list[Task]: ...

    @abstractmethod
    async def tasks_by_id(self, ids: Sequence[int]) -> list[Task]: ...

    @abstractmethod
    async def task_stats(self, ids: Iterable[int] | None = None) -> dict[int, TaskStats]: ...

    @abstractmethod
    async def task_versions(self) -> dict[int, tuple[int, int | None, int, int]]:
        """Per task: updated_at, next_run_at, enabled and generation (to spot a change)."""

    @abstractmethod
    async def set_enabled(
        self,
        name: str,
        enabled: bool,
        now: int,
        note: str | None = None,
        *,
        actor: Actor | None = None,
    ) -> Task:
        """Enable or disable; audited as enable, disable (with its note) or clear-pause
        (an enable of a task pause-after disabled)."""

    @abstractmethod
    async def remove_task(
        self, name: str, now: int | None = None, *, actor: Actor | None = None
    ) -> None: ...

    @abstractmethod
    async def sync_tasks(self, specs: Sequence[TaskSpec], now: int) -> SyncReport:
        """Make the config-declared tasks match `specs`; CLI-made tasks are kept."""

    @abstractmethod
    async def edit_task(
        self,
        name: str,
        spec: TaskSpec,
        now: int,
        enabled: bool | None = None,
        generation: int | None = None,
        *,
        actor: Actor | None = None,
    ) -> Task:
        """Replace the definition in one write; refused when `generation` is stale."""

    @abstractmethod
    async def queue_backfill(
        self, name: str, slots: Sequence[int], now: int, *, actor: Actor | None = None
    ) -> tuple[list[int], list[int]]: ...

    @abstractmethod
    async def cancel_backfill(self, name: str, now: int, *, actor: Actor | None = None) -> int: ...

    # ---- scanning, claiming and occurrences --------------------------------------------

    @abstractmethod
    async def due_task_ids(self, now: int) -> list[int]: ...

    @abstractmethod
    async def scan_has_work(self, now: int) -> bool: ...

    @abstractmethod
    async def next_due(self) -> int | None: ...

    @abstractmethod
    async def tasks_due_at(self, instant: int, limit: int) -> list[str]:
        """The names of the tasks with a slot or a queued run due at `instant` (as
        next_due says it), at most `limit` of them."""

    @abstractmethod
    async def claim(
        self, plans: Sequence[Plan], owner: str, token: int, now: int
    ) -> list[Occurrence]:
        """Advance each task and insert its planned occurrences, while `token` holds the
        lease (LeaseLost otherwise); a slot is never claimed twice."""

    @abstractmethod
    async def claim_one_by_one(
        self, plans: Sequence[Plan], owner: str, token: int, now: int
    ) -> list[Occurrence]: ...

    @abstractmethod
    async def claim_manual(self, task: Task, owner: str, token: int, now: int) -> Occurrence: ...

    @abstractmethod
    async def newest_occurrences(
        self,
        limit: int,
        after_id: int = 0,
        *,
        task_text: str | None = None,
        states: Sequence[str] | None = None,
        task_id: int | None = None,
    ) -> list[Occurrence]:
        """Newest first; `task_text` matches names as `ascii_lower` does."""

    @abstractmethod
    async def recent_runs(
        self, task_ids: Sequence[int], per_task: int
    ) -> dict[int, list[Occurrence]]:
        """Each of `task_ids`' newest `per_task` occurrences, newest first (the history
        grid's cells); tasks with none are left out."""

    @abstractmethod
    async def active_occurrences(self) -> list[Occurrence]: ...

    @abstractmethod
    async def occurrences_by_id(self, ids: Sequence[int]) -> list[Occurrence]: ...

    @abstractmethod
    async def get_occurrence(self, occ_id: int) -> Occurrence: ...

    @abstractmethod
    async def mark_accepted(
        self, items: Sequence[tuple[int, str | None, str | None]], now: int
    ) -> None: ...

    @abstractmethod
    async def fail_occurrences(
        self,
        items: Sequence[tuple[int, str, str]],
        now: int,
        states: tuple[str, ...] = ("claimed", "accepted", "running"),
    ) -> None: ...

    @abstractmethod
    async def history(self, task: str | None = None, limit: int = 50) -> list[Occurrence]: ...

    @abstractmethod
    async def prune(self, keep: int = DEFAULT_KEEP) -> list[str]: ...

    @abstractmethod
    async def miss_reasons(self, task_id: int) -> dict[str, tuple[int, int]]: ...

    @abstractmethod
    async def state_counts(self) -> dict[str, int]: ...

    @abstractmethod
    async def pending_counts(self) -> tuple[int, int]:
        """How many occurrences are active and how many queued (two indexed counts)."""

    # ---- the queue -------------------------------------------------------------------

    @abstractmethod
    async def queue_occurrences(self, items: Sequence[Queued], now: int) -> list[int]: ...

    @abstractmethod
    async def due_queued(self, now: int, limit: int = 1000) -> list[Occurrence]: ...

    @abstractmethod
    async def has_due_queued(self, now: int) -> bool: ...

    @abstractmethod
    async def take_queued(
        self,
        start: Sequence[int],
        skip: Sequence[tuple[int, str]],
        cancel: Sequence[tuple[int, str]],
        owner: str,
        token: int,
        now: int,
    ) -> list[Occurrence]: ...

    @abstractmethod
    async def cancel_queued_occurrence(
        self, occ_id: int, now: int, detail: str, *, actor: Actor | None = None
    ) -> bool: ...

    @abstractmethod
    async def requeue(self, ids: Sequence[int]) -> None: ...

    @abstractmethod
    async def cancel_queued(self, task_id: int, now: int, detail: str) -> int: ...

    @abstractmethod
    async def queued_of(self, task_ids: Sequence[int] | None = None) -> list[Occurrence]: ...

    @abstractmethod
    async def failures_of(self, task_id: int) -> int: ...

    # ---- the event log ---------------------------------------------------------------

    @abstractmethod
    async def append_events(self, events: Sequence[NewEvent]) -> int:
        """Append events; one whose event_id is stored already is dropped (a redelivery)."""

    @abstractmethod
    async def remote_output(self, occurrence_id: int) -> RemoteOutput | None: ...

    @abstractmethod
    async def unreconciled(
        self, after_id: int = 0, limit: int = 500
    ) -> tuple[list[tuple[Progress, list[RuntimeEvent]]], int | None]: ...

    @abstractmethod
    async def apply_changes(self, changes: Sequence[Change]) -> None: ...

    @abstractmethod
    async def last_event_seq(self) -> int: ...

    # ---- the lease, run requests and sequences ---------------------------------------

    @abstractmethod
    async def lease(self) -> Lease | None: ...

    @abstractmethod
    async def acquire_lease(
        self,
        owner: str,
        now: int,
        ttl: int,
        identity: tuple[str, int, int | None],
        holder_gone: Callable[[str | None, int | None, int | None], bool],
    ) -> LeaseResult: ...

    @abstractmethod
    async def renew_lease(self, owner: str, token: int, now: int, ttl: int) -> int | None: ...

    @abstractmethod
    async def release_lease(self, owner: str, token: int, now: int) -> None: ...

    @abstractmethod
    async def release_unstarted(
        self, ids: Sequence[int], now: int, detail: str, *, running: bool = False
    ) -> list[int]: ...

    @abstractmethod
    async def foreign_active(self, token: int) -> list[Occurrence]: ...

    @abstractmethod
    async def reserve_sequence(self, key: str, floor: int, block: int) -> int: ...

    @abstractmethod
    async def release_sequence(self, key: str, expected: int, value: int) -> None: ...

    @abstractmethod
    async def add_request(
        self, task: Task, kind: str, now: int, *, actor: Actor | None = None
    ) -> int:
        """A request for the lease holder; with `actor`, audited as run-now (the holder's
        finish_request fills in the run it started, or why it refused)."""

    @abstractmethod
    async def pending_requests(self) -> list[RunRequest]: ...

    @abstractmethod
    async def finish_request(
        self,
        req_id: int,
        now: int,
        outcome: str,
        occurrence_id: int | None,
        reason: str | None,
    ) -> None: ...

    @abstractmethod
    async def request(self, req_id: int) -> tuple[str | None, int | None, str | None]: ...

    # ---- hooks -----------------------------------------------------------------------

    @abstractmethod
    async def hook_occurrences(self, ids: Iterable[int]) -> list[dict[str, Any]]: ...

    @abstractmethod
    async def previous_result(self, task_id: int, before_id: int) -> str | None: ...

    @abstractmethod
    async def last_failed(self, task_id: int) -> dict[str, Any] | None: ...

    @abstractmethod
    async def hook_tasks(self, ids: Iterable[int]) -> list[dict[str, Any]]: ...

    @abstractmethod
    async def start_delivery(
        self, hook: str, event: str, task: str | None, occurrence_id: int | None, now: int
    ) -> int: ...

    @abstractmethod
    async def finish_delivery(
        self, delivery_id: int, now: int, attempts: int, outcome: str, detail: str | None
    ) -> None: ...

    @abstractmethod
    async def fail_deliveries(self, ids: Sequence[int], now: int, detail: str) -> None: ...

    @abstractmethod
    async def record_undelivered(
        self,
        items: Sequence[tuple[str, str, str | None, int | None, int]],
        now: int,
        detail: str,
    ) -> None: ...

    @abstractmethod
    async def fail_stale_deliveries(self, before: int, now: int, detail: str) -> int: ...

    @abstractmethod
    async def recent_deliveries(self, limit: int = 50) -> list[Delivery]: ...

    # ---- workers ---------------------------------------------------------------------

    @abstractmethod
    async def list_workers(self) -> list[WorkerInfo]: ...

    @abstractmethod
    async def record_heartbeats(self, beats: Sequence[Beat]) -> list[str]: ...

    @abstractmethod
    async def record_dispatch_security(
        self, name: str, insecure: bool, key_id: str | None, refused: dict[str, int], at: int
    ) -> None: ...

    @abstractmethod
    async def dispatch_security(self) -> list[DispatchSecurity]: ...

    @abstractmethod
    async def silent_workers(self, before: int) -> list[WorkerInfo]: ...

    @abstractmethod
    async def alive_workers(self, since: int) -> int:
        """How many workers are alive with a heartbeat at or after `since`."""

    @abstractmethod
    async def mark_workers_lost(self, ids: Sequence[str], now: int) -> None: ...

    @abstractmethod
    async def remote_active(self) -> list[Occurrence]: ...

    @abstractmethod
    async def set_deadlines(self, items: Sequence[tuple[int, int, str]]) -> None: ...

    @abstractmethod
    async def started_commands(self, command_ids: Sequence[str]) -> set[str]: ...

    @abstractmethod
    async def set_workers(self, items: Sequence[tuple[int, str]]) -> None: ...

    @abstractmethod
    async def occurrences_by_command(self, command_ids: Sequence[str]) -> dict[str, Occurrence]: ...

    # ---- the operator audit ------------------------------------------------------------

    @abstractmethod
    async def record_audit(
        self,
        actor: Actor,
        action: str,
        task: str | None,
        now: int,
        detail: str | None = None,
        occurrence_id: int | None = None,
    ) -> None:
        """An action that is no store write of its own (a running run's cancel), once done."""

    @abstractmethod
    async def audit_entries(self, task: str | None = None, limit: int = 50) -> list[AuditEntry]:
        """The newest entries first, of one task's name or of all; the newest 10,000 kept."""

    @abstractmethod
    async def untold_audit(self, since: int, limit: int = 500) -> list[AuditEntry]:
        """Entries at or after `since` no lease holder's hooks were told of, oldest first."""

    @abstractmethod
    async def mark_audit_told(self, ids: Sequence[int], now: int) -> None: ...
