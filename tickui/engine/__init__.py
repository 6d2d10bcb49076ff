"""The scheduler engine: scans on ticks, claims due slots under a fenced lease, starts
them through its dispatcher, and settles them from run events. `core.SchedulerEngine` and
its parts: queued starts, recovery of runs a gone engine left, run-now requests,
settlement, the lease, and the records it hands out (status, changes, config)."""

from tickui.engine.core import SchedulerEngine
from tickui.engine.records import (
    NOT_STARTED,
    EngineChange,
    EngineConfig,
    EngineStatus,
    default_owner,
)
from tickui.engine.requests import RunNowRefused, queue_run_now

__all__ = [
    "NOT_STARTED",
    "EngineChange",
    "EngineConfig",
    "EngineStatus",
    "RunNowRefused",
    "SchedulerEngine",
    "default_owner",
    "queue_run_now",
]
