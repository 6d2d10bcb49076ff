"""A worker's heartbeat: who it is, its slots, what it runs, its state and what it refused,
every 2 s on the workers topic. Its offsets also tell when the broker came back empty."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable

from tickui import __version__
from tickui.common.kafka import describe
from tickui.common.timeutil import MICROS
from tickui.dispatch import messages as m
from tickui.dispatch.refusals import Refusals
from tickui.dispatch.signing import Keyring
from tickui.worker.publisher import Publisher
from tickui.worker.reports import now_micros
from tickui.worker.runs import RunSupervisor

log = logging.getLogger("tickui.worker")


class Heartbeats:
    """Heartbeats of one worker; `state` is what the next one says (alive, draining,
    drained). `on_restart` is called when the broker is found to have come back empty."""

    def __init__(
        self,
        worker_id: str,
        host: str,
        slots: int,
        group: str,
        log_dir: str,
        started_at: float,
        runs: RunSupervisor,
        refusals: Refusals,
        keyring: Keyring,
        pub: Publisher,
        on_restart: Callable[[], None],
    ) -> None:
        self.worker_id = worker_id
        self.host = host
        self.slots = slots
        self.group = group
        self.log_dir = log_dir
        self.started_at = started_at  # time.time() as the worker started: its boot
        self.runs = runs
        self.refusals = refusals
        self.keyring = keyring
        self.pub = pub
        self.on_restart = on_restart
        self.state = "alive"
        self.due: Callable[[], int] = lambda: 0  # the announced due instant it waits for
        self._last_beat = -1  # offset of the last heartbeat the broker took
        self._beating = asyncio.Lock()
        self._count = itertools.count(1)  # each heartbeat's count (its order, with the start)

    async def beat(self) -> bool:
        asked = time.monotonic()
        beat = m.Heartbeat(
            worker=self.worker_id,
            host=self.host,
            slots=self.slots,
            running=tuple(self.runs.running),
            version=__version__,
            at=now_micros(),
            state=self.state,
            group=self.group,
            log_dir=self.log_dir,
            refused=self.refusals.snapshot(),
            insecure=self.keyring.insecure,
            boot=int(self.started_at * MICROS),
            seq=next(self._count),
            due=self.due(),
        )
        try:
            async with self._beating:  # one at a time: their offsets are compared
                meta = await self.pub.send(m.WORKERS_TOPIC, self.worker_id, beat.encode())
        except Exception as exc:
            log.debug("heartbeat not sent: %s", describe(exc))
            return False
        # Offsets only grow in a topic that lives: a heartbeat (always the same partition,
        # its key is the worker id) below the last one means the broker came back empty.
        if meta.offset < self._last_beat:
            self.on_restart()
        self._last_beat = meta.offset
        self.runs.heard(asked)  # the broker has it: the engine hears this worker
        return True

    async def keep_beating(self) -> None:
        """Every 2 s; every 0.5 s while the broker is away, so a broker back empty is seen
        soon (its lost events are sent again before the engine gives up on them)."""
        while True:
            sent = await self.beat()
            await asyncio.sleep(m.HEARTBEAT_EVERY_S if sent else 0.5)
