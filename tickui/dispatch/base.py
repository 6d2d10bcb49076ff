"""What a dispatcher is: the jobs it is given, what it answers, and its protocol.

A dispatcher's receipt only says a run was accepted. Whether it succeeded is
written to the event log by whoever watches the run (here, the subprocess
dispatcher itself), and the engine settles occurrences from those events.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tickui.models import Occurrence, Task


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


class Dispatcher(Protocol):
    async def dispatch(
        self, jobs: Sequence[Job], may_start: Fence | None = None
    ) -> list[Receipt | DispatchFailure | NotStarted]: ...

    async def cancel(self, occurrence_id: int, reason: str) -> bool: ...

    def active(self) -> int: ...

    async def shutdown(self, grace: float) -> None: ...


async def wait_until_done(runs_done: Iterable[asyncio.Event], grace: float) -> None:
    """Give active runs up to `grace` seconds to end by themselves (a dispatcher's stop)."""
    waiting = [done.wait() for done in runs_done]
    if waiting:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*waiting), grace)
