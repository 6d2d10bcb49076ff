"""The occurrence state machine and how runtime events move it. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field

from tickui.common.redact import redact
from tickui.model.states import ACTIVE, QUEUED, STATES, TERMINAL  # noqa: F401 (named here too)

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    from typing import Any

DETAIL_MAX = 1024
CODE_MAX = 64

_MOVES = {
    QUEUED: {"claimed", "skipped", "cancelled"},
    "claimed": {"accepted", "running", "failed", "cancelled"},
    "accepted": {"running", "succeeded", "failed", "cancelled"},
    "running": {"succeeded", "failed", "cancelled"},
}

RUN_TRANSITION = "control.run_transition"
RUN_COMPLETED = "run.completed"
RUN_FAILED = "run.failed"
RUN_CANCELED = "run.canceled"
RUN_CANCELLED = "run.cancelled"  # the other spelling, accepted alike
RUN_INTERRUPTED = "run.interrupted"
EVENT_TYPES = (RUN_TRANSITION, RUN_COMPLETED, RUN_FAILED, RUN_CANCELED, RUN_INTERRUPTED)
# A transition to one of these run states means the run has started (ksadk's set); any
# other state (`queued`, `completed`, ...) binds the run to the command and moves nothing:
# outcomes come from the run.* events alone.
STARTED_STATES = frozenset({"running", "paused", "waiting"})


def can_move(source: str, target: str) -> bool:
    """Terminal states never change; everything else moves as _MOVES allows."""
    return target in _MOVES.get(source, ())


def bound(detail: str | None) -> str | None:
    if detail is None:
        return None
    detail = str(detail)
    return detail if len(detail) <= DETAIL_MAX else detail[: DETAIL_MAX - 1] + "…"


def _text(value: Any) -> str | None:
    """A runtime's free text as stored: redacted, then bounded. Only a prefix is redacted,
    so a huge message costs no more than a short one; what is past it is cut anyway."""
    if value is None or value == "":
        return None
    return bound(redact(str(value)[: 2 * DETAIL_MAX]))


@dataclass(slots=True)
class RuntimeEvent:
    """One appended fact about a run, as stored in the event log."""

    seq: int
    at: int
    command_id: str | None
    run_id: str | None
    type: str
    payload: dict[str, Any] = field(default_factory=dict)
    # The id of what caused this event; ksadk's runtime names the command here.
    causation_id: str | None = None


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


def _error(payload: dict[str, Any]) -> tuple[str | None, str | None]:
    """The failure's code and text: tickui's flat `error_code`/`detail`, else ksadk's
    nested `error: {code, message}` (or a bare `error` string)."""
    error = payload.get("error")
    nested_code = nested_text = None
    if isinstance(error, dict):
        nested_code, nested_text = error.get("code"), error.get("message")
    elif isinstance(error, str):
        nested_text = error
    code = payload.get("error_code") or nested_code
    text = payload.get("detail")
    if text is None or text == "":
        text = nested_text
    return (str(code)[:CODE_MAX] if code else None), _text(text)


def _exit_code(payload: dict[str, Any]) -> int | None:
    value = payload.get("exit_code")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _settle(event: RuntimeEvent) -> tuple[str, dict[str, Any]] | None:
    payload = event.payload if isinstance(event.payload, dict) else {}
    type_ = event.type
    if type_ == RUN_COMPLETED:
        exit_code = _exit_code(payload)
        return "succeeded", {"exit_code": exit_code if exit_code is not None else 0}
    if type_ not in (RUN_FAILED, RUN_CANCELED, RUN_CANCELLED, RUN_INTERRUPTED):
        return None
    code, detail = _error(payload)
    fields: dict[str, Any] = {"exit_code": _exit_code(payload), "detail": detail}
    if type_ == RUN_FAILED:
        fields["error_code"] = code or "RUN_FAILED"
        return "failed", fields
    if type_ == RUN_INTERRUPTED:
        fields["error_code"] = code or "INTERRUPTED"
        fields["detail"] = detail or "run interrupted"
        return "failed", fields
    if code:  # a cancellation keeps the runtime's reason code when it gives one
        fields["error_code"] = code
    return "cancelled", fields


def _names_command(occ: Progress, event: RuntimeEvent) -> bool:
    """The event is about this occurrence's command: by its command id or, when it names
    none (ksadk's runtime; an empty id is none), by its causation id."""
    if not occ.command_id:
        return False
    if event.command_id:
        return event.command_id == occ.command_id
    return event.causation_id == occ.command_id


def apply_event(occ: Progress, event: RuntimeEvent) -> tuple[Progress, Change]:
    """Fold one event into an occurrence; unrelated or late events only move the cursor."""
    change = _change(occ, event)
    if occ.state not in ACTIVE:
        return occ, change
    # a change names the run when it binds one; otherwise the run stays the occurrence's
    run_id = change.fields.get("run_id", occ.run_id)
    return Progress(occ.id, change.state or occ.state, occ.command_id, run_id, event.seq), change


def _change(occ: Progress, event: RuntimeEvent) -> Change:
    """What one event does to an occurrence (apply_event's change, without its Progress)."""
    if occ.state not in ACTIVE:
        return Change(occ.id, event.seq)
    payload = event.payload if isinstance(event.payload, dict) else {}
    names_command = _names_command(occ, event)
    if event.type == RUN_TRANSITION and names_command:
        fields: dict[str, Any] = {"run_id": event.run_id or occ.run_id}
        state = None
        if str(payload.get("state", "running")) in STARTED_STATES and can_move(
            occ.state, "running"
        ):
            state = "running"
            fields["started_at"] = event.at
            for key in ("pid", "pgid", "pid_start", "log_path", "worker"):
                if key in payload:
                    fields[key] = payload[key]
        return Change(occ.id, event.seq, state, fields)
    same_run = occ.run_id is not None and event.run_id == occ.run_id
    # A runtime may report an outcome with the command id before (or without) a transition,
    # or name the command and no run at all.
    unbound = names_command and (occ.run_id is None or event.run_id is None)
    settled = _settle(event) if same_run or unbound else None
    if settled and can_move(occ.state, settled[0]):
        state, fields = settled
        fields["finished_at"] = event.at
        if unbound and event.run_id:
            fields["run_id"] = event.run_id
        return Change(occ.id, event.seq, state, fields)
    return Change(occ.id, event.seq)


def fold_events(occ: Progress, events: list[RuntimeEvent]) -> Change | None:
    """All of an occurrence's new events, in order, reduced to one change (or None)."""
    if len(events) == 1:  # the usual case (a run's end): that event's change as it is
        return _change(occ, events[0]) if events[0].seq > occ.cursor else None
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
