"""Run output: a bounded log file per run (tickui.common.boundedlog), fed from the run's
pipe by the event loop, and reading it back.

A run's stdout and stderr go to a pipe that the event loop reads; each chunk is written
to the run's log file at once, so the file is readable live (the dashboard tails it).
A large tail is compacted in a thread while reading pauses.
"""

from __future__ import annotations

import asyncio
import logging
import os

from tickui.common.boundedlog import (
    HEAD_BYTES_DEFAULT,
    INLINE_COMPACT,
    LAST_BYTES,
    LAST_LINE_MAX,
    TAIL_BYTES,
    TAIL_BYTES_DEFAULT,
    BoundedLog,
    OutputHealth,
    dropped_marker,
    human_bytes,
    lost_marker,
    read_tail,
    visible,
)
from tickui.common.boundedlog import _reason as _reason
from tickui.common.procs import stop_reading

log = logging.getLogger("tickui.dispatch")

__all__ = [
    "HEAD_BYTES_DEFAULT",
    "INLINE_COMPACT",
    "LAST_BYTES",
    "LAST_LINE_MAX",
    "TAIL_BYTES",
    "TAIL_BYTES_DEFAULT",
    "BoundedLog",
    "OutputHealth",
    "OutputPump",
    "dropped_marker",
    "human_bytes",
    "lost_marker",
    "read_tail",
    "visible",
]

_READ_CHUNK = 1 << 16
_READS_PER_WAKEUP = 16


class OutputPump:
    """Reads a run's pipe in the event loop and feeds its BoundedLog. A large tail is
    compacted in a thread while reading pauses (the run then waits on its full pipe)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, sink: BoundedLog) -> None:
        self.loop = loop
        self.fd: int | None = fd
        self.sink = sink
        self._compacting: asyncio.Task[None] | None = None
        self._finishing = False
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            self._read(_READS_PER_WAKEUP)
        except Exception:
            log.exception("reading output of %s failed", self.sink.path.name)
            self._close()
        if self.fd is not None and self._compacting is None and self.sink.needs_compaction():
            self.loop.remove_reader(self.fd)
            self._compacting = self.loop.create_task(self._compact())

    async def _compact(self) -> None:
        try:
            await asyncio.to_thread(self.sink.compact)
        except Exception:
            log.exception("compacting %s failed", self.sink.path.name)
        finally:
            self._compacting = None
            if self.fd is not None and not self._finishing:
                self.loop.add_reader(self.fd, self._readable)

    def _read(self, reads: int) -> bool:
        """Read what is there (up to `reads` chunks); True once the pipe is at its end."""
        for _ in range(reads):
            if self.fd is None:
                return True
            try:
                data = os.read(self.fd, _READ_CHUNK)
            except BlockingIOError:
                return False
            except InterruptedError:
                continue
            except OSError as exc:
                log.warning("output of %s unreadable: %s", self.sink.path.name, _reason(exc))
                self._close()
                return True
            if not data:
                self._close()
                return True
            self.sink.write(data)
        return False

    async def finish(self, limit: int = 4 << 20) -> None:
        """The run's process has ended: take what is left in the pipe (bounded, for a
        descendant that still writes), then stop reading and close the log. Never raises
        (but may be cancelled)."""
        self._finishing = True
        try:
            if self._compacting is not None:
                await self._compacting
            self._read(max(1, limit // _READ_CHUNK))
        except Exception:
            log.exception("reading output of %s failed", self.sink.path.name)
        finally:
            self._close()
        if self.sink.inline:
            self.sink.close()
        else:
            await asyncio.to_thread(self.sink.close)

    def _close(self) -> None:
        fd, self.fd = self.fd, None
        stop_reading(self.loop, fd)
