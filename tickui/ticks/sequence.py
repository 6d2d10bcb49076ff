"""Tick sequence numbers that never go backwards, also across a kill -9.

Numbers are reserved in blocks ahead of use (an UPDATE in SQLite, a script doing
max-then-add in Valkey) and handed out of the reserved block; a crash leaves a gap,
never a repeat. A store that cannot be reached is retried with backoff while the
ticker goes on counting in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from tickui.common.checks import is_store_url
from tickui.common.redact import redact

log = logging.getLogger("tickui.sequence")
BACKOFF_MIN, BACKOFF_MAX = 0.5, 30.0


class SequenceStoreError(Exception):
    pass


class SequenceStore(Protocol):
    name: str

    async def reserve(self, key: str, floor: int, block: int) -> int:
        """Raise the stored value to max(stored, floor) + block and return it."""

    async def release(self, key: str, expected: int, value: int) -> None:
        """Lower the stored value to `value` only if it is still `expected` (clean stop)."""

    async def close(self) -> None: ...


class SqliteSequenceStore:
    """The sequence kept in tickui's store: a SQLite file or a PostgreSQL database."""

    name = "sqlite"

    def __init__(self, store) -> None:
        self._store = store
        if is_store_url(str(store.where)):
            self.name = "postgresql"

    async def reserve(self, key: str, floor: int, block: int) -> int:
        try:
            return await self._store.reserve_sequence(key, floor, block)
        except Exception as exc:
            raise SequenceStoreError(f"{self.name}: {exc}") from exc

    async def release(self, key: str, expected: int, value: int) -> None:
        await self._store.release_sequence(key, expected, value)

    async def close(self) -> None:
        return None


_RESERVE = """
local stored = tonumber(redis.call('GET', KEYS[1]) or '0')
local floor = tonumber(ARGV[1])
if stored < floor then stored = floor end
local high = stored + tonumber(ARGV[2])
redis.call('SET', KEYS[1], high)
return high
"""
_RELEASE = """
if tonumber(redis.call('GET', KEYS[1]) or '-1') == tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[2])
end
return 1
"""


class ValkeySequenceStore:
    """Valkey or Redis through redis.asyncio, failing fast: tickui does its own backoff."""

    name = "valkey"

    def __init__(
        self,
        url: str,
        timeout: float = 1.0,
        retries: int = 0,
        *,
        ssl_cafile: str | None = None,
        password: str | None = None,
    ) -> None:
        """`rediss://` URLs speak TLS, trusting `ssl_cafile` (else the system's CAs);
        `password` (with the URL's user name, for an ACL user) beats the URL's."""
        from redis.asyncio import Redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.url = url
        extra: dict[str, object] = {}
        if password is not None:
            extra["password"] = password
        if url.startswith("rediss://") and ssl_cafile:
            extra["ssl_ca_certs"] = ssl_cafile
        self._client = Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), retries),
            retry_on_timeout=False,
            **extra,
        )

    async def reserve(self, key: str, floor: int, block: int) -> int:
        try:
            return int(await self._client.eval(_RESERVE, 1, key, floor, block))
        except Exception as exc:
            raise SequenceStoreError(redact(f"valkey {self.url}: {exc}")) from exc

    async def release(self, key: str, expected: int, value: int) -> None:
        try:
            await self._client.eval(_RELEASE, 1, key, expected, value)
        except Exception as exc:
            raise SequenceStoreError(redact(f"valkey {self.url}: {exc}")) from exc

    async def close(self) -> None:
        try:
            await self._client.aclose()
        except Exception:
            log.debug("closing the valkey client failed", exc_info=True)


class SequenceAllocator:
    """Hands out 1, 2, 3, ... from blocks reserved ahead in a SequenceStore."""

    def __init__(self, store: SequenceStore | None, key: str, block: int) -> None:
        self.store = store
        self.key = key
        self.block = max(1, block)
        self.current = 0
        self.reserved = 0  # the stored high-water mark: every number up to it is ours
        self.state = "off" if store is None else "starting"
        self.error: str | None = None
        self._refill: asyncio.Task[None] | None = None
        self._retry_at = 0.0
        self._backoff = BACKOFF_MIN

    @property
    def persisted(self) -> bool:
        """Whether the numbers handed out so far are all covered by a stored reservation."""
        return self.store is not None and self.current <= self.reserved

    async def start(self, mono: float) -> None:
        if self.store is not None:
            await self._reserve(mono)

    def next(self, mono: float) -> int:
        """The next number; schedules a reservation in the background when running low."""
        self.current += 1
        low = self.store is not None and self.reserved - self.current <= self.block // 2
        idle = self._refill is None or self._refill.done()
        if low and idle and mono >= self._retry_at:
            self._refill = asyncio.create_task(self._reserve(mono))
        return self.current

    async def _reserve(self, mono: float) -> None:
        assert self.store is not None
        try:
            high = await self.store.reserve(self.key, max(self.current, self.reserved), self.block)
        except SequenceStoreError as exc:
            if self.state != "unreachable":
                log.warning("sequence store unreachable, counting in memory: %s", exc)
            self.state, self.error = "unreachable", str(exc)
            self._retry_at = mono + self._backoff
            self._backoff = min(BACKOFF_MAX, self._backoff * 2)
            return
        if self.state == "unreachable":
            log.info("sequence store is back; persisting from %d", high)
        base = high - self.block  # max(stored, floor): what we asked for came after it
        if base > max(self.current, self.reserved):
            self.current = base  # the stored value was ahead of us: never reuse its numbers
        self.reserved = high
        self.state, self.error = "ok", None
        self._backoff = BACKOFF_MIN

    async def close(self) -> None:
        """Wait for a reservation in flight, then give back the unused part of the block."""
        if self._refill is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._refill), 2.0)
        if self.store is None:
            return
        if self.state == "ok" and self.current <= self.reserved:
            try:
                await self.store.release(self.key, self.reserved, self.current)
                self.reserved = self.current
            except SequenceStoreError as exc:
                log.warning("could not give back unused sequence numbers: %s", exc)
        await self.store.close()
