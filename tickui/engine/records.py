"""The engine's configuration and what it tells: its status, its changes."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

from tickui.common import procs
from tickui.common.options import default, seconds
from tickui.common.timeutil import MICROS


@dataclass(frozen=True)
class EngineConfig:
    misfire_grace: int = default("engine", "misfire_grace")
    lease_ttl: int = default("engine", "lease_ttl")
    stop_grace: float = seconds("engine", "stop_grace")
    keep: int = default("engine", "keep")
    batch: int = 1000
    tick_period: int = MICROS
    prune_every: int = 60 * MICROS
    owner: str | None = None
    # E: scan as soon as a run ends while a queued row is due (buffer_one's waiting slot
    # starts within ms, not at the next tick). tickui run and the dashboard turn it on;
    # tests that step a manual clock scan when they say.
    scan_on_end: bool = False


@dataclass(frozen=True)
class EngineStatus:
    """A snapshot for the UI and CLI; every time is engine-clock microseconds."""

    running: bool
    owner: str
    lease_state: str  # held | standby | none
    holder: str | None
    lease_expires_at: int | None
    last_scan_at: int | None
    result: str | None  # ok | standby | waiting_runtime | error
    detail: str | None
    next_scan_at: int | None
    counts: dict[str, int]
    coalesced: int
    was_standby: bool
    warning: str | None = None  # something degraded while scanning works (run output)

    def to_json(self) -> dict[str, object]:
        from tickui.common.timeutil import iso

        return {
            "running": self.running,
            "owner": self.owner,
            "lease_state": self.lease_state,
            "holder": self.holder,
            "lease_expires_at": iso(self.lease_expires_at),
            "last_scan_at": iso(self.last_scan_at),
            "result": self.result,
            "detail": self.detail,
            "next_scan_at": iso(self.next_scan_at),
            "counts": dict(self.counts),
            "coalesced_scans": self.coalesced,
            "was_standby": self.was_standby,
            "warning": self.warning,
        }


@dataclass(frozen=True)
class EngineChange:
    """What changed, so a viewer can redraw only those rows."""

    tasks: frozenset[int] = frozenset()
    occurrences: frozenset[int] = frozenset()
    status: bool = False


NOT_STARTED = "not_started: this engine lost its lease before starting it"


def default_owner() -> str:
    return f"{procs.host()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
