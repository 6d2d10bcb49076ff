"""A worker's answers to the control topic (cancel, resend) and its recovery when the
broker came back empty. Part of `Worker` (worker.py), kept apart for size."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from tickui.common.kafka import describe
from tickui.common.timeutil import MICROS
from tickui.dispatch import messages as m
from tickui.model.occurrence import RUN_INTERRUPTED
from tickui.worker.events_view import LOOKBACK_S

log = logging.getLogger("tickui.worker")

# After a broker came back empty, run events this recent are sent again: as far back as a
# worker reads the events topic, so a copy of a command still before its deadline finds
# the "running" event of the record it was started from.
REPUBLISH_S = LOOKBACK_S


def now_micros() -> int:
    return time.time_ns() // 1000


class WorkerControl:
    """Mixed into Worker: uses its clients, runs, outcomes, transitions and publisher."""

    control: Any
    keyring: Any
    refusals: Any
    id: str
    running: dict[str, Any]
    outcomes: Any
    transitions: Any
    cancelled: Any
    runner: Any
    pub: Any
    view: Any
    _republished: float

    def _spawn_task(self, coro: Any) -> None: ...
    async def emit(self, event: m.RunEvent) -> None: ...
    def _event(self, kind: str, command_id: str, run_id: str | None, **payload: Any) -> Any: ...

    # ---- control: cancel and resend ----------------------------------------------------------

    async def _read_control(self) -> None:
        while True:
            try:
                batch = await self.control.getmany(timeout_ms=500)
            except Exception as exc:
                log.debug("reading control failed: %s", describe(exc))
                await asyncio.sleep(0.5)
                continue
            for tp, records in batch.items():
                for record in records:
                    forged = self.keyring.check(tp.topic, record.key, record.value, record.headers)
                    if forged is not None:
                        where = f"{tp.topic}[{tp.partition}]@{record.offset}"
                        self.refusals.refuse("forged_control", f"{forged}, {where}")
                        continue
                    try:
                        control = m.Control.decode(record.value)
                    except m.BadMessage as exc:
                        log.warning("skipped a control message: %s", exc)
                        continue
                    if control.worker in (None, self.id):
                        await self._on_control(control)

    async def _on_control(self, control: m.Control) -> None:
        cid = control.command_id
        if control.type == "cancel":
            run = self.running.get(cid)
            reason = control.reason or "cancelled"
            if run is not None:
                self._spawn_task(self.runner.cancel(run, reason))
            elif cid not in self.outcomes:
                self.cancelled.put(cid, reason)
            return
        if control.worker != self.id or cid in self.running:
            return
        known = self.outcomes.get(cid)
        if known is not None:
            await self.pub.emit(known)
        else:
            await self.emit(self._event(RUN_INTERRUPTED, cid, None, detail="worker has no record"))

    def broker_restarted(self) -> None:
        """The broker came back empty (memory storage): what it acknowledged is gone. Send
        again (same event ids: the engine keeps one of each) the transitions and outcomes of
        the last REPUBLISH_S, and read the new events topic from its start."""
        if time.monotonic() - self._republished < 10:
            return
        self._republished = time.monotonic()
        if self.view is not None:
            self.view.topic_is_new()
        since = now_micros() - REPUBLISH_S * MICROS
        again = []
        for cid, transition in self.transitions.items():
            if transition.at >= since:
                again.append(transition)
                outcome = self.outcomes.get(cid)
                if outcome is not None:
                    again.append(outcome)
        log.warning("the broker came back empty: sending %d recent run events again", len(again))
        self._spawn_task(self._republish(again))

    async def _republish(self, events: list[m.RunEvent]) -> None:
        for event in events:
            await self.pub.emit(event)
