"""The index of a run's log file, apart from any view of it (as Toolong keeps its log file
apart from the widget): for every 64 KiB block, how many newlines come before it, a few KiB
for a 200 MB file. It is built and extended in a thread, a slice at a time, so the first
lines show at once and the line count grows while the rest is read; a line is found by
reading its one block; search reads the file in chunks. Nothing here holds the file."""

from __future__ import annotations

import heapq
import os
import re
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate
from typing import AnyStr

from rich.text import Text

from tickui.common.redact import MASK, secret_markers
from tickui.ui.view.ansi import shown_line, shown_visible, without_sgr

BLOCK = 1 << 16  # the index keeps one count per block
SCAN_SLICE = 16 << 20  # bytes indexed per step of the worker (then the view updates)
READ_CHUNK = 1 << 20
SEARCH_SLICE = 16 << 20  # bytes searched per step of counting matches
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

    def shown(self, line: int, blocks: Blocks | None = None) -> Text:
        """A line as the view shows it (`ansi.shown_line`: coloured, made safe)."""
        data, cut = self.raw(line, blocks)
        shown = shown_line(data.decode("utf-8", "replace"))
        if cut:
            shown.append(" …")
        return shown

    def text(self, line: int, blocks: Blocks | None = None) -> str:
        """A line's shown text, without its styles."""
        return self.shown(line, blocks).plain

    # -- search (runs in a thread; reads the file in chunks cut at line ends) --

    def _chunks(self, start: int, end: int, line: int) -> Iterator[tuple[int, bytes, int]]:
        """Bytes [start, end) in chunks of whole lines: (first line, bytes, byte offset
        after them). `start` is where `line` starts."""
        pos = start
        while pos < end:
            data = os.pread(self.fd, min(READ_CHUNK, end - pos), pos)
            if not data:
                return
            if pos + len(data) < self.size:  # more follows: end at a line's end
                cut = data.rfind(b"\n") + 1
                if cut:
                    data = data[:cut]
                elif len(data) < READ_CHUNK:
                    return  # the range ends inside a line: the next slice reads it whole
            yield line, data, pos + len(data)
            line += data.count(b"\n")
            pos += len(data)

    def find(self, search: Search, line: int, forward: bool, stop: int | None = None) -> int | None:
        """The next matching line after `line` (or the last one before it), not past line
        `stop` (forward: up to and with it; backward: down to it), without wrapping. Runs
        in a thread."""
        blocks = Blocks(2)
        if forward:
            first = max(0, line + 1)
            end = self.start_of(stop + 1, blocks) if stop is not None else self.size
            for at, data, _ in self._chunks(self.start_of(first, blocks), end, first):
                found = next(_lines_matching(search, data, at), None)
                if found is not None:
                    return found
            return None
        floor = self.start_of(stop, blocks) if stop is not None else 0
        end = self.start_of(line, blocks)
        while end > floor:
            begin = max(floor, end - READ_CHUNK)
            if begin > floor:  # from the start of a line
                head = os.pread(self.fd, min(MAX_LINE_BYTES, end - begin), begin)
                cut = head.find(b"\n") + 1
                begin = begin + cut if cut else begin
            at = self.line_at(begin, blocks) if begin else 0
            hits = [hit for _, data, _ in self._chunks(begin, end, at)
                    for hit in _candidates(search, data, at)]  # fmt: skip
            for found, raw in reversed(hits):  # the last first: most are never made safe
                if _shown_match(search, raw):
                    return found
            end = begin
        return None

    def find_wrapping(self, search: Search, line: int, forward: bool) -> tuple[int | None, bool]:
        """The next match from `line`, else the first from the other end back to `line` (as
        less does; a single match finds itself), and whether it wrapped. Runs in a thread."""
        found = self.find(search, line, forward)
        if found is not None:
            return found, False
        return self.find(search, -1 if forward else self.lines, forward, stop=line), True

    def count(
        self, search: Search, line: int, limit: int = SEARCH_SLICE, most: int | None = None
    ) -> Counted:
        """The matching lines from `line` on, up to about `limit` bytes of the indexed file
        or `most` lines found. Runs in a thread, one slice at a time (as the index is
        built)."""
        start = self.start_of(line, Blocks(2))
        end = min(self.size, start + limit)
        found: list[int] = []
        reached = start
        for first, data, after in self._chunks(start, end, line):
            for hit in _lines_matching(search, data, first):
                found.append(hit)
                if most is not None and len(found) >= most:
                    return Counted(found, hit + 1, False)
            line, reached = first + data.count(b"\n"), after
        return Counted(found, line, reached >= self.size)


@dataclass
class Counted:
    """One slice of counting matches: the lines found and the line to go on from."""

    lines: list[int]
    next_line: int
    done: bool


# ---- what a search matches ------------------------------------------------------------

REGEX_PREFIX = "re:"  # `/re:…` searches for a regular expression


