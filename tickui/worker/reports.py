"""What a worker said of its runs: run events made and published, and the recent
transitions and outcomes kept to answer a resend or to send again after the broker came
back empty."""

from __future__ import annotations

import time
from typing import Any

from tickui.common.timeutil import MICROS
from tickui.dispatch import messages as m
from tickui.dispatch.bounded import Bounded
from tickui.model.occurrence import RUN_INTERRUPTED, RUN_TRANSITION
from tickui.worker.events_view import LOOKBACK_S
from tickui.worker.publisher import Publisher

# After a broker came back empty, run events this recent are sent again: as far back as a
# worker reads the events topic, so a copy of a command still before its deadline finds
# the "running" event of the record it was started from.
REPUBLISH_S = LOOKBACK_S


def now_micros() -> int:
    return time.time_ns() // 1000


class RunReports:
    """Run events of worker `worker_id`, sent through `pub`."""

    def __init__(self, worker_id: str, pub: Publisher) -> None:
        self.worker_id = worker_id
        self.pub = pub
        self.outcomes: Bounded[str, m.RunEvent] = Bounded(1000)
        self.transitions: Bounded[str, m.RunEvent] = Bounded(1000)

    def event(self, kind: str, command_id: str, run_id: str | None, **payload: Any) -> m.RunEvent:
        return m.RunEvent(
            m.new_event_id(), kind, command_id, run_id, self.worker_id, now_micros(), payload
        )

    async def emit(self, event: m.RunEvent) -> None:
        if event.type != RUN_TRANSITION:
            self.outcomes.put(event.command_id, event)  # for a resend
        await self.pub.emit(event)

    def started(self, command_id: str, transition: m.RunEvent) -> None:
        """The broker took `transition`, the start of `command_id`'s run."""
        self.transitions.put(command_id, transition)

    def has_outcome(self, command_id: str) -> bool:
        return command_id in self.outcomes

    async def resend(self, command_id: str) -> None:
        """The engine heard no outcome: send it again, or say there is none here."""
        known = self.outcomes.get(command_id)
        if known is not None:
            await self.pub.emit(known)
        else:
            await self.emit(
                self.event(RUN_INTERRUPTED, command_id, None, detail="worker has no record")
            )

    def recent(self) -> list[m.RunEvent]:
        """The transitions of the last REPUBLISH_S, each followed by its outcome if any."""
        since = now_micros() - REPUBLISH_S * MICROS
        again = []
        for cid, transition in self.transitions.items():
            if transition.at >= since:
                again.append(transition)
                outcome = self.outcomes.get(cid)
                if outcome is not None:
                    again.append(outcome)
        return again

    async def republish(self, events: list[m.RunEvent]) -> None:
        for event in events:
            await self.pub.emit(event)
