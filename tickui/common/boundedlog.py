"""A run's bounded log file: its first `head` bytes and newest `tail` bytes, with a marker
saying how much was dropped between them, and reading a log back.

The file is written as output arrives, so it is readable live. When the part after the
head grows past twice the tail, it is compacted in place (no extra disk space is needed,
which matters when the disk is full) to head + a marker line saying how much was dropped
+ the newest tail; `close` compacts once more, so a finished log is never larger than
head + marker + tail. A write that fails (ENOSPC, EIO, ...) drops that output, counts it
and lets the run go on; once a write succeeds again, a line in the log says how much was
lost there.

Only os, errno and unicodedata are imported as this loads (logging and redaction when
first needed, contextlib and typing not at all): the run supervisor, a small process per
run, writes its run's log with this class and must start fast.
"""

from __future__ import annotations

import errno
import os
import unicodedata

TYPE_CHECKING = False  # typing itself costs milliseconds to import
if TYPE_CHECKING:
    import logging
    from pathlib import Path


def _log() -> logging.Logger:
    import logging

    return logging.getLogger("tickui.dispatch")


TAIL_BYTES = 4096
HEAD_BYTES_DEFAULT = 64 * 1024
TAIL_BYTES_DEFAULT = 1024 * 1024
LAST_BYTES = 1024  # kept in memory: enough for the last output line of a failure
LAST_LINE_MAX = 300
_COPY_CHUNK = 1 << 20
INLINE_COMPACT = 8 << 20  # larger tails are compacted in a thread, reading paused meanwhile


