"""One run: its facts and its whole output, in a view that reads the log in windows.

The log may be large (a bounded run log is head + marker + tail, but the view also opens
any file a run points at), so nothing here holds the file. `LineIndex` keeps, for every
64 KiB block, how many newlines come before it: a few KiB for a 200 MB file. It is built
and extended in a thread, a slice at a time, so the first lines show at once and the
line count grows while the rest is read. A line is found by reading its one block; the
view (a `ScrollView` drawing with `render_line`, as Toolong does) asks only for the
lines on screen and keeps a small cache of them. Search reads the file in chunks in a
thread. Every line shown goes through `safe_text`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import stat
import tempfile
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, tzinfo
from itertools import accumulate

from rich.cells import cell_len
from rich.console import Group
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult, SuspendNotSupported
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.screen import Screen
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Footer, Input, Static

from tickui.dispatch.output import human_bytes
from tickui.models import Occurrence, RemoteOutput
from tickui.redact import safe_text
from tickui.ui.cells import (
    STATE_STYLE,
    attempt_text,
    detail_text,
    duration,
    lateness,
    outcome_code,
    stamp_in,
)

BLOCK = 1 << 16  # the index keeps one count per block
SCAN_SLICE = 16 << 20  # bytes indexed per step of the worker (then the view updates)
READ_CHUNK = 1 << 20
MAX_LINE_BYTES = 16 * 1024  # shown of one line; a longer one ends in "…" (`o` shows it all)
BLOCK_CACHE = 8
LINE_CACHE = 1024
PROBE = 64  # bytes re-read before extending the index, to notice a rewritten file
POLL = 0.25  # how often the file is looked at while the view is open


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


class LogView(ScrollView, can_focus=True):
    """A file's lines, drawn from the index a screenful at a time."""

    BINDINGS = [
        Binding("up,k", "scroll_up", "Up", show=False),
        Binding("down,j", "scroll_down", "Down", show=False),
        Binding("home,g", "top", "Top", key_display="g"),
        Binding("end,G", "bottom", "Bottom", key_display="G"),
        Binding("pageup,b", "page_up", "Page up", show=False),
        Binding("pagedown,space", "page_down", "Page down", show=False),
        Binding("right,l", "sideways(8)", "Right", show=False),
        Binding("left,h", "sideways(-8)", "Left", show=False),
    ]
    SIDEWAYS_MARK = "…"  # a line that goes on past an edge of the view ends (or starts) in it

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.index: LineIndex | None = None
        self.lines: OrderedDict[int, str] = OrderedDict()
        self.query_text = ""
        self.match: int | None = None
        self.widest = 0

    def set_index(self, index: LineIndex | None) -> None:
        self.index = index
        self.lines.clear()
        self.sync_size()

    def forget(self, first: int) -> None:
        """Lines from `first` on may have changed (they were read while partial)."""
        for line in [n for n in self.lines if n >= first]:
            del self.lines[line]

    @property
    def count(self) -> int:
        return self.index.lines if self.index is not None else 0

    @property
    def number_width(self) -> int:
        return len(str(max(1, self.count))) + 1

    def sync_size(self) -> None:
        self.virtual_size = Size(self.number_width + self.widest, self.count)
        self.refresh()

    def text(self, line: int) -> str:
        cached = self.lines.get(line)
        if cached is None:
            assert self.index is not None
            try:
                cached = self.index.text(line)
            except OSError as exc:
                cached = safe_text(f"[cannot read: {exc.strerror or exc}]")
            self.lines[line] = cached
            while len(self.lines) > LINE_CACHE:
                self.lines.popitem(last=False)
        else:
            self.lines.move_to_end(line)
        return cached

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        line = self.scroll_offset.y + y
        if line >= self.count:
            return Strip.blank(width)
        text = self.text(line)
        numbers = self.number_width
        length = cell_len(text)
        if length > self.widest:
            self.widest = length
            self.call_later(self.sync_size)
        number = Segment(f"{line + 1:>{numbers - 1}} ", Style(dim=True))
        body = Text(text, style="bold" if line == self.match else "")
        if self.query_text:
            body.highlight_words(
                [self.query_text],
                "reverse",
                case_sensitive=self.query_text != self.query_text.lower(),
            )
        segments = list(body.render(self.app.console))
        left, room = self.scroll_offset.x, width - numbers
        strip = Strip(segments).crop(left, left + room)
        mark = Style(dim=True, bold=True)
        if left + room < length and room > 1:  # more of this line to the right
            strip = Strip([*strip.crop(0, room - 1), Segment(self.SIDEWAYS_MARK, mark)])
        if left > 0 and length > left and room > 1:  # and to the left
            strip = Strip([Segment(self.SIDEWAYS_MARK, mark), *strip.crop(1, room)])
        return Strip([number, *strip]).adjust_cell_length(width)

    def action_sideways(self, step: int) -> None:
        """Long lines: scroll a few columns at a time (the ends show "…" while cut)."""
        self.scroll_to(x=max(0, self.scroll_offset.x + step), animate=False, immediate=True)

    def visible_range(self) -> tuple[int, int]:
        top = self.scroll_offset.y
        return top, min(self.count, top + self.scrollable_content_region.height)

    def action_top(self) -> None:
        self.scroll_home(animate=False, immediate=True)
        self.post_message(Moved(up=True))

    def action_bottom(self) -> None:
        self.scroll_end(animate=False, immediate=True)
        self.post_message(Moved(up=False))

    def action_scroll_up(self) -> None:
        super().action_scroll_up()
        self.post_message(Moved(up=True))

    def action_page_up(self) -> None:
        super().action_page_up()
        self.post_message(Moved(up=True))

    def show_line(self, line: int) -> None:
        height = self.scrollable_content_region.height
        self.scroll_to(y=max(0, line - height // 3), animate=False, immediate=True)

    def on_mouse_scroll_up(self) -> None:
        self.post_message(Moved(up=True))


class Moved(Message):
    """The user moved in the log (up stops following)."""

    def __init__(self, up: bool) -> None:
        super().__init__()
        self.up = up


# ---- the screen -----------------------------------------------------------------------


KIND_WORD = {"manual": "manual", "scheduled": "scheduled", "backfill": "backfill"}


@dataclass(frozen=True)
class RunSource:
    """What the run screen needs: the run read again, the time, how to show a path."""

    occurrence: Callable[[int], Awaitable[Occurrence | None]]
    now: Callable[[], int]
    label: Callable[[str], str] = str
    zone: Callable[[Occurrence], tzinfo] | None = None  # the dashboard's zone choice; UTC
    retries: Callable[[Occurrence], int | None] | None = None  # how many its task allows
    # what a worker reported of a run it ran (Kafka dispatch): Store.remote_output
    remote: Callable[[int], Awaitable[RemoteOutput | None]] | None = None


class RunScreen(Screen[None]):
    """One run: state, times, code and reason, and its whole output. A run a worker ran
    (Kafka dispatch) has its output on that worker: the view shows the tail the worker
    reported with its outcome, and the facts say which worker and where its log is."""

    DEFAULT_CSS = """
    RunScreen #run-facts {
        height: auto;
        border: round $primary 40%;
        border-title-color: $text;
        border-title-style: bold;
        padding: 0 1;
    }
    RunScreen #run-log {
        height: 1fr;
        border: round $primary 40%;
        border-title-color: $text;
        border-title-style: bold;
        scrollbar-size-vertical: 1;
        scrollbar-size-horizontal: 1;
    }
    RunScreen #run-log:focus {
        border: round $accent;
    }
    RunScreen #run-search {
        display: none;
        dock: bottom;
        margin-bottom: 1;
    }
    """

    BINDINGS = [
        Binding("escape,backspace", "back", "Back"),
        Binding("f", "toggle_follow", "Follow"),
        Binding("slash", "search", "Search", key_display="/"),
        Binding("n", "next_match(True)", "Next match"),
        Binding("N", "next_match(False)", "Prev match", key_display="N"),
        Binding("o", "pager", "Open in pager"),
    ]

    def __init__(self, occ: Occurrence, source: RunSource) -> None:
        super().__init__()
        self.occ = occ
        self.source = source
        self.follow = occ.active
        self.problem: str | None = None  # why the log cannot be shown
        self.fd: int | None = None
        self.indexing = False
        self.indexed = False  # the whole file (as it was) is indexed
        self.to_end = False  # `G` pressed before the index was complete
        self._ticks = 0
        self._top = -1
        self.remote: RemoteOutput | None = None  # what the worker reported, once read
        self._remote_final = False  # its outcome's tail is shown: nothing more will come

    def compose(self) -> ComposeResult:
        yield Static(id="run-facts")
        yield LogView(id="run-log")
        yield Input(placeholder="search the output (enter finds, esc closes)", id="run-search")
        yield Footer()

    @property
    def view(self) -> LogView:
        return self.query_one(LogView)

    def on_mount(self) -> None:
        self.query_one(
            "#run-facts"
        ).border_title = f"Run {self.occ.id} of {safe_text(self.occ.task)}"
        if self.app.is_headless:
            self.query_one(Input).cursor_blink = False
        if self.on_worker:
            self.problem = self._remote_wait()
            self.read_remote()
        else:
            self._open()
        self.render_facts()
        self.view.focus()
        self.set_interval(POLL, self.poll)
        self.index_more()

    @property
    def on_worker(self) -> str | None:
        """The worker that ran (or runs) this run, None for a local one."""
        return getattr(self.occ, "worker", None) or None

    def _remote_wait(self) -> str:
        worker = safe_text(self.on_worker or "?")
        if self.occ.active:
            return f"runs on worker {worker}: its output tail comes with its end"
        return f"ran on worker {worker}: reading what it reported…"

    @work(exclusive=True, group="remote")
    async def read_remote(self) -> None:
        """The worker's report: its tail shown as the log (kept in an unnamed temporary
        file, so the view, search and pager work on it as on a local log)."""
        if self.source.remote is None:
            self.problem = f"ran on worker {safe_text(self.on_worker or '?')}: no report here"
            self.render_facts()
            return
        active = self.occ.active
        try:
            found = await self.source.remote(self.occ.id)
        except Exception as exc:  # the store went away: said, the next poll tries again
            self.problem = safe_text(f"cannot read the worker's report: {exc}")
            self.render_facts()
            return
        self.remote = found
        if found is None or (not found.tail and active):
            self.problem = self._remote_wait()
            self.render_facts()
            return
        try:
            fd = await asyncio.to_thread(_tail_file, found.tail)
        except OSError as exc:
            self.problem = f"cannot hold the tail: {exc.strerror or exc}"
            self.render_facts()
            return
        old, self.fd = self.fd, fd
        if old is not None:
            os.close(old)
        self._remote_final = not active
        self.problem = None
        self.indexed = False
        self.view.set_index(LineIndex(fd))
        self.render_facts()
        self.index_more()

    def on_unmount(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)

    def _open(self) -> None:
        path = self.occ.log_path
        if not path:
            self.problem = "this run has no output file"
            return
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as exc:
            self.problem = f"cannot open the log: {exc.strerror or exc}"
            return
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            self.problem = "the log is not a regular file"
            return
        self.fd = fd
        self.problem = None
        self.view.set_index(LineIndex(fd))

    # ---- facts ------------------------------------------------------------------------

    def render_facts(self) -> None:
        occ, now = self.occ, self.source.now()
        zone = self.source.zone(occ) if self.source.zone is not None else UTC
        table = Table.grid(padding=(0, 1), expand=True)
        for style, least in (("bright_black", 9), ("", None), ("bright_black", 6), ("", None)):
            # a label is never cut: "sche…" says nothing; long values are cut instead
            table.add_column(
                style=style,
                no_wrap=True,
                overflow="ellipsis",
                min_width=least,
                ratio=None if least else 1,  # labels keep their width, values share the rest
            )
        code = outcome_code(occ) or "-"
        reason = detail_text(occ)
        slots = f"covers {occ.covers} slot{'s' if occ.covers != 1 else ''}"
        if occ.missed:
            slots += f", {occ.missed} missed"
        table.add_row(
            "state",
            Text(occ.state, STATE_STYLE.get(occ.state, "")),
            "kind",
            f"{KIND_WORD.get(occ.kind, occ.kind)} · {slots}",
        )
        table.add_row(
            "scheduled",
            stamp_in(occ.scheduled_for, zone),
            "started",
            f"{stamp_in(occ.started_at, zone)} ({lateness(occ)} late)"
            if occ.started_at is not None
            else "-",
        )
        table.add_row(
            "took",
            duration(occ, now) + (" so far" if occ.active else ""),
            "exit",
            Text(exit_text(code, reason), "red" if code not in ("0", "-") else ""),
        )
        retries = self.source.retries(occ) if self.source.retries is not None else None
        attempt = attempt_text(occ, retries, now).removeprefix("attempt ") or "1"
        if occ.retry_of is not None:
            attempt += f" (retry of run {occ.retry_of})"
        table.add_row("attempt", attempt, "output", self._log_state())
        # the log path on a line of its own: it is the longest fact and the one to copy
        log = Table.grid(padding=(0, 1), expand=True)
        log.add_column(style="bright_black", no_wrap=True, min_width=9)
        log.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
        worker = self.on_worker
        if worker is not None:  # the whole log is on the worker's machine
            remote = self.remote
            path = remote.log_path if remote is not None and remote.log_path else occ.log_path
            log.add_row("worker", Text(safe_text(worker), "bold"))
            log.add_row("log", f"{safe_text(path)} (on {safe_text(worker)})" if path else "-")
        else:
            path = safe_text(self.source.label(occ.log_path)) if occ.log_path else "-"
            log.add_row("log", path)
        self.query_one("#run-facts", Static).update(Group(table, log))
        self._title()

    def _log_state(self) -> Text:
        if self.problem:
            return Text(self.problem, "yellow")
        index = self.view.index
        assert index is not None
        text = f"{human_bytes(index.size)}, {index.lines:,} line{'' if index.lines == 1 else 's'}"
        if self.on_worker is not None:
            text = f"worker's tail, {text}"
        if not self.indexed:
            text += " (reading…)"
        return Text(text)

    def _title(self) -> None:
        view = self.view
        top, bottom = view.visible_range()
        parts = [f"lines {top + 1 if bottom else 0}-{bottom} of {view.count:,}"]
        if self.occ.active:
            parts.append("following (f)" if self.follow else "paused (f follows)")
        if view.query_text:
            where = f"line {view.match + 1}" if view.match is not None else "no match"
            parts.append(f"/{safe_text(view.query_text)}: {where}")
        self._top = view.scroll_offset.y
        view.border_title = "Output"
        view.border_subtitle = " · ".join(parts)

    # ---- reading the file -------------------------------------------------------------

    @work(exclusive=True, group="index")
    async def index_more(self) -> None:
        """Index what is new in the file, a slice at a time, updating the view."""
        view = self.view
        index = view.index
        if index is None or self.fd is None:
            return
        self.indexing = True
        try:
            while True:
                try:
                    step = await asyncio.to_thread(index.scan)
                except OSError as exc:
                    self.problem = f"cannot read the log: {exc.strerror or exc}"
                    break
                if step is None or self.fd is None:
                    self.indexed = True
                    break
                partial = index.newlines if not step.reset else 0
                index.apply(step)
                view.forget(partial)
                view.sync_size()
                if self.follow or self.to_end:
                    view.action_bottom()
                    self.to_end = self.to_end and step.size < os.fstat(self.fd).st_size
                self.render_facts()
        finally:
            self.indexing = False
        self.render_facts()

    async def poll(self) -> None:
        """The file grows while the run runs; the run's facts change until it ends."""
        self._ticks += 1
        if self.fd is not None and not self.indexing:
            try:
                size = os.fstat(self.fd).st_size
            except OSError:
                size = -1
            index = self.view.index
            if index is not None and size != index.size:
                self.indexed = False
                self.index_more()
        if self.occ.active and self._ticks % 2 == 0:
            fresh = await self.source.occurrence(self.occ.id)
            if fresh is not None:
                self.occ = fresh
            if self.on_worker is not None and not self.occ.active:
                self.read_remote()  # it ended: its worker's tail came with the outcome
            elif self.on_worker is not None and self.fd is None:
                self.problem = self._remote_wait()  # it started on a worker meanwhile
            self.render_facts()
        elif self.view.scroll_offset.y != self._top:
            self._title()

    # ---- keys ---------------------------------------------------------------------------

    def action_back(self) -> None:
        box = self.query_one(Input)
        if box.has_focus:
            box.display = False
            self.view.focus()
            return
        self.app.pop_screen()

    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        if self.follow:
            self.view.action_bottom()
        self.notify("following new output" if self.follow else "stopped following")
        self._title()

    def on_moved(self, message: Moved) -> None:
        if message.up and self.follow:
            self.follow = False
        if not message.up and not self.indexed:
            self.to_end = True
        self._title()

    def action_search(self) -> None:
        box = self.query_one(Input)
        box.display = True
        box.focus()

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        view = self.view
        view.query_text = event.value
        view.match = None
        event.input.display = False
        view.focus()
        if event.value:
            top, _ = view.visible_range()
            self.find(top - 1, True)
        view.refresh()
        self._title()

    def action_next_match(self, forward: bool) -> None:
        view = self.view
        if not view.query_text:
            self.action_search()
            return
        start = (
            view.match
            if view.match is not None
            else view.visible_range()[0] - (1 if forward else 0)
        )
        self.find(start, forward)

    @work(exclusive=True, group="search")
    async def find(self, start: int, forward: bool) -> None:
        view = self.view
        index = view.index
        if index is None:
            return
        query = view.query_text
        try:
            found = await asyncio.to_thread(index.search, query, start, forward)
        except OSError as exc:
            self.notify(safe_text(f"search failed: {exc}"), severity="error")
            return
        if found is None:
            self.notify(f"no match {'below' if forward else 'above'}", severity="warning")
        else:
            view.match = found
            self.follow = False
            view.show_line(found)
        view.refresh()
        self._title()

    async def action_pager(self) -> None:
        """The log in `$PAGER` (default `less -R`), fed on its stdin as this view shows it:
        redacted and with control characters escaped, so neither a secret nor a job's
        escape sequences reach the terminal through the pager."""
        path = self.occ.log_path
        if self.on_worker is not None:
            fd = self.fd
            if fd is None:
                self.notify("the worker has not reported this run's output yet", severity="warning")
                return
            path = f"/dev/fd/{fd}"  # the tail the worker reported, as the view shows it
        if not path or not os.path.isfile(path):
            self.notify("no log file to open", severity="warning")
            return
        pager = os.environ.get("PAGER") or "less -R"
        try:
            argv = shlex.split(pager)
        except ValueError as exc:  # an unmatched quote: say so, keep the screen
            self.notify(safe_text(f"$PAGER cannot be read ({exc}): {pager}"), severity="error")
            return
        # Found before the terminal is handed over: a failure inside suspend() would leave
        # the screen suspended with nothing running.
        if not argv or shutil.which(argv[0]) is None:
            self.notify(safe_text(f"pager not found: {pager}"), severity="error")
            return
        try:
            with self.app.suspend():
                await _page(argv, path)
        except SuspendNotSupported:
            if not self.app.is_headless:  # a browser, say: there is no terminal to lend
                self.notify(safe_text(f"cannot open a pager here; the log is {path}"))
                return
            await _page(argv, path)  # tests: nothing to hand the terminal to
        except OSError as exc:
            self.notify(safe_text(f"pager {argv[0]} failed: {exc}"), severity="error")


def _tail_file(tail: str) -> int:
    """A descriptor of an unnamed temporary file holding `tail` (gone when closed)."""
    with tempfile.TemporaryFile() as handle:
        handle.write(tail.encode("utf-8", "replace"))
        handle.flush()
        return os.dup(handle.fileno())


def exit_text(code: str, reason: str) -> str:
    """`3: disk full`, not `3: exit 3: disk full` when the reason names the code itself."""
    if not reason:
        return code
    return reason if reason.startswith(f"exit {code}") else f"{code}: {reason}"


PAGE_CHUNK = 256 * 1024  # bytes of log made safe at a time, off the loop, for the pager


def _safe_chunk(log, rest: bytes) -> tuple[bytes, bytes, bool]:
    """The next whole lines of `log` made safe (as the view shows them), what is left of
    a line cut by the chunk, and whether the file ended."""
    data = log.read(PAGE_CHUNK)
    if not data:
        tail = safe_text(rest.decode("utf-8", "replace")) + "\n" if rest else ""
        return tail.encode(), b"", True
    lines = (rest + data).split(b"\n")
    rest = lines.pop()
    shown = "".join(safe_text(line.decode("utf-8", "replace")) + "\n" for line in lines)
    return shown.encode(), rest, False


async def _page(argv: list[str], path: str) -> None:
    """The pager runs while the loop goes on (the engine keeps its lease and runs); the
    log reaches it chunk by chunk as it reads (a 200 MB log is never held at once)."""
    process = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE)
    stdin = process.stdin
    assert stdin is not None
    try:
        with open(path, "rb") as log:
            rest, done = b"", False
            while not done:
                shown, rest, done = await asyncio.to_thread(_safe_chunk, log, rest)
                stdin.write(shown)
                await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the pager was closed before the end of the log
    finally:
        with contextlib.suppress(OSError):
            stdin.close()
        await process.wait()
