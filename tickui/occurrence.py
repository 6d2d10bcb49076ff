"""The occurrence state machine and how runtime events move it. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ACTIVE = ("claimed", "accepted", "running")
TERMINAL = ("succeeded", "failed", "cancelled", "skipped")
STATES = ACTIVE + TERMINAL
DETAIL_MAX = 1024

_MOVES = {
    "claimed": {"accepted", "running", "failed", "cancelled"},
    "accepted": {"running", "succeeded", "failed", "cancelled"},
    "running": {"succeeded", "failed", "cancelled"},
}

RUN_TRANSITION = "control.run_transition"
RUN_COMPLETED = "run.completed"
RUN_FAILED = "run.failed"
RUN_CANCELED = "run.canceled"
RUN_INTERRUPTED = "run.interrupted"
EVENT_TYPES = (RUN_TRANSITION, RUN_COMPLETED, RUN_FAILED, RUN_CANCELED, RUN_INTERRUPTED)


def can_move(source: str, target: str) -> bool:
    """Terminal states never change; everything else follows the diagram in DESIGN 3."""
    return target in _MOVES.get(source, ())


def bound(detail: str | None) -> str | None:
    if detail is None:
        return None
    detail = str(detail)
    return detail if len(detail) <= DETAIL_MAX else detail[: DETAIL_MAX - 1] + "…"


@dataclass(slots=True)
class RuntimeEvent:
    """One appended fact about a run, as stored in the event log."""

    seq: int
    at: int
    command_id: str | None
    run_id: str | None
    type: str
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Progress:
    """Where an active occurrence stands, as reconcile sees it."""

    id: int
    state: str
    command_id: str | None
    run_id: str | None
    cursor: int


@dataclass(slots=True)
class Change:
    """What one event does to an occurrence: a new state and fields, or only the cursor."""

    id: int
    cursor: int
    state: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)


def _settle(event: RuntimeEvent) -> tuple[str, dict[str, Any]] | None:
    payload = event.payload
    exit_code = payload.get("exit_code")
    if event.type == RUN_COMPLETED:
        return "succeeded", {"exit_code": exit_code if exit_code is not None else 0}
    if event.type == RUN_FAILED:
        return "failed", {
            "exit_code": exit_code,
            "error_code": str(payload.get("error_code") or "RUN_FAILED")[:64],
            "detail": bound(payload.get("detail")),
        }
    if event.type == RUN_CANCELED:
        return "cancelled", {"exit_code": exit_code, "detail": bound(payload.get("detail"))}
    if event.type == RUN_INTERRUPTED:
        return "failed", {
            "exit_code": exit_code,
            "error_code": "INTERRUPTED",
            "detail": bound(payload.get("detail") or "run interrupted"),
        }
    return None


def apply_event(occ: Progress, event: RuntimeEvent) -> tuple[Progress, Change]:
    """Fold one event into an occurrence; unrelated or late events only move the cursor."""
    if occ.state not in ACTIVE:
        return occ, Change(occ.id, event.seq)
    if event.type == RUN_TRANSITION and event.command_id == occ.command_id:
        fields: dict[str, Any] = {"run_id": event.run_id}
        state = None
        if event.payload.get("state", "running") == "running" and can_move(occ.state, "running"):
            state = "running"
            fields["started_at"] = event.at
            for key in ("pid", "pgid", "pid_start", "log_path"):
                if key in event.payload:
                    fields[key] = event.payload[key]
        moved = Progress(occ.id, state or occ.state, occ.command_id, event.run_id, event.seq)
        return moved, Change(occ.id, event.seq, state, fields)
    same_run = occ.run_id is not None and event.run_id == occ.run_id
    # A runtime may report an outcome with the command id before (or without) a transition.
    unbound = occ.run_id is None and event.command_id == occ.command_id
    settled = _settle(event) if same_run or unbound else None
    if settled and can_move(occ.state, settled[0]):
        state, fields = settled
        fields["finished_at"] = event.at
        run_id = occ.run_id or event.run_id
        if unbound and event.run_id:
            fields["run_id"] = event.run_id
        moved = Progress(occ.id, state, occ.command_id, run_id, event.seq)
        return moved, Change(occ.id, event.seq, state, fields)
    return Progress(occ.id, occ.state, occ.command_id, occ.run_id, event.seq), Change(
        occ.id, event.seq
    )


def fold_events(occ: Progress, events: list[RuntimeEvent]) -> Change | None:
    """All of an occurrence's new events, in order, reduced to one change (or None)."""
    state: str | None = None
    fields: dict[str, Any] = {}
    start = cursor = occ.cursor
    for event in events:
        if event.seq <= occ.cursor:
            continue
        occ, change = apply_event(occ, event)
        cursor = change.cursor
        if change.state:
            state = change.state
        fields.update(change.fields)
        if occ.state in TERMINAL:
            break
    if cursor == start and state is None and not fields:
        return None
    return Change(occ.id, cursor, state, fields)
