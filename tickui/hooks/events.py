"""Which hook events a change means, and what they say. Pure functions over plain rows.

An occurrence row (dict) has: id, task_id, task, kind, state, error_code, detail, attempt,
scheduled_for, finished_at, covers, missed. A task row: id, name, enabled, note,
updated_at.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from tickui.common.redact import redact
from tickui.common.timeutil import iso
from tickui.hooks.config import TASK_EVENTS, HookConfig

if TYPE_CHECKING:
    from tickui.model.audit import AuditEntry

PAUSE_NOTE = "paused after"
MAX_DETAIL = 1024


@dataclass(frozen=True)
class HookEvent:
    """One thing to tell: the JSON object a hook receives."""

    event: str
    task: str | None
    occurrence_id: int | None
    state: str | None
    error_code: str | None
    detail: str | None
    attempt: int | None
    scheduled_for: str | None
    finished_at: str | None
    host: str
    action: str | None = None  # audit only: what was done
    actor: dict[str, Any] | None = None  # audit only: who (user, host, origin, pid)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.event != "audit":  # the other events keep their fields as they were
            del data["action"], data["actor"]
        return data

    def body(self, fmt: str) -> bytes:
        value = {"text": slack_text(self)} if fmt == "slack" else self.to_json()
        return json.dumps(value).encode()


def occurrence_events(row: dict[str, Any], previous: str | None) -> list[str]:
    """The events an occurrence in its current state means. `previous` is the state of
    the task's last slot before it (succeeded or failed, its final attempt; None when there
    is none). `failed` is told for a slot's final attempt only: a failure followed by a
    retry (`retried`) is not; the retry's outcome is."""
    state = row["state"]
    events = []
    if state == "failed" and not row.get("retried"):  # a retried failure is not final
        events.append("failed")
    elif state == "succeeded" and previous == "failed":
        events.append("recovered")
    if _missed(row):
        events.append("missed")
    return events


def _missed(row: dict[str, Any]) -> bool:
    """Slots a misfire skipped (a skipped row that stands for missed slots) or folded into
    one run (run_once covering several). Told for a slot's first attempt only: a retry
    carries its slot's `covers` along, and the slot's misses were told already."""
    if (row.get("attempt") or 1) > 1:
        return False
    if row["state"] == "skipped":
        return bool(row.get("missed")) or (row.get("detail") or "").startswith("misfire_")
    return (row.get("covers") or 1) > 1


def is_paused(task: dict[str, Any], since: int) -> bool:
    """Disabled by pause-after (its note says so) at or after `since`."""
    note = task.get("note") or ""
    return not task["enabled"] and note.startswith(PAUSE_NOTE) and task["updated_at"] >= since


def from_occurrence(event: str, row: dict[str, Any], host: str) -> HookEvent:
    return HookEvent(
        event=event,
        task=row["task"],
        occurrence_id=row["id"],
        state=row["state"],
        error_code=row.get("error_code"),
        detail=_detail(row.get("detail")),
        attempt=row.get("attempt") or 1,
        scheduled_for=iso(row.get("scheduled_for")),
        finished_at=iso(row.get("finished_at")),
        host=host,
    )


def paused_event(task: dict[str, Any], last: dict[str, Any] | None, host: str) -> HookEvent:
    """A task paused by pause-after; the occurrence fields are its last failed run's."""
    last = last or {}
    return HookEvent(
        event="paused",
        task=task["name"],
        occurrence_id=last.get("id"),
        state=last.get("state"),
        error_code=last.get("error_code"),
        detail=_detail(task.get("note")),
        attempt=(last.get("attempt") or 1) if last else None,
        scheduled_for=iso(last.get("scheduled_for")),
        finished_at=iso(last.get("finished_at")),
        host=host,
    )


def breaker_event(opened: bool, state: str, reason: str | None, at: int, host: str) -> HookEvent:
    return HookEvent(
        event="breaker_open" if opened else "breaker_closed",
        task=None,
        occurrence_id=None,
        state=state,
        error_code=None,
        detail=_detail(reason),
        attempt=None,
        scheduled_for=None,
        finished_at=iso(at),
        host=host,
    )


def refused_event(who: str, kind: str, count: int, detail: str, at: int, host: str) -> HookEvent:
    """Messages on the dispatch topics that `who` (the engine or a worker) refused:
    `error_code` is the kind (FORGED_COMMAND...), `detail` says how many and the last why."""
    return HookEvent(
        event="refused",
        task=None,
        occurrence_id=None,
        state=None,
        error_code=kind.upper(),
        detail=_detail(f"{who}: {count} refused so far; last: {detail}"),
        attempt=None,
        scheduled_for=None,
        finished_at=iso(at),
        host=host,
    )


def audit_event(entry: AuditEntry, host: str) -> HookEvent:
    """A person's action (the operator audit): `finished_at` is when it was done, `detail`
    what it said (a note, a backfill's range, a run-now's outcome)."""
    return HookEvent(
        event="audit",
        task=entry.task,
        occurrence_id=entry.occurrence_id,
        state=None,
        error_code=None,
        detail=_detail(entry.detail),
        attempt=None,
        scheduled_for=None,
        finished_at=iso(entry.at),
        host=host,
        action=entry.action,
        actor={"user": entry.user, "host": entry.host, "origin": entry.origin, "pid": entry.pid},
    )


def matches(hook: HookConfig, event: HookEvent) -> bool:
    """Does `hook` want `event`? `tasks` narrows task events only (the breaker has no task)."""
    if event.event not in hook.on:
        return False
    if not hook.tasks or event.event not in TASK_EVENTS or event.task is None:
        return True
    return any(fnmatch.fnmatchcase(event.task, pattern) for pattern in hook.tasks)


_SAID = {
    "failed": "failed",
    "recovered": "recovered",
    "paused": "was paused",
    "missed": "missed runs",
    "breaker_open": "tick publishing: circuit breaker opened",
    "breaker_closed": "tick publishing: circuit breaker closed",
    "refused": "refused messages on the dispatch topics",
    "audit": "audit",
}


def slack_text(event: HookEvent) -> str:
    """One line for a chat channel."""
    what = _SAID[event.event]
    if event.event == "audit" and event.actor is not None:
        who = event.actor
        what = f"{event.action} by {who['user']}@{who['host']} ({who['origin']})"
    head = f"tickui on {event.host}: "
    if event.task is not None:
        head += f"task {event.task} {what}"
    else:
        head += what
    parts = [head]
    if event.error_code:
        parts.append(f"({event.error_code})")
    if event.occurrence_id is not None:
        parts.append(f"run {event.occurrence_id}")
        if event.attempt and event.attempt > 1:
            parts.append(f"attempt {event.attempt}")
    text = " ".join(parts)
    if event.detail:
        text += f": {event.detail}"
    return text


def _detail(text: str | None) -> str | None:
    if text is None:
        return None
    out = redact(text)
    return out if len(out) <= MAX_DETAIL else out[: MAX_DETAIL - 1] + "…"
