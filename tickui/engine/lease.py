"""This engine's hold on the engine lease, and the fence asked before every start.

The store's lease row says who may claim; `LeaseKeeper` says whether this engine may
start a process at this instant. Its deadline is a reading of the clock's monotonic
time, so a pause (SIGSTOP, a suspended laptop, a stalled loop) cannot fool it the way a
`now` taken before the pause could, and after a pause longer than the renew interval
the store must confirm the lease before anything starts.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from tickui.common import procs
from tickui.common.clock import Clock
from tickui.common.faults import fault_text
from tickui.common.timeutil import MICROS
from tickui.model.coordination import Lease
from tickui.store import Store

log = logging.getLogger("tickui.engine")


class LeaseKeeper:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        owner: str,
        ttl: int,
        on_confirmed: Callable[[float, float], None] | None = None,
    ) -> None:
        self.store = store
        # told (time.monotonic() of the ask, TTL in seconds) each time the store grants
        # the lease: the dispatcher fences this host's runs by it
        self.on_confirmed = on_confirmed
        self.clock = clock
        self.owner = owner
        self.base_ttl = ttl  # engine-clock microseconds at scale 1
        self.identity = (procs.host(), os.getpid(), procs.start_ticks(os.getpid()))
        self.token: int | None = None
        self.renew_at = 0
        self.seen: Lease | None = None  # the lease row as last read (ours or the holder's)
        self.state = "none"  # held | standby | none
        self.was_standby = False
        self.deadline = 0.0  # monotonic time after which this engine may start nothing
        self.confirmed = 0.0  # monotonic time the store last confirmed the lease

    @property
    def ttl(self) -> int:
        """The lease's length in engine time: scaled, so a time-lapse keeps it."""
        return round(self.base_ttl * self.clock.scale)

    async def hold(self, now: int) -> tuple[bool, bool]:
        """Take or renew the lease when due: (held, newly taken under a new token)."""
        if self.token is not None and now < self.renew_at:
            return True, False
        ttl = self.ttl
        asked, real = self.clock.monotonic(), time.monotonic()
        result = await self.store.acquire_lease(self.owner, now, ttl, self.identity, holder_gone)
        self.seen = result.lease
        if not result.held:
            if self.token is not None:
                log.warning("lost the lease to %s", result.lease.owner if result.lease else "?")
            self.token, self.state, self.was_standby = None, "standby", True
            return False, False
        assert result.lease is not None
        self.token, self.state = result.lease.token, "held"
        self.renew_at = now + ttl // 2
        self._confirmed(asked, ttl, real)
        if result.new:
            log.info("holding the lease (token %s)", self.token)
        return True, result.new

    def lost(self) -> None:
        self.token, self.state = None, "standby"

    async def release(self) -> None:
        """Give the lease up (at stop), so a standby takes over at once."""
        token, self.token = self.token, None
        if token is not None:
            await self.store.release_lease(self.owner, token, self.clock.now())
        self.seen, self.state, self.renew_at = None, "none", 0

    def _confirmed(self, asked: float, ttl: int, real: float) -> None:
        """The store granted the lease for `ttl` from no earlier than `asked` (the clock's
        monotonic; `real`: time.monotonic() then). Stop starting runs a little before it
        lapses, so a standby never overlaps; runs started are fenced before it lapses."""
        margin = min(ttl / 10, self.clock.scale * MICROS) / MICROS
        self.deadline = asked + ttl / MICROS - margin
        self.confirmed = asked
        if self.on_confirmed is not None:
            try:
                self.on_confirmed(real, self.base_ttl / MICROS)  # TTL in real seconds
            except Exception:
                log.exception("renewing the runs' lease failed")

    async def may_start(self) -> bool:
        """Whether a process may start at this instant: the lease is held by the monotonic
        clock and by the wall clock; after a pause longer than the renew interval, only
        once the store has confirmed it. Asked by the dispatcher just before each start."""
        if self.token is None or self.seen is None:
            return False
        mono = self.clock.monotonic()
        if mono >= self.deadline or self.clock.now() >= self.seen.expires_at:
            log.warning("the lease lapsed (a pause?); starting nothing until it is renewed")
            self.token, self.state = None, "none"
            return False
        if mono - self.confirmed <= self.ttl / 2 / MICROS:
            return True
        ttl, now, real = self.ttl, self.clock.now(), time.monotonic()
        try:
            expires = await self.store.renew_lease(self.owner, self.token, now, ttl)
        except Exception as exc:
            log.warning("cannot confirm the lease before starting a run: %s", fault_text(exc))
            return False
        if expires is None:
            log.warning("lease lost while paused; starting nothing more")
            self.lost()
            return False
        self.seen.expires_at = expires
        self.renew_at = now + ttl // 2
        self._confirmed(mono, ttl, real)
        return True


def holder_gone(host: str | None, pid: int | None, pid_start: int | None) -> bool:
    """A holder on this host whose process is gone cannot renew: no need to wait out its TTL."""
    return host == procs.host() and pid is not None and not procs.alive(pid, pid_start)
