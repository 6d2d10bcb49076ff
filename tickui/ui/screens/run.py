"""One run: its facts and its whole output (log_view.LogView over log_index.LineIndex),
its search (as in less: smart case, wraps with a notice, counts matches) and its pager;
the run's own screen."""

from __future__ import annotations

import asyncio
import os
import stat
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, tzinfo

from rich.text import Text
from textual import work
from textual.app import ComposeResult, SuspendNotSupported
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Input, Static

from tickui.common import procs
from tickui.common.redact import safe_text
from tickui.dispatch.output import human_bytes
from tickui.model.coordination import RemoteOutput
from tickui.model.records import Occurrence
from tickui.ui.keys import rank
from tickui.ui.log_index import LineIndex, Search
from tickui.ui.pager import page, pager_argv
from tickui.ui.view.run_facts import MATCH_COUNT_CAP, facts, match_text, output_subtitle
from tickui.ui.widgets.log_view import LogView, Moved
from tickui.ui.widgets.panes import KeyFooter

# The run view's keys in its footer: when narrow the highest go first; the app's ? and q
# (rank 0) always show.
FOOTER_RANKS = {
    "back": 1, "toggle_follow": 2, "search": 3, "cancel_run": 4, "next_match": 5,
    "copy": 6, "pager": 7, "bottom": 8, "top": 9,
}  # fmt: skip


def _footer_rank(action: str) -> int:
    bare = action.split("(", 1)[0]
    return FOOTER_RANKS.get(bare, rank(bare))


POLL = 0.25  # how often the file is looked at while the view is open


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
    # cancel a run, asking first (the dashboard's cancel)
    cancel: Callable[[Occurrence], Awaitable[None]] | None = None


