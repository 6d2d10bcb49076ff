"""The ticker's metrics: ONEX's `ModelRuntimeSchedulerMetrics`, plus tickui's own figures.

`SchedulerMetrics` carries every field and method of ONEX's model (omnibase-infra
`omnibase_infra.runtime.models.ModelRuntimeSchedulerMetrics`) with ONEX's meanings, so
ONEX code reading `await scheduler.get_metrics()` works unchanged, and `onex_dict()`
gives exactly those 14 fields in JSON form, which ONEX's model validates:
`ModelRuntimeSchedulerMetrics.model_validate_json(json.dumps(m.onex_dict()))`.

tickui's extra figures (lateness, missed slots, clock jumps, the breaker's moves, the
sequence store, ticks delivered in this process) follow under their own names; the
dashboard and `tickui run`'s final JSON (`to_json()`) read them. Nothing here imports ONEX.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from enum import StrEnum
from typing import Any


class SchedulerStatus(StrEnum):
    """ONEX's `EnumSchedulerStatus`: the same five values and the same four questions."""

    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    ERROR = "error"

    def is_active(self) -> bool:
        return self in (SchedulerStatus.STARTING, SchedulerStatus.RUNNING, SchedulerStatus.STOPPING)

    def can_start(self) -> bool:
        return self in (SchedulerStatus.STOPPED, SchedulerStatus.ERROR)

    def can_stop(self) -> bool:
        return self in (SchedulerStatus.RUNNING, SchedulerStatus.STARTING)

    def is_terminal(self) -> bool:
        return self in (SchedulerStatus.STOPPED, SchedulerStatus.ERROR)


# ONEX's is_healthy(): fewer consecutive failures than this (a constant in ONEX's model).
HEALTHY_FAILURES_BELOW = 5

ONEX_FIELDS = (
    "scheduler_id",
    "status",
    "ticks_emitted",
    "ticks_failed",
    "last_tick_at",
    "last_tick_duration_ms",
    "average_tick_duration_ms",
    "max_tick_duration_ms",
    "current_sequence_number",
    "last_persisted_sequence",
    "circuit_breaker_open",
    "consecutive_failures",
    "started_at",
    "total_uptime_seconds",
)


@dataclass(frozen=True, slots=True)
class SchedulerMetrics:
    """One immutable snapshot. The first 14 fields are ONEX's, with ONEX's meanings:

    - `ticks_emitted`: ticks whose emission succeeded, i.e. published to the bus. A ticker
      with no bus at all (local ticks only) counts each tick it delivered in-process.
    - `ticks_failed`: failed emissions: publish errors, timeouts, and ticks refused by an
      open breaker or a full publish backlog (ONEX counts breaker refusals too).
    - `last_tick_at`: the `now` of the last successful tick; durations are publish times.
    - `consecutive_failures`: failed emissions since the last success (refusals included).
    - `last_persisted_sequence`: the highest sequence number covered by the sequence
      store (0 with none), never above `current_sequence_number`, so
      `unpersisted_sequence_count()` is never negative.
    - `total_uptime_seconds`: since `started_at`, still growing after a stop (as ONEX).
    """

    scheduler_id: str
    status: SchedulerStatus = SchedulerStatus.STOPPED
    ticks_emitted: int = 0
    ticks_failed: int = 0
    last_tick_at: datetime | None = None
    last_tick_duration_ms: float = 0.0
    average_tick_duration_ms: float = 0.0
    max_tick_duration_ms: float = 0.0
    current_sequence_number: int = 0
    last_persisted_sequence: int = 0
    circuit_breaker_open: bool = False
    consecutive_failures: int = 0
    started_at: datetime | None = None
    total_uptime_seconds: float = 0.0
    # ---- tickui's own figures ------------------------------------------------------------
    interval_ms: int = 0
    bus: str = "none"
    wire: str = "bare"
    ticks_delivered: int = 0  # every tick produced and handed to in-process subscribers
    ticks_published: int = 0  # = ticks_emitted when there is a bus
    ticks_missed: int = 0  # slots that passed with no tick (a stall): counted, never sent
    ticks_coalesced: int = 0  # ticks a subscriber still busy with the last one skipped
    lateness_p50_ms: float | None = None
    lateness_p99_ms: float | None = None
    lateness_max_ms: float | None = None
    clock_jumps: int = 0
    last_clock_jump_s: float | None = None
    sequence_store: str = "memory"
    sequence_state: str = "off"  # off, starting, ok, unreachable
    sequence_error: str | None = None
    sequence_reserved: int = 0  # the store's high-water mark (numbers reserved ahead)
    breaker_state: str = "CLOSED"
    breaker_failures: int = 0  # the breaker's own count towards its threshold
    breaker_threshold: int = 5
    breaker_retry_in_s: float | None = None
    last_error: str | None = None
    transitions: tuple[dict[str, Any], ...] = ()
    simulating_failures: bool = False
    healthy: bool = False  # tickui's stricter health: also the sequence store and lateness
    lateness_recent_ms: tuple[float, ...] = ()
    publish_recent_ms: tuple[float, ...] = ()

    # ---- ONEX's methods --------------------------------------------------------------------

    def tick_success_rate(self) -> float:
        """emitted / (emitted + failed); 1.0 before any attempt."""
        total = self.ticks_emitted + self.ticks_failed
        return 1.0 if total == 0 else self.ticks_emitted / total

    def is_healthy(self) -> bool:
        """ONEX's rule: running, breaker closed, fewer than 5 consecutive failures."""
        return (
            self.status == SchedulerStatus.RUNNING
            and not self.circuit_breaker_open
            and self.consecutive_failures < HEALTHY_FAILURES_BELOW
        )

    def unpersisted_sequence_count(self) -> int:
        """Sequence numbers handed out but not covered by the store (never negative)."""
        return self.current_sequence_number - self.last_persisted_sequence

    # ---- tickui's names for the dashboard ----------------------------------------------------

    @property
    def success_rate(self) -> float:
        return round(self.tick_success_rate(), 4)

    @property
    def current_sequence(self) -> int:
        return self.current_sequence_number

    @property
    def uptime_s(self) -> float:
        return self.total_uptime_seconds

    @property
    def publish_last_ms(self) -> float | None:
        return self.last_tick_duration_ms if self.ticks_published else None

    @property
    def publish_avg_ms(self) -> float | None:
        return self.average_tick_duration_ms if self.ticks_published else None

    @property
    def publish_max_ms(self) -> float | None:
        return self.max_tick_duration_ms if self.ticks_published else None

    # ---- JSON ------------------------------------------------------------------------------

    def onex_dict(self) -> dict[str, Any]:
        """Exactly ONEX's 14 fields, JSON-ready (like `model_dump(mode="json")`)."""
        out: dict[str, Any] = {}
        for name in ONEX_FIELDS:
            value = getattr(self, name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, SchedulerStatus):
                value = value.value
            out[name] = value
        return out

    def to_json(self) -> dict[str, Any]:
        """ONEX's fields, then tickui's (without the sparkline samples)."""
        out = self.onex_dict()
        for f in fields(self):
            if f.name in out or f.name in ("lateness_recent_ms", "publish_recent_ms"):
                continue
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        out["success_rate"] = self.success_rate
        out["is_healthy"] = self.is_healthy()
        out["current_sequence"] = self.current_sequence_number  # tickui's older names
        out["uptime_s"] = self.total_uptime_seconds
        return out
