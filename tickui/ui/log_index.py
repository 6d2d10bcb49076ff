"""The index of a run's log file, apart from any view of it (as Toolong keeps its log file
apart from the widget): for every 64 KiB block, how many newlines come before it, a few KiB
for a 200 MB file. It is built and extended in a thread, a slice at a time, so the first
lines show at once and the line count grows while the rest is read; a line is found by
reading its one block; search reads the file in chunks. Nothing here holds the file."""

from __future__ import annotations

import os
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from dataclasses import dataclass
from itertools import accumulate

from tickui.common.redact import safe_text

BLOCK = 1 << 16  # the index keeps one count per block
SCAN_SLICE = 16 << 20  # bytes indexed per step of the worker (then the view updates)
READ_CHUNK = 1 << 20
MAX_LINE_BYTES = 16 * 1024  # shown of one line; a longer one ends in "…" (`o` shows it all)
BLOCK_CACHE = 8
PROBE = 64  # bytes re-read before extending the index, to notice a rewritten file


# ---- the index ------------------------------------------------------------------------


@dataclass
class Scan:
    """What one step of indexing found: block counts to append, totals after it."""

    entries: list[int]
    newlines: int
    size: int
    last: bytes
    reset: bool = False


class Blocks:
    """Blocks of the file and where lines start in each, a few kept (one per thread)."""

    def __init__(self, keep: int = BLOCK_CACHE) -> None:
        self.keep = keep
        self.cache: OrderedDict[int, tuple[bytes, array]] = OrderedDict()

    def get(self, fd: int, block: int, size: int) -> tuple[bytes, array]:
        found = self.cache.get(block)
        if found is not None and len(found[0]) == min(BLOCK, size - block * BLOCK):
            self.cache.move_to_end(block)
            return found
        data = os.pread(fd, max(0, min(BLOCK, size - block * BLOCK)), block * BLOCK)
        # starts[i]: offset in the block just after its (i+1)-th newline
        starts = array("I", accumulate(len(part) + 1 for part in data.split(b"\n")[:-1]))
        self.cache[block] = (data, starts)
        self.cache.move_to_end(block)
        while len(self.cache) > self.keep:
            self.cache.popitem(last=False)
        return data, starts

    def clear(self) -> None:
        self.cache.clear()


class LineIndex:
    """Where each line of a file starts, from one newline count per 64 KiB block."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.before = array("q", [0])  # before[b]: newlines in bytes [0, b * BLOCK)
        self.size = 0  # bytes indexed
        self.newlines = 0
        self.last = b""  # the last PROBE bytes indexed
        self.blocks = Blocks()

    @property
    def lines(self) -> int:
        if self.size == 0:
            return 0
        return self.newlines + (0 if self.last.endswith(b"\n") else 1)

    # -- indexing (the scan runs in a thread; apply runs on the loop) --

    def scan(self, limit: int = SCAN_SLICE) -> Scan | None:
        """Index up to `limit` more bytes; None when the file has not changed."""
        size = os.fstat(self.fd).st_size
        start, newlines, reset = self.size, self.newlines, False
        if size < start or (
            start and os.pread(self.fd, len(self.last), start - len(self.last)) != self.last
        ):
            start, newlines, reset = 0, 0, True  # truncated or rewritten (compacted): again
        if size == start and not reset:
            return None
        end = min(size, start + limit)
        entries: list[int] = []
        pos = start
        last = b"" if reset else self.last
        while pos < end:
            chunk = os.pread(self.fd, min(READ_CHUNK, end - pos), pos)
            if not chunk:
                break
            off = 0
            while off < len(chunk):
                boundary = (pos // BLOCK + 1) * BLOCK
                take = min(len(chunk) - off, boundary - pos)
                newlines += chunk.count(b"\n", off, off + take)
                pos += take
                off += take
                if pos == boundary:
                    entries.append(newlines)
            last = (last + chunk[-PROBE:])[-PROBE:]
        return Scan(entries, newlines, pos, last, reset)

    def apply(self, step: Scan) -> None:
        if step.reset:
            self.before = array("q", [0])
            self.blocks.clear()
        else:
            for block in [b for b in self.blocks.cache if b >= self.size // BLOCK]:
                del self.blocks.cache[block]  # the last block grew
        self.before.extend(step.entries)
        self.newlines, self.size, self.last = step.newlines, step.size, step.last

    # -- reading --

    def start_of(self, line: int, blocks: Blocks | None = None) -> int:
        """Byte offset where `line` (0-based) starts; the indexed size past the last one."""
        if line <= 0:
            return 0
        if line > self.newlines:
            return self.size
        block = bisect_left(self.before, line) - 1
        _, starts = (blocks or self.blocks).get(self.fd, block, self.size)
        return block * BLOCK + starts[line - self.before[block] - 1]

    def line_at(self, offset: int, blocks: Blocks | None = None) -> int:
        """The line holding byte `offset`."""
        block = min(offset // BLOCK, len(self.before) - 1)
        _, starts = (blocks or self.blocks).get(self.fd, block, self.size)
        return self.before[block] + bisect_right(starts, offset - block * BLOCK)

    def raw(self, line: int, blocks: Blocks | None = None) -> tuple[bytes, bool]:
        """A line's bytes (at most MAX_LINE_BYTES) and whether it was cut."""
        start = self.start_of(line, blocks)
        end = self.start_of(line + 1, blocks) if line < self.newlines else self.size
        if line < self.newlines:
            end -= 1  # its newline
        length = max(0, end - start)
        data = os.pread(self.fd, min(length, MAX_LINE_BYTES), start)
        return data, length > MAX_LINE_BYTES

    def text(self, line: int, blocks: Blocks | None = None) -> str:
        data, cut = self.raw(line, blocks)
        text = data.decode("utf-8", "replace").rstrip("\r").expandtabs(8)
        shown = safe_text(text)
        return shown + " …" if cut else shown

    def search(self, query: str, line: int, forward: bool) -> int | None:
        """The next line (after `line`, or before it) whose shown text holds `query`.
        Case-insensitive unless the query has capitals. Runs in a thread."""
        fold = query == query.lower()
        needle = (query.lower() if fold else query).encode()
        if not needle:
            return None
        blocks = Blocks(2)
        size = self.size
        overlap = len(needle) - 1

        def shown(n: int) -> bool:
            text = self.text(n, blocks)
            return query in (text.lower() if fold else text)

        if forward:
            pos = self.start_of(line + 1, blocks)
            while pos < size:
                chunk = os.pread(self.fd, min(READ_CHUNK, size - pos), pos)
                if not chunk:
                    return None
                hit = (chunk.lower() if fold else chunk).find(needle)
                if hit < 0:
                    if pos + len(chunk) >= size:
                        return None
                    pos += max(1, len(chunk) - overlap)
                    continue
                found = self.line_at(pos + hit, blocks)
                if shown(found):
                    return found
                pos = max(pos + hit + 1, self.start_of(found + 1, blocks))
            return None
        end = self.start_of(line, blocks)
        while end > 0:
            begin = max(0, end - READ_CHUNK)
            chunk = os.pread(self.fd, end - begin, begin)
            hit = (chunk.lower() if fold else chunk).rfind(needle)
            if hit < 0:
                if begin == 0:
                    return None
                end = begin + overlap
                continue
            found = self.line_at(begin + hit, blocks)
            if shown(found):
                return found
            end = min(begin + hit + len(needle) - 1, self.start_of(found, blocks))
        return None


# ---- the view -------------------------------------------------------------------------
