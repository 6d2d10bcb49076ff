"""What a dispatcher is: the jobs it is given, what it answers, and its protocol.

A dispatcher's receipt only says a run was accepted. Whether it succeeded is
written to the event log by whoever watches the run (here, the subprocess
dispatcher itself), and the engine settles occurrences from those events.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from tickui.model.records import Occurrence, Task


@dataclass(frozen=True)
class Receipt:
    command_id: str
    log_path: str | None = None


@dataclass(frozen=True)
class DispatchFailure:
    code: str
    detail: str


@dataclass(frozen=True)
class NotStarted:
    """The fence said no: this engine may not start the job (it lost its lease)."""

    reason: str


@dataclass(frozen=True)
class Job:
    task: Task
    occurrence: Occurrence


Fence = Callable[[], Awaitable[bool]]
Result = Receipt | DispatchFailure | NotStarted


class Dispatcher(ABC):
    """Everything the engine asks of whoever runs its jobs. `dispatch`, `cancel`, `active`
    and `shutdown` are each dispatcher's own; the rest has the defaults of a dispatcher
    whose runs are this process's children."""

    # Runs live in other processes that report on them (workers over Kafka): the engine's
    # recovery leaves a run handed out that way to its events, its deadline or its worker.
    remote: bool = False
    # Why runs cannot be handed out now (the broker is down), for the Workers pane.
    dispatch_problem: str | None = None

    @abstractmethod
    async def dispatch(
        self, jobs: Sequence[Job], may_start: Fence | None = None
    ) -> list[Receipt | DispatchFailure | NotStarted]:
        """Start each job, after `may_start` says yes for it; one answer per job."""

    @abstractmethod
    async def cancel(self, occurrence_id: int, reason: str) -> bool:
        """Stop a run; False when this dispatcher does not have it."""

    @abstractmethod
    def active(self) -> int:
        """Runs this process waits for at shutdown."""

    @abstractmethod
    async def shutdown(self, grace: float) -> None:
        """Let active runs end within `grace` seconds, then stop them."""

    def lease_confirmed(self, asked: float, ttl: float) -> None:
        """The engine holds its lease for `ttl` seconds from `asked` (time.monotonic()):
        runs this dispatcher keeps on this host must be over by then (see
        tickui.dispatch.journals.fence_deadline). Remote runs are the workers' to fence."""
        return None

    async def start(self) -> None:
        """Called once as the engine starts, before the first dispatch; never waits for
        anything remote (a broker that is down is retried in the background)."""
        return None

    async def tend(self, now: int) -> None:
        """Called on every engine tick while the engine holds the lease: settle, on the
        engine's clock, what no one will report (a deadline passed, a worker gone)."""
        return None

    def on_refusal(self, listener: Callable[[str, str, int, str], None]) -> None:
        """Call `listener(who, kind, count so far, detail)` for each message refused as it
        is read (an unsigned command, a bad signature); one that reads no messages has none."""
        return None

    def problems(self) -> list[str]:
        """What is degraded now while scheduling still works, one phrase each (the
        engine's status warning: the dashboard's header, `tickui run`'s last line)."""
        if self.dispatch_problem is not None:
            return [f"runs not handed to workers ({self.dispatch_problem})"]
        return []


async def wait_until_done(runs_done: Iterable[asyncio.Event], grace: float) -> None:
    """Give active runs up to `grace` seconds to end by themselves (a dispatcher's stop)."""
    waiting = [done.wait() for done in runs_done]
    if waiting:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*waiting), grace)