@dataclass(frozen=True)
class Search:
    """A search as typed, and the regular expression it means: plain text unless it
    starts with `re:`; smart case as in less and vim (a lowercase pattern ignores case,
    any capital makes it case-sensitive)."""

    typed: str
    regex: re.Pattern[str]

    @property
    def needle(self) -> bytes | None:
        """Plain text as bytes, looked for with bytes.find (lowercased when case is
        ignored): many times faster than the expression over decoded text. None for a
        regular expression, text whose case ASCII cannot fold, or a U+FFFD (shown for bytes
        that are not UTF-8, so found only in the decoded text)."""
        if self.typed.startswith(REGEX_PREFIX) or "\ufffd" in self.typed:
            return None
        text = self.typed
        if self.case_sensitive:
            return text.encode()
        return text.lower().encode() if text.isascii() else None

    @classmethod
    def parse(cls, typed: str) -> Search:
        """Raises ValueError (saying why) for an empty pattern or a bad expression."""
        is_regex = typed.startswith(REGEX_PREFIX)
        body = typed.removeprefix(REGEX_PREFIX) if is_regex else typed
        if not body:
            raise ValueError("nothing to search for")
        # an escape such as \S or \W is not a capital the user typed
        letters = re.sub(r"\\.", "", body) if is_regex else body
        flags = re.MULTILINE | (0 if letters != letters.lower() else re.IGNORECASE)
        try:
            return cls(typed, re.compile(body if is_regex else re.escape(body), flags))
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None

    @property
    def case_sensitive(self) -> bool:
        return not self.regex.flags & re.IGNORECASE

    def ignoring_case(self) -> Search:
        """The same pattern ignoring case: a capitalised word found nowhere as typed
        (`DONE` in a log that says "done") is looked for again this way."""
        return Search(self.typed, re.compile(self.regex.pattern, self.regex.flags | re.IGNORECASE))

    def matches(self, shown: str) -> bool:
        return self.regex.search(shown) is not None


def _lines_matching(search: Search, data: bytes, first: int) -> Iterator[int]:
    """Lines of `data` (whole lines from line `first`) matching as the view shows them."""
    for line, raw in _candidates(search, data, first):
        if _shown_match(search, raw):
            yield line


def _shown_match(search: Search, raw: str) -> bool:
    """A candidate line (from `_candidates`: its SGR sequences taken out) checked as the
    view shows it: made safe, so `***` finds a hidden
    secret and `\\x1b` an escape, and the secret itself is never found; a colour's SGR
    sequence is not text, so it is never found either."""
    return search.matches(shown_visible(raw))


# What the view shows differently from the bytes, besides hidden secrets: control bytes
# (escaped; a tab expanded, a `\r` dropped) and the first byte of every UTF-8 character
# printable escapes or redact may take for a space (C1 controls, U+00A0: 0xc2; invisible
# formatting characters and wide spaces: 0xe2; U+FEFF: 0xef), marked 0 by this table.
_CHANGED_BYTES = bytes([*range(0x0A), *range(0x0B, 0x20), 0x7F, 0xC2, 0xE2, 0xEF])
_MARK = bytes(0 if b in _CHANGED_BYTES else 10 if b == 10 else 1 for b in range(256))


def _candidates(search: Search, data: bytes, first: int) -> Iterator[tuple[int, str]]:
    """The lines of `data` (whole lines from line `first`) that may match as shown, with
    their raw text: where the raw text matches (plain text found in the bytes, an
    expression in the decoded text), and where the view shows the line changed in a way
    the search could see: escaped or spaced (control and invisible characters), or with
    a secret hidden when the search can match its `***`. A colour's SGR sequence is not
    shown: it is taken out of `data` first (a line of coloured text is then looked at only
    where its text matches).

    A match in the shown line that touches none of those changes lies in text the line
    has as it is, so the raw text matches there too."""
    data = without_sgr(data)
    needle = search.needle
    # plain text without a `*` can never match in a `***`
    masks = needle is None or MASK[0].encode() in needle
    lowered = data.lower() if masks or not search.case_sensitive else b""
    changed = [_finds(data.translate(_MARK), b"\0")]
    if masks:
        changed += [_finds(lowered, marker.encode().lower()) for marker in secret_markers()]
    if needle is not None:  # in bytes: hits and changes at the same offsets
        hits = _finds(lowered if not search.case_sensitive else data, needle)
        yield from _lines_at(data, first, heapq.merge(hits, *changed))
        return
    text = data.decode("utf-8", "replace")
    lines = text.split("\n")
    found = _line_numbers(text, (hit.start() for hit in search.regex.finditer(text)))
    for line in _unique(heapq.merge(found, _line_numbers(data, heapq.merge(*changed)))):
        yield first + line, lines[line]


def _lines_at(data: bytes, first: int, offsets: Iterator[int]) -> Iterator[tuple[int, str]]:
    """The lines holding ascending byte `offsets` of `data`, each once: (number, text)."""
    line, counted, skip_to = first, 0, 0
    for at in offsets:
        if at < skip_to:
            continue
        line += data.count(b"\n", counted, at)
        begin = data.rfind(b"\n", 0, at) + 1
        end = data.find(b"\n", at)
        end = len(data) if end < 0 else end
        counted = skip_to = end
        yield line, data[begin:end].decode("utf-8", "replace")


def _line_numbers(text: AnyStr, offsets: Iterator[int]) -> Iterator[int]:
    """The line (from 0) of each of ascending `offsets` in `text`."""
    newline = "\n" if isinstance(text, str) else b"\n"
    line, counted = 0, 0
    for at in offsets:
        line += text.count(newline, counted, at)  # type: ignore[arg-type]
        counted = max(counted, at)
        yield line


def _unique(lines: Iterator[int]) -> Iterator[int]:
    last = -1
    for line in lines:
        if line != last:
            yield line
            last = line


def _finds(data: bytes, needle: bytes) -> Iterator[int]:
    """Where `needle` is first in each line of `data` holding it."""
    at = data.find(needle)
    while at >= 0:
        yield at
        at = data.find(needle, data.find(b"\n", at) + 1 or len(data))
