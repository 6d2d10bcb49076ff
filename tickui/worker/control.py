"""A worker's answers to the control topic: cancel a run (or a command not here yet),
resend an outcome the engine did not hear, and note when the engine says a run is due
(the worker polls fast around it). Only signed messages for this worker (or for any
worker) are believed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from tickui.common.kafka import FETCHER_LOOK_MS, describe
from tickui.dispatch import messages as m
from tickui.dispatch.refusals import Refusals
from tickui.dispatch.signing import Keyring
from tickui.worker.reports import RunReports
from tickui.worker.runs import RunSupervisor

log = logging.getLogger("tickui.worker")


class ControlReader:
    """Reads the control topic from its end as of `open` (earlier controls are the past)."""

    def __init__(
        self,
        worker_id: str,
        keyring: Keyring,
        refusals: Refusals,
        runs: RunSupervisor,
        reports: RunReports,
    ) -> None:
        self.worker_id = worker_id
        self.keyring = keyring
        self.refusals = refusals
        self.runs = runs
        self.reports = reports
        self.consumer: Any = None
        # the instant a run is due (micros) and the runs topic's partitions (() for any)
        self.on_due: Callable[[int, tuple[int, ...]], None] | None = None

    async def open(self, consumer: Any) -> None:
        """Read from `consumer` (started), every partition, from the end as of now."""
        from aiokafka import TopicPartition

        self.consumer = consumer
        await consumer.topics()
        parts = consumer.partitions_for_topic(m.CONTROL_TOPIC) or range(m.DEFAULT_PARTITIONS)
        tps = [TopicPartition(m.CONTROL_TOPIC, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        for tp in tps:
            await consumer.position(tp)  # resolved now: later controls are seen

    async def read(self) -> None:
        while True:
            try:
                batch = await self.consumer.getmany(timeout_ms=FETCHER_LOOK_MS)
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
                    if control.worker in (None, self.worker_id):
                        await self._on_control(control)

    async def _on_control(self, control: m.Control) -> None:
        cid = control.command_id
        if control.type == "due":
            if self.on_due is not None:
                self.on_due(control.due, control.partitions)
            return
        if control.type == "cancel":
            self.runs.cancel(cid, control.reason or "cancelled")
            return
        if control.worker != self.worker_id or cid in self.runs.running:
            return
        await self.reports.resend(cid)
