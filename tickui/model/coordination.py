"""The engine's coordination as records: its lease, the run-now requests other processes
leave it, and the workers it hears from (Kafka dispatch) with what they say of a run's
output. Apart from tickui.model.records (tasks and their occurrences), which a listing
reads without these."""

from __future__ import annotations

from dataclasses import dataclass, field

from tickui.common.timeutil import iso

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    from typing import Any


WORKER_STATES = ("alive", "draining", "drained", "lost")


@dataclass(slots=True)
class WorkerInfo:
    """A worker as the engine last heard it (Kafka dispatch). `last_seen` is the engine's
    clock when its last heartbeat arrived; `running` its command ids then."""

    id: str
    host: str
    slots: int
    running: list[str]
    last_seen: int
    state: str  # alive | lost | draining | drained
    version: str | None = None
    log_dir: str | None = None
    group: str | None = None
    first_seen: int | None = None
    refused: dict[str, int] = field(default_factory=dict)  # messages it refused, by kind
    insecure: bool = False  # it runs without a key

    def to_json(self) -> dict[str, Any]:
        return {
            "refused": dict(self.refused),
            "insecure": self.insecure,
            "id": self.id,
            "host": self.host,
            "slots": self.slots,
            "running": list(self.running),
            "last_seen": iso(self.last_seen),
            "state": self.state,
            "version": self.version,
            "log_dir": self.log_dir,
            "group": self.group,
        }


@dataclass(slots=True)
class RemoteOutput:
    """What a worker said of a run's output: the redacted tail of its last outcome event
    (empty while it runs), which worker, and where the full log is on that worker."""

    tail: str
    worker: str
    log_path: str | None = None


@dataclass(slots=True)
class Lease:
    """The engine's lease: who holds it, its fencing token and until when."""

    owner: str
    token: int
    expires_at: int
    host: str | None = None
    pid: int | None = None


@dataclass(slots=True)
class LeaseResult:
    """Outcome of trying to take or renew the lease: held (with token) or standby."""

    held: bool
    lease: Lease | None
    new: bool = False


@dataclass(slots=True)
class RunRequest:
    """A run-now another process asked of the engine, not taken up yet."""

    id: int
    task_id: int
    task: str
    kind: str
    created_at: int
