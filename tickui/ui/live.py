"""The dashboard kept live: what the engine and ticker say changed, other processes'
commits, and the second hand (countdowns, durations, the clock).

Engine and ticker only record what changed (ids, a flag); a short timer drains that
into the panes, so no widget is touched from engine code and a burst repaints once.
Another process's commits are noticed through the store's data_version, once a second, or
at once when the store hears them (PostgreSQL's NOTIFY).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from textual.timer import Timer

from tickui.common.paths import short_path
from tickui.common.redact import redact
from tickui.engine import EngineChange
from tickui.model.records import Occurrence
from tickui.runtime.host import Host
from tickui.ticks.breaker import CLOSED
from tickui.ui.board import Board
from tickui.ui.view.cells import clock_in
from tickui.ui.view.notices import Notices
from tickui.ui.widgets.panes import Banner, BreakerPane, StatusLine, TicksPane
from tickui.ui.widgets.workers import WorkersFeed, WorkersPane

if TYPE_CHECKING:
    from tickui.ui.screens.dashboard import Dashboard

DRAIN_EVERY = 0.05  # drains (repaints of what changed): on average at most this often
DRAIN_DELAY = 0.01  # a drain waits this long after the first mark, to gather a burst
STALLED = 1.5  # s without a tick before the one-second timer takes the beat back
FAILURE_QUIET = 60.0  # s: a task that keeps failing raises one toast in this long


OUTSIDE_DELAY = 0.05  # s from hearing another process's commit to looking at it
OUTSIDE_EVERY = 0.25  # s at least between two such looks: a busy holder commits many times a second


class LiveRefresh:
    """Keeps `screen`'s panes current with `board`; `ring_bell`: ring on a failed run."""

    def __init__(self, board: Board, screen: Dashboard, *, ring_bell: bool = False) -> None:
        self.board = board
        self.screen = screen
        self.ring_bell = ring_bell
        self.notices = Notices(FAILURE_QUIET)
        self.workers = WorkersFeed(
            lambda: screen.query_one(WorkersPane),
            lambda read: screen.app.run_worker(read, group="workers"),
        )
        self.status_dirty = True
        self.ticker_dirty = True
        self.second_timer: Timer | None = None
        self.failures_were_on = False  # `f` was on: say when the breaker closes again
        self._dirty_tasks: set[int] = set()
        self._dirty_occ: set[int] = set()
        self._data_version: int | None = None
        self._draining = False
        self._drain_pending = False  # a drain is scheduled
        self._drains = [0.0, 0.0]  # loop times the last two drains started
        self._last_second = 0.0  # loop time countdowns and the clock were last looked at
        self._stalled: asyncio.TimerHandle | None = None  # resumes the timer if ticks stop
        self._outside_soon = False  # a look at another process's commit is scheduled
        self._outside_at = 0.0  # loop time of the last look at other processes' commits

    @property
    def host(self) -> Host:
        assert self.board.host is not None
        return self.board.host

    def notify(self, message: str, **kwargs) -> None:
        self.screen.app.notify(message, **kwargs)

    async def start(self, host: Host) -> None:
        """Follow `host`: its engine's and ticker's changes, then the first full picture."""
        self.workers.host = host
        host.engine.subscribe(self._on_engine_change)
        host.ticker.on_change(self._on_ticker_change)
        host.store.on_commit(self._heard_commit)
        await self.load_all()
        await self.workers.read()
        self.screen.show_titles()

    def run_seconds(self) -> None:
        """The screen's own pace: paused while ticks come each second and beat it instead."""
        self.second_timer = self.screen.app.set_interval(1.0, self.second)

    async def load_all(self) -> None:
        """The first full picture: every task with its stats, the newest occurrences."""
        board = self.board
        store = self.host.store
        self._data_version = await store.data_version()
        board.task_rows.load(await store.list_tasks())
        newest = await store.newest_occurrences(1)
        self.notices.newest_at_load = newest[0].id if newest else 0
        await board.load_occurrences()
        board.task_widget.sync_size()

    # ---- what changed -----------------------------------------------------------------

    def _on_engine_change(self, change: EngineChange) -> None:
        self._dirty_tasks.update(change.tasks)
        self._dirty_occ.update(change.occurrences)
        self.status_dirty = self.status_dirty or change.status or bool(change.occurrences)
        self._wake()

    def _on_ticker_change(self) -> None:
        self.ticker_dirty = True
        self._wake()

    def mark(self, tasks: Iterable[int] = (), occurrences: Iterable[int] = ()) -> None:
        self._dirty_tasks.update(tasks)
        self._dirty_occ.update(occurrences)
        self._wake()

    def _dirty(self) -> bool:
        return bool(self._dirty_tasks or self._dirty_occ or self.status_dirty or self.ticker_dirty)

    def _wake(self) -> None:
        """Something was marked: drain DRAIN_DELAY from now (a burst marks many things,
        one drain applies them), at most two drains in any 2 * DRAIN_EVERY (a run that
        starts and ends at once shows both soon; a stream of changes drains 20 times a
        second). No timer runs while nothing is marked."""
        if self._drain_pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on the UI's loop: `second` picks it up
            return
        self._drain_pending = True
        delay = max(DRAIN_DELAY, self._drains[0] + 2 * DRAIN_EVERY - loop.time())
        loop.call_later(delay, self._drain_due)

    def _drain_due(self) -> None:
        self._drain_pending = False
        app = self.screen.app
        if self.board.host is not None and app.is_running:
            app.call_later(self.drain)  # on the app's queue: after what it is handling

    async def drain(self) -> None:
        """Apply what the engine said changed: fetch those rows only, repaint those rows."""
        if self.board.host is None or self._draining:
            return
        self._draining = True
        self._drains = [self._drains[1], asyncio.get_running_loop().time()]
        try:
            await self._apply_dirty()
            if self.status_dirty:
                self.status_dirty = False
                self.show_status()
            if self.ticker_dirty:
                self.ticker_dirty = False
                self.show_ticker()
                if self._ticks_drive_seconds():
                    await self._beat()
        except Exception as exc:  # the store went away under us: say so, keep the UI
            self.notify(redact(f"refresh failed: {exc}"), severity="error")
        finally:
            self._draining = False
            if self._dirty():  # marked while this drain ran (or a drain was refused)
                self._wake()

    async def _apply_dirty(self) -> None:
        board = self.board
        store = self.host.store
        occ_ids, self._dirty_occ = self._dirty_occ, set()
        task_ids, self._dirty_tasks = self._dirty_tasks, set()
        rows_moved = False
        if occ_ids:
            # A run's end can write rows nobody announced (its queued retry, a buffered
            # slot): take whatever is newer than the newest row shown, too.
            newer = await store.newest_occurrences(
                board.occ_rows.window, board.occ_rows.newest_id, **board.occ_rows.query()
            )
            occ_ids |= {o.id for o in newer}
            fetched = await store.occurrences_by_id(sorted(occ_ids))
            board.grid.note(fetched)  # the history grid's rows, from the same reads
            if board.occ_rows.filter_label():  # `newer` left out what the filter hides:
                board.grid.stale({o.task_id for o in fetched})  # the grid reads its own
            for occ in fetched:
                old = board.occ_rows.by_id.get(occ.id)
                self._tell_failure(old, occ)
                kept = board.occ_rows.upsert(occ)
                if kept:
                    board.worker_column.note(occ)
                # rows came or went (a new run, or one a state filter now hides): resize
                rows_moved |= (old is None) == kept
                task_ids.add(occ.task_id)
        if task_ids:
            await self._refresh_tasks(task_ids)
        if rows_moved:
            board.occ_table.sync_size()
            self.screen.show_titles()
        elif occ_ids:
            for occ_id in occ_ids:
                index = board.occ_rows.index_of(occ_id)
                if index is not None:
                    board.occ_table.refresh_row(index)

    def _tell_failure(self, old: Occurrence | None, occ: Occurrence) -> None:
        """A run that just ended failed: a toast (and the bell when [ui] bell is on)."""
        message = self.notices.failed_run(old, occ, asyncio.get_running_loop().time())
        if message is not None:
            self.notify(message, title=f"Run {occ.id} failed", severity="error")
            if self.ring_bell:
                self.screen.app.bell()

    async def _refresh_tasks(self, ids: set[int]) -> None:
        rows, table = self.board.task_rows, self.board.task_widget
        store = self.host.store
        ordered = sorted(ids)
        found = await store.tasks_by_id(ordered)
        stats = await store.task_stats(ordered)
        before = len(rows)
        for task in found:
            if task.id in stats:
                task.stats = stats[task.id]
            told = self.notices.paused_task(rows.by_id.get(task.id), task)
            if told is not None:
                self.notify(told, title="Task paused", severity="error", timeout=30)
            if rows.upsert(task):
                before = -1  # added or moved (a sort by NEXT moves a task that ran)
        for gone in ids - {t.id for t in found}:
            if gone in rows.by_id:
                rows.remove(gone)
                before = -1
        if before != len(rows):
            table.sync_size()
            return
        for task in found:
            index = rows.index_of(task.id)
            if index is not None:
                table.refresh_row(index)

    def _heard_commit(self) -> None:
        """Another process committed (a store that hears it): look within 50 ms rather
        than at the next second, and at most every 0.25 s: each look reads every task's
        versions, and a burst of commits is one look."""
        if self._outside_soon:
            return
        self._outside_soon = True
        since = asyncio.get_running_loop().time() - self._outside_at
        self.screen.set_timer(max(OUTSIDE_DELAY, OUTSIDE_EVERY - since), self._look_outside_soon)

    async def _look_outside_soon(self) -> None:
        self._outside_soon = False
        await self.look_outside()

    async def look_outside(self) -> None:
        """Commits by another connection (a `tickui task ...`, a second tickui) move
        data_version; then compare narrow task versions and fetch newer occurrences."""
        board = self.board
        if board.host is None or board.host.closed:
            return
        self._outside_at = asyncio.get_running_loop().time()
        store = board.host.store
        try:
            version = await store.data_version()
            if version == self._data_version:
                return
            self._data_version = version
            versions = await store.task_versions()
            known = board.task_rows.by_id
            changed = {
                task_id
                for task_id, (updated, nxt, enabled, gen) in versions.items()
                if (t := known.get(task_id)) is None
                or (t.updated_at, t.next_run_at, int(t.enabled), t.generation)
                != (updated, nxt, enabled, gen)
            }
            changed |= set(known) - set(versions)
            newer = await store.newest_occurrences(
                board.occ_rows.window, board.occ_rows.newest_id, **board.occ_rows.query()
            )
            self.mark(changed, [o.id for o in newer] + board.occ_rows.active_ids())
            self.status_dirty = True
            self.workers.due(committed=True)
        except Exception as exc:
            self.notify(redact(f"could not read the database: {exc}"), severity="error")

    # ---- the second hand ----------------------------------------------------------------

    async def second(self) -> None:
        """Once a second: look for other processes' commits, then move countdowns,
        durations and the clock. While ticks come at least once a second, the drain after
        a tick does the repaint (one frame a second for both); this timer does it when they
        do not, or stall. Nothing polls faster than the screen changes."""
        if self.board.host is None:
            return
        await self.look_outside()
        since = self._since_second()
        if since >= 1.5 or (since >= 0.9 and not self._ticks_drive_seconds()):
            self.each_second()
            if not self._ticks_drive_seconds():
                self.show_ticker()  # the breaker's probe countdown, between slow ticks
        if self._dirty():  # a safety net: nothing marked is left waiting
            self._wake()

    async def _beat(self) -> None:
        """A tick came: it does the second's work (in the same frame as its own changes),
        and the one-second timer sleeps until ticks stop coming (STALLED s without one),
        so an idle dashboard wakes once a second, not twice."""
        loop = asyncio.get_running_loop()
        timer = self.second_timer
        assert timer is not None
        timer.pause()
        if self._stalled is not None:
            self._stalled.cancel()
        self._stalled = loop.call_later(STALLED, timer.resume)
        if self._since_second() >= 0.9:
            self.each_second()  # before any await: one frame with the tick's own changes
            await self.look_outside()

    def _ticks_drive_seconds(self) -> bool:
        ticker = self.host.ticker
        return ticker.is_running and ticker.config.interval_ms <= 1000

    def _since_second(self) -> float:
        return asyncio.get_running_loop().time() - self._last_second

    def each_second(self) -> None:
        """Repaint the cells whose text changed (countdowns, durations) and the clock;
        nothing else."""
        self._last_second = asyncio.get_running_loop().time()
        self.board.task_widget.refresh_changed()
        self.board.occ_table.refresh_changed()
        self.show_status()
        self.screen.show_titles()  # "↑ N newer above" follows the Occurrences pane's scroll
        self.workers.due()  # "2s ago", and the heartbeats the engine recorded

    # ---- header, ticks, breaker ---------------------------------------------------------

    def show_status(self) -> None:
        """The header, on the dashboard even while a dialog is over it. Tells the user when
        this engine lost the lease it held."""
        host = self.host
        view = self.board.view
        status = host.engine.status()
        lost = self.notices.lease(status)
        if lost is not None:
            self.notify(lost, title="Lease lost", severity="error")
        waiting = host.engine.dispatcher.active() if self.board.quitting else None
        with contextlib.suppress(Exception):
            self.screen.query_one(StatusLine).show(
                short_path(host.db) if isinstance(host.db, Path) else host.db,
                status,
                host.ticker.status,
                host.clock.now(),
                host.clock.scale,
                host.demo,
                view.zone(),
                view.label(),
                waiting,
                host.watch,
                host.store.outage(),
            )

    def show_ticker(self) -> None:
        """Ticks and breaker panes and the banner, on the dashboard even under a dialog."""
        ticker = self.host.ticker
        metrics = ticker.metrics()
        self._tell_breaker(metrics)
        with contextlib.suppress(Exception):
            screen = self.screen
            screen.query_one(TicksPane).metrics = metrics
            breaker = screen.query_one(BreakerPane)
            breaker.note = self._breaker_note(metrics)
            breaker.metrics = metrics
            banner = screen.query_one(Banner)
            banner.display = metrics.simulating_failures
            if metrics.simulating_failures:
                banner.update(
                    " ⚠ SIMULATING PUBLISH FAILURES: every tick publish fails on purpose"
                    f" (breaker {metrics.breaker_state}). Press f to stop. "
                )

    def _tell_breaker(self, metrics) -> None:
        opened = self.notices.breaker(metrics)
        if opened is not None:
            self.notify(opened, title="Breaker open", severity="error")
        if metrics.breaker_state == CLOSED:
            self.failures_were_on = False

    def _breaker_note(self, metrics) -> str:
        if metrics.simulating_failures or not self.failures_were_on:
            return ""
        if metrics.breaker_state == CLOSED:
            return ""
        retry = metrics.breaker_retry_in_s
        if retry is None:
            return "f is off: closes on its next probe"
        at = self.board.now() + round(retry * 1_000_000)
        clock = clock_in(at, self.board.view.zone())
        return f"f is off: closes on its next probe at {clock} (in {retry:.0f}s)"
