"""What `tickui worker` is told on its command line (and settings)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tickui.common.kafka import KafkaAccess
from tickui.common.options import default
from tickui.dispatch import messages as m
from tickui.dispatch.allow import AllowList
from tickui.dispatch.signing import Keyring


@dataclass(frozen=True)
class WorkerOptions:
    bootstrap: str | KafkaAccess
    keyring: Keyring
    group: str = m.DEFAULT_GROUP
    slots: int = 4
    worker_id: str = ""
    duration: float | None = None
    stop_grace: float = 10.0
    log_dir: Path = Path(".")
    session_timeout_ms: int = 4000
    allow: AllowList = field(default_factory=AllowList)
    # the engine's worker_timeout: runs are fenced this long (less the kill grace) after
    # the last heartbeat the broker took
    engine_worker_timeout: float = m.WORKER_TIMEOUT_S
    # how long fetches wait at rest (see pace.py)
    idle_poll_ms: int = default("worker", "idle_poll") // 1000