def read_tail(path: str | os.PathLike[str] | None, limit: int = TAIL_BYTES) -> str:
    """The last `limit` bytes of a run's output, decoded leniently."""
    if not path:
        return ""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def human_bytes(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{count} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover


def dropped_marker(count: int) -> bytes:
    return f"\n[tickui: {human_bytes(count)} of output dropped here ({count} bytes)]\n".encode()


def lost_marker(count: int, reason: str) -> bytes:
    return f"\n[tickui: {human_bytes(count)} of output lost here: {reason}]\n".encode()


def visible(text: str) -> str:
    """Control characters shown as escapes, never sent raw to a terminal."""
    if text.isprintable():
        return text
    return "".join(
        ch if ch == "\t" or unicodedata.category(ch)[0] != "C" else ascii(ch)[1:-1] for ch in text
    )


class OutputHealth:
    """Whether run output can be written, shared by a dispatcher's logs: one warning when
    writes start failing (not one per run or per chunk), one line when they work again."""

    def __init__(self) -> None:
        self.problem: str | None = None
        self.lost = 0

    def failed(self, count: int, reason: str) -> None:
        if self.problem is None:
            _log().warning("run output cannot be written (%s); dropping it and counting", reason)
        self.problem = reason
        self.lost += count

    def recovered(self) -> None:
        if self.problem is not None:
            _log().warning(
                "run output is written again (%s dropped meanwhile)", human_bytes(self.lost)
            )
            self.problem, self.lost = None, 0


class BoundedLog:
    """One run's log file: its first `head` bytes and newest `tail` bytes, never more
    than head + marker + 2 * tail on disk while the run writes."""

    def __init__(
        self, path: Path | str, head: int, tail: int, health: OutputHealth | None = None
    ) -> None:
        self.path = path
        self.health = health or OutputHealth()
        self.head = max(0, head)
        self.tail = max(1, tail)
        self.inline = self.tail <= INLINE_COMPACT
        self.fd: int | None = os.open(
            path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600
        )
        self.size = 0  # bytes in the file, as this writer put them there
        self.body = self.head  # where the kept tail region starts (after head + marker)
        self.received = 0  # bytes of output read from the run
        self.dropped = 0  # cut from the middle to keep the bounds
        self.lost = 0  # not written because writes failed, not yet noted in the file
        self.lost_total = 0
        self.failure: str | None = None  # why writes fail now, None while they work
        self._last = b""

    # ---- writing ---------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Append a chunk of output; never raises."""
        if not data:
            return
        self.received += len(data)
        self._last = (self._last + data[-LAST_BYTES:])[-LAST_BYTES:]
        if self.fd is None:
            self._lose(len(data), "log closed")
            return
        start = None
        try:
            if self.lost:
                self._append(lost_marker(self.lost, self.failure or "write failed"))
                self.lost, self.failure = 0, None
            start = self.size
            self._append(data)
            if self.health.problem is not None:
                self.health.recovered()
        except Exception as exc:  # never let output take a run down
            kept = 0 if start is None else self.size - start
            self._lose(len(data) - kept, _reason(exc))
            return
        if self.inline and self.needs_compaction():
            self.compact()

    def needs_compaction(self) -> bool:
        return self.fd is not None and self.size - self.body > 2 * self.tail

    def _append(self, data: bytes) -> None:
        assert self.fd is not None
        view = memoryview(data)
        while view:
            written = os.pwrite(self.fd, view, self.size)
            if written <= 0:
                raise OSError(errno.EIO, "short write")
            self.size += written
            view = view[written:]

    def _lose(self, count: int, reason: str) -> None:
        self.health.failed(count, reason)
        self.failure = reason
        self.lost += count
        self.lost_total += count

    def compact(self) -> None:
        """Rewrite the file in place as head + marker + newest tail, when it holds more."""
        if self.fd is None or self.size - self.body <= self.tail:
            return
        fd = self.fd
        try:
            self.dropped += self.size - self.body - self.tail
            marker = dropped_marker(self.dropped)
            src, dst = self.size - self.tail, self.head + len(marker)
            _move(fd, src, dst, self.tail)
            os.pwrite(fd, marker, self.head)
            os.ftruncate(fd, dst + self.tail)
            self.size, self.body = dst + self.tail, dst
        except OSError as exc:
            _log().warning("compacting %s failed: %s", os.path.basename(self.path), _reason(exc))
            try:
                self.size = os.fstat(fd).st_size
                self.body = max(self.body, min(self.size, self.head))
            except OSError:
                pass

    def close(self) -> None:
        """Final compaction and close; never raises."""
        if self.fd is None:
            return
        try:
            if self.lost:
                try:
                    self._append(lost_marker(self.lost, self.failure or "write failed"))
                    self.lost, self.failure = 0, None
                except OSError:
                    pass
            self.compact()
        finally:
            fd, self.fd = self.fd, None
            _close_quietly(fd)

    # ---- reading back ----------------------------------------------------------------

    def last_line(self) -> str:
        """The last non-empty output line, redacted, visible and bounded."""
        return last_line_in(self._last)


def last_line_in(data: bytes) -> str:
    """The last non-empty line of `data`, redacted, visible and bounded."""
    lines = data.decode("utf-8", "replace").replace("\r", "\n").strip().splitlines()
    lines = [line for line in lines if line.strip()]
    if not lines:
        return ""
    from tickui.common.redact import redact  # loaded only where lines are shown

    line = visible(redact(lines[-1].strip()))
    return line if len(line) <= LAST_LINE_MAX else line[: LAST_LINE_MAX - 1] + "…"


def last_line_of(path: str | os.PathLike[str]) -> str:
    """The last non-empty line of a log file (its last LAST_BYTES), as `last_line_in`."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - LAST_BYTES))
            return last_line_in(handle.read())
    except OSError:
        return ""


def _move(fd: int, src: int, dst: int, count: int) -> None:
    """memmove within a file, in bounded chunks, safe when the ranges overlap."""
    if src == dst or count <= 0:
        return
    if dst < src:
        offsets = range(0, count, _COPY_CHUNK)
    else:
        offsets = range(((count - 1) // _COPY_CHUNK) * _COPY_CHUNK, -1, -_COPY_CHUNK)
    for off in offsets:
        size = min(_COPY_CHUNK, count - off)
        data = os.pread(fd, size, src + off)
        if len(data) != size:
            raise OSError(errno.EIO, "short read while compacting")
        view = memoryview(data)
        done = 0
        while done < size:
            done += os.pwrite(fd, view[done:], dst + off + done)


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        return


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {exc}"
