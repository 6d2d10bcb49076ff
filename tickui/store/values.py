"""Values the store contract hands over about hooks and workers: a hook delivery's record,
a worker's heartbeat, an engine's dispatch signing (tickui.store.abc re-exports them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tickui.common.timeutil import iso


@dataclass(frozen=True, slots=True)
class Delivery:
    id: int
    hook: str
    event: str
    task: str | None
    occurrence_id: int | None
    created_at: int
    finished_at: int | None
    attempts: int
    outcome: str  # pending | delivered | failed
    detail: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "hook": self.hook,
            "event": self.event,
            "task": self.task,
            "occurrence_id": self.occurrence_id,
            "created_at": iso(self.created_at),
            "finished_at": iso(self.finished_at),
            "attempts": self.attempts,
            "outcome": self.outcome,
            "detail": self.detail,
        }


@dataclass(slots=True)
class Beat:
    """One heartbeat as the engine stores it; `seen` is the engine clock at receipt."""

    worker: str
    host: str
    slots: int
    running: Sequence[str]
    version: str | None
    state: str
    seen: int
    log_dir: str | None = None
    group: str | None = None
    refused: dict[str, int] = field(default_factory=dict)
    insecure: bool = False


@dataclass(frozen=True, slots=True)
class DispatchSecurity:
    """An engine's signing, as it last wrote it: whether it signs, with which key, and
    what it refused."""

    name: str
    insecure: bool
    key_id: str | None
    refused: dict[str, int]
    updated_at: int