class RunScreen(Screen[None]):
    """One run: state, times, code and reason, and its whole output. A run a worker ran
    (Kafka dispatch) has its output on that worker: the view shows the tail the worker
    reported with its outcome, and the facts say which worker and where its log is."""

    BINDINGS = [
        Binding("escape,backspace", "back", "Back"),
        Binding("f", "toggle_follow", "Follow"),
        Binding("slash", "search", "Search", key_display="/"),
        Binding("n", "next_match(True)", "Next match"),
        Binding("N", "next_match(False)", "Prev match", key_display="N"),
        Binding("y", "copy", "Copy"),
        Binding("c", "cancel_run", "Cancel run"),
        Binding("o", "pager", "Open in pager"),
    ]

    def __init__(self, occ: Occurrence, source: RunSource) -> None:
        super().__init__()
        self.occ = occ
        self.source = source
        self.problem: str | None = None  # why the log cannot be shown
        self.fd: int | None = None
        self.indexing = False
        self.indexed = False  # the whole file (as it was) is indexed
        self.matched: list[int] = []  # the lines matching the search, counted so far
        self.counted_to = 0  # the line counting goes on from
        self.counted = False  # the whole indexed file is counted
        self.capped = False  # counting stopped at MATCH_COUNT_CAP
        self.notice = ""  # the last search's wrap notice, on the status line
        self._ticks = 0
        self._top = -1
        self.remote: RemoteOutput | None = None  # what the worker reported, once read
        self._remote_final = False  # its outcome's tail is shown: nothing more will come

    def compose(self) -> ComposeResult:
        yield Static(id="run-facts")
        yield LogView(id="run-log")
        yield Input(
            placeholder="search the output: text (a capital makes it case-sensitive) or"
            " re:regex (enter finds, esc closes)",
            id="run-search",
        )
        yield KeyFooter(_footer_rank)

    @property
    def view(self) -> LogView:
        return self.query_one(LogView)

    @property
    def follow(self) -> bool:
        return self.view.follow

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
        self.view.follow = self.occ.active
        self.render_facts()
        self.view.focus()
        self.set_interval(POLL, self.poll)
        self.index_more()

    @property
    def on_worker(self) -> str | None:
        """The worker that ran (or runs) this run, None for a local one."""
        return self.occ.worker or None

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
        self.recount()  # a search goes on over the new tail
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
            host = self.occ.engine_host
            if host and host != procs.host():  # a store shared between hosts
                self.problem = safe_text(f"its output is on host {host}, in {path}")
                return
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
        occ, source = self.occ, self.source
        worker = self.on_worker
        if worker is not None:
            remote = self.remote
            path = remote.log_path if remote is not None and remote.log_path else occ.log_path
        else:
            path = source.label(occ.log_path) if occ.log_path else None
        shown = facts(
            occ,
            source.now(),
            source.zone(occ) if source.zone is not None else UTC,
            source.retries(occ) if source.retries is not None else None,
            self._log_state(),
            path,
            worker,
        )
        self.query_one("#run-facts", Static).update(shown)
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
        state = [""]
        if self.occ.active:
            state = (
                ["following (f)", "following"]
                if self.follow
                else ["paused (G or f follows)", "paused (G)", "paused"]
            )
        searched = [""]
        if view.search is not None:
            typed = safe_text(view.search.typed)
            case = " (any case)" if self._folded(view.search) else ""
            searched = [f"/{typed}{case}: {self._match_text()}", f"/{typed}: {self._match_text()}"]
        room = max(0, view.size.width - 6)  # the border's corners and a space each side
        self._top = view.scroll_offset.y
        view.border_title = "Output"
        view.border_subtitle = output_subtitle(
            top + 1 if bottom else 0, bottom, view.count, state, searched, self.notice, room
        )

    @staticmethod
    def _folded(search: Search) -> bool:
        """Case ignored although the pattern has capitals (nothing matched as typed)."""
        try:
            return not search.case_sensitive and Search.parse(search.typed).case_sensitive
        except ValueError:
            return False

    def _match_text(self) -> str:
        return match_text(self.matched, self.counted_to, self.counted, self.capped, self.view.match)

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
                view.sync_size()  # holds the view still unless it follows
                if step.reset:
                    self.recount()
                elif view.search is not None:
                    self.count_matches()
                self.render_facts()
        finally:
            self.indexing = False
        self.render_facts()

    def recount(self) -> None:
        """Count the search's matches from the first line (a new search, or a new file)."""
        self.matched, self.counted_to, self.counted, self.capped = [], 0, False, False
        self.count_matches()

    @work(exclusive=True, group="count")
    async def count_matches(self) -> None:
        """Count the lines matching the search, a slice at a time in a thread, from where
        the last count stopped (the log grows while the run runs)."""
        view = self.view
        index, search = view.index, view.search
        if index is None or search is None or self.capped:
            return
        self.counted = False
        while True:
            start = self.counted_to
            try:
                step = await asyncio.to_thread(
                    index.count, search, start, most=MATCH_COUNT_CAP + 1 - len(self.matched)
                )
            except OSError:
                break
            if view.search is not search:
                return
            # a last line read while partial is counted again, whole
            self.matched = [line for line in self.matched if line < start] + step.lines
            self.counted_to = step.next_line
            if len(self.matched) > MATCH_COUNT_CAP:  # one past it: there are more
                del self.matched[MATCH_COUNT_CAP:]
                self.counted_to = self.matched[-1] + 1
                self.capped = True
            if step.done or self.capped:
                self.counted = True
                break
            self._title()
        self._title()

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
                ended = fresh.active != self.occ.active
                self.occ = fresh
                if ended:
                    self.refresh_bindings()  # `c` goes with the run
            if self.on_worker is not None and not self.occ.active:
                self.read_remote()  # it ended: its worker's tail came with the outcome
            elif self.on_worker is not None and self.fd is None:
                self.problem = self._remote_wait()  # it started on a worker meanwhile
            self.render_facts()
        elif self.view.scroll_offset.y != self._top:
            self.notice = ""  # the user moved on from what the search said
            self._title()

    # ---- keys ---------------------------------------------------------------------------

    def action_back(self) -> None:
        box = self.query_one(Input)
        if box.has_focus:
            box.display = False
            self.view.focus()
            return
        self.app.pop_screen()

    def on_resize(self) -> None:
        """The status line is fitted to the view's width: fitted again to the new one."""
        self.call_after_refresh(self._title)

    def action_toggle_follow(self) -> None:
        self.view.set_follow(not self.follow)

    def on_moved(self, message: Moved) -> None:
        """The status line says following or paused (a toast would cover it); what the
        last search said is done with."""
        self.notice = ""
        self._title()

    def action_search(self) -> None:
        box = self.query_one(Input)
        box.display = True
        box.focus()

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        view = self.view
        if not event.value:
            view.search = view.match = None
            event.input.display = False
            view.focus()
            view.refresh()
            self._title()
            return
        try:
            search = Search.parse(event.value)
        except ValueError as exc:  # a bad expression: said, the box stays to fix it
            self.notify(safe_text(str(exc)), severity="error")
            return
        view.search, view.match = search, None
        event.input.display = False
        view.focus()
        self.recount()
        top, _ = view.visible_range()
        self.find(top - 1, True)  # from the top of the view, as less does
        view.refresh()
        self._title()

    def action_next_match(self, forward: bool) -> None:
        """From the current match while it is in view, else from the view's edge: after
        `G`, `n` finds the next match below the view (wrapping to the top)."""
        view = self.view
        if view.search is None:
            self.action_search()
            return
        top, bottom = view.visible_range()
        if view.match is not None and top <= view.match < bottom:
            start = view.match
        else:
            start = bottom - 1 if forward else top
        self.find(start, forward)

    @work(exclusive=True, group="search")
    async def find(self, start: int, forward: bool) -> None:
        """The next match after (or before) line `start`, wrapping at either end as less
        does and saying so; in a thread, so a 200 MB log never holds up the screen."""
        view = self.view
        index, search = view.index, view.search
        if index is None or search is None:
            return
        try:
            found, wrapped = await asyncio.to_thread(index.find_wrapping, search, start, forward)
            if found is None and search.case_sensitive:
                # found nowhere as typed (`DONE` in a log that says "done"): ignoring case
                search = search.ignoring_case()
                found, wrapped = await asyncio.to_thread(
                    index.find_wrapping, search, start, forward
                )
                if found is not None and view.search is not None:
                    view.search = search
                    self.recount()
        except OSError as exc:
            self.notify(safe_text(f"search failed: {exc}"), severity="error")
            return
        # said on the status line, as less and vim do (a toast would cover the count)
        self.notice = ""
        if found is not None:
            if wrapped:
                self.notice = (
                    "search hit BOTTOM, continuing at TOP"
                    if forward
                    else "search hit TOP, continuing at BOTTOM"
                )
            view.match = view.marked = found
            view.show_line(found)  # and holds there: the status says paused
        view.refresh()
        self._title()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """`c` is there (and in the footer) while the run runs."""
        if action == "cancel_run":
            return self.occ.active
        return True

    async def action_cancel_run(self) -> None:
        """Cancel this run, asking first as the dashboard does."""
        if self.source.cancel is None:
            self.notify("cancel is not available here", severity="warning")
            return
        await self.source.cancel(self.occ)

    def action_copy(self) -> None:
        """The clicked line or the current match to the clipboard (OSC 52: the terminal
        must allow it; shift-drag selects text in most terminals instead)."""
        line, text = self.view.marked, self.view.marked_text()
        if line is None or text is None:
            self.notify(
                "nothing to copy: click a line or search (/) first; shift-drag selects"
                " text in most terminals",
                severity="warning",
            )
            return
        self.app.copy_to_clipboard(text)
        self.notify(f"copied line {line + 1} to the clipboard")

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
        argv, problem = pager_argv()
        if problem is not None:
            self.notify(problem, severity="error")
            return
        try:
            with self.app.suspend():
                await page(argv, path)
        except SuspendNotSupported:
            if not self.app.is_headless:  # a browser, say: there is no terminal to lend
                self.notify(safe_text(f"cannot open a pager here; the log is {path}"))
                return
            await page(argv, path)  # tests: nothing to hand the terminal to
        except OSError as exc:
            self.notify(safe_text(f"pager {argv[0]} failed: {exc}"), severity="error")


def _tail_file(tail: str) -> int:
    """A descriptor of an unnamed temporary file holding `tail` (gone when closed)."""
    with tempfile.TemporaryFile() as handle:
        handle.write(tail.encode("utf-8", "replace"))
        handle.flush()
        return os.dup(handle.fileno())
