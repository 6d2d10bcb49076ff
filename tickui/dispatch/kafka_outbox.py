"""The engine's Kafka outbox: messages the broker has not taken yet wait here and are sent
again in the background until they are taken or their deadline passes, so a broker that
is down delays commands, never the engine."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from tickui.dispatch.kafka_link import KafkaLink, LinkDown
from tickui.dispatch.messages import RUNS_TOPIC

log = logging.getLogger("tickui.dispatch.kafka")

FLUSH_EVERY_S = 0.5
REST_S = 10.0  # the loop's look at rest: nothing waits and the broker took the last send


@dataclass
class Pending:
    """A message the broker has not taken yet; dropped once `until` (engine clock) passed."""

    topic: str
    key: bytes
    value: bytes
    until: int | None
    command_id: str


class Outbox:
    """Sends through `link`; what the broker does not take waits and is retried. Calls
    `on_refused` whenever the broker did not take something (events may be late)."""

    def __init__(self, link: KafkaLink, clock, on_refused: Callable[[], None]) -> None:
        self.link = link
        self.clock = clock
        self.on_refused = on_refused
        self._waiting: list[Pending] = []
        self._wake = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self.unsent: set[str] = set()  # run command ids dropped at their deadline, never sent
        self.send_error: str | None = None  # why the broker last failed to take a message

    def __len__(self) -> int:
        return len(self._waiting)

    def start(self) -> None:
        self._flusher = asyncio.create_task(self._flush_loop(), name="tickui-kafka-outbox")

    async def stop(self, grace: float) -> None:
        """What waits gets up to `grace` seconds (bounded) to be sent; then stop retrying."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.flush(), max(0.1, min(grace, 5.0)))
        if self._waiting:
            log.warning("%d kafka message(s) not sent at shutdown", len(self._waiting))
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._flusher
            self._flusher = None

    async def send(self, pending: list[Pending], wait: bool = False) -> None:
        """Send now; what the broker does not take waits in the outbox. While the broker
        is known to be down, nothing waits on it here (`wait`: the outbox's own retries)."""
        if self.link.down_since is not None and not wait:
            errors: list[str | None] = ["down"] * len(pending)
        else:
            try:
                errors = await self.link.send_all([(p.topic, p.key, p.value) for p in pending])
            except LinkDown:
                errors = ["down"] * len(pending)
        left = [p for p, error in zip(pending, errors, strict=True) if error is not None]
        if left:
            self.on_refused()
            said = [e for e in errors if e not in (None, "down")]
            self.send_error = said[0] if said else self.link.error or self.send_error
            self._waiting.extend(left)
            self._wake.set()

    async def flush(self) -> None:
        """Send what waits, dropping what is past its deadline (the dispatcher fails those)."""
        now = self.clock.now()
        waiting = [p for p in self._waiting if p.until is None or p.until > now]
        self.unsent.update(
            p.command_id
            for p in self._waiting
            if p.topic == RUNS_TOPIC and p.until is not None and p.until <= now
        )
        self._waiting = []
        if waiting:
            try:
                await self.send(waiting, wait=True)
            except asyncio.CancelledError:  # (shutdown's bound) still unsent: keep them
                self._waiting = waiting + self._waiting
                raise

    async def _flush_loop(self) -> None:
        """Retry what waits; while the broker is down with nothing waiting, see whether it
        is back (so the status stops saying it is down)."""
        while True:
            # at rest (nothing waits, the broker up) a send that fails wakes it
            busy = self._waiting or self.link.down_since is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 1.0 if busy else REST_S)
            self._wake.clear()
            with contextlib.suppress(Exception):
                if self._waiting:
                    await asyncio.sleep(FLUSH_EVERY_S)
                    await self.flush()
                elif self.link.down_since is not None:
                    await self.link.ready()

    def never_sent(self, command_id: str) -> bool:
        """The run command was not taken by the broker: it waits here, or was dropped."""
        waiting = any(p.command_id == command_id and p.topic == RUNS_TOPIC for p in self._waiting)
        return waiting or command_id in self.unsent

    def forget_unsent(self, keep: set[str] | None = None) -> None:
        """Forget dropped commands but those in `keep` (all of them when None)."""
        if keep is None:
            self.unsent.clear()
        else:
            self.unsent &= keep
