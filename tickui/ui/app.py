"""The tickui dashboard: the engine and ticker in the UI's own loop, shown live.

Engine and ticker only record what changed (ids, a flag); a short timer drains that
into the panes, so no widget is touched from engine code and a burst repaints once.
Another process's commits are noticed through `PRAGMA data_version`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.driver import Driver
from textual.screen import ModalScreen, Screen
from textual.theme import Theme

from tickui.common.errors import TickuiError
from tickui.common.redact import redact
from tickui.engine import EngineChange
from tickui.model.records import Occurrence
from tickui.runtime.host import Host
from tickui.ticks.breaker import CLOSED
from tickui.ui import settings as saved
from tickui.ui.keys import (
    KEY_GROUPS,
    KEYS,
    QUITTING_OFF,
    SHOWN_KEY,
    TASK_ACTIONS,
    VIEW_ACTIONS,
    help_groups,
)
from tickui.ui.screens.dashboard import Dashboard
from tickui.ui.screens.detail import DetailScreen
from tickui.ui.screens.dialogs import ConfirmScreen, HelpScreen, QuitScreen
from tickui.ui.screens.hooks import HooksScreen
from tickui.ui.screens.run import RunScreen
from tickui.ui.task_actions import TaskActions
from tickui.ui.view.cells import MODES, TimeView, clock_in, occurrence_cells, short_path, task_cells
from tickui.ui.view.columns import OCCURRENCE_COLUMNS, TASK_COLUMNS, CellSource
from tickui.ui.view.notices import Notices
from tickui.ui.view.rows import OccurrenceRows, TaskRows
from tickui.ui.viewing import ViewChoices
from tickui.ui.widgets.panes import Banner, BreakerPane, StatusLine, TicksPane
from tickui.ui.widgets.table import RowTable
from tickui.ui.widgets.workers import WorkersView

DRAIN_EVERY = 0.05  # drains (repaints of what changed): on average at most this often
DRAIN_DELAY = 0.01  # a drain waits this long after the first mark, to gather a burst
STALLED = 1.5  # s without a tick before the one-second timer takes the beat back
WAIT_FOREVER = 24 * 3600.0
FAILURE_QUIET = 60.0  # s: a task that keeps failing raises one toast in this long

HostFactory = Callable[[], Awaitable[Host]]
DETAIL_APP_ACTIONS = frozenset(
    {"help", "quit", "detail", "run_now", "pop_screen", "toggle_enabled", "edit_task"}
)  # the app keys that mean something on a task's detail (its own r, c, esc too)


class TickuiApp(TaskActions, ViewChoices, WorkersView, App[int]):
    CSS_PATH = "tickui.tcss"
    TITLE = "tickui"
    BINDINGS = [
        Binding(k.key, k.action, k.label, show=k.show, key_display=SHOWN_KEY.get(k.key))
        for _, keys in KEY_GROUPS
        for k in keys
    ]

    def __init__(
        self,
        factory: HostFactory,
        *,
        header_clock: bool = True,
        bell: bool = False,
        settings_file: Path | None = None,
        driver_class: type[Driver] | None = None,
    ) -> None:
        """`settings_file`: where view choices are kept (default: the user's config folder;
        fixed scenes such as screenshots give their own)."""
        super().__init__(driver_class=driver_class)
        self.settings_file = settings_file
        self.factory = factory
        self.header_clock = header_clock
        self.ring_bell = bell  # [ui] bell: ring on a failed run
        self.host: Host | None = None  # type: ignore[assignment]
        self.ready = asyncio.Event()
        self.prefs, self._prefs_problem = saved.load(settings_file)
        self.view = TimeView(self.prefs.zone if self.prefs.zone in MODES else "local")
        self.task_rows = TaskRows()
        self.occ_rows = OccurrenceRows()
        self._apply_prefs_to_rows()
        self.task_cells = CellSource(self.task_rows, task_cells)
        self.occ_cells = CellSource(self.occ_rows, self._occurrence_cells)
        self.task_cells.view = self.occ_cells.view = self.view
        self.tasks_table = RowTable(TASK_COLUMNS, self.task_cells, self._now, id="tasks")
        self.occ_table = RowTable(OCCURRENCE_COLUMNS, self.occ_cells, self._now, id="occurrences")
        self.dashboard = Dashboard(self.tasks_table, self.occ_table)
        self._dirty_tasks: set[int] = set()
        self._dirty_occ: set[int] = set()
        self._status_dirty = True
        self._ticker_dirty = True
        self._data_version: int | None = None
        self._draining = False
        self._drain_pending = False  # a drain is scheduled
        self._drains = [0.0, 0.0]  # loop times the last two drains started
        self._last_second = 0.0  # loop time countdowns and the clock were last looked at
        self._stalled: asyncio.TimerHandle | None = None  # resumes the timer if ticks stop
        self.notices = Notices(FAILURE_QUIET)
        self._failures_were_on = False  # `f` was on: say when the breaker closes again
        self._save_failed = False
        self._waiting = False  # quitting, waiting for active runs
        self._leaving: asyncio.Task | None = None
        self._filtering_occ = False  # the filter box filters the Occurrences pane (else Tasks)
        self.failure: str | None = None
        if self.prefs.theme:
            with contextlib.suppress(Exception):  # a theme this Textual does not know
                self.theme = self.prefs.theme

    def _occurrence_cells(self, occ: Occurrence, now: int, view: TimeView) -> list:
        """An occurrence's cells, its times in its task's zone when the view says so."""
        task = self.task_rows.by_id.get(occ.task_id)
        if task is None:
            return self.worker_cells(occ, occurrence_cells(occ, now, view))
        cells = occurrence_cells(occ, now, view, task.spec.tz, task.spec.retries)
        return self.worker_cells(occ, cells)

    def _apply_prefs_to_rows(self) -> None:
        prefs = self.prefs
        if prefs.sort_column in TaskRows.SORTABLE:
            self.task_rows.set_sort(prefs.sort_column, prefs.sort_descending)
        state = prefs.occ_state if prefs.occ_state in OccurrenceRows.STATES else "all"
        self.occ_rows.set_filter(text=prefs.occ_text, state=state)

    # ---- start and stop ---------------------------------------------------------------

    @property
    def clock(self):
        assert self.host is not None
        return self.host.clock

    def _now(self) -> int:
        return self.host.clock.now() if self.host is not None else 0

    def on_mount(self) -> None:
        self.push_screen(self.dashboard)
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        if self._prefs_problem:
            self.notify(self._prefs_problem, title="Settings", severity="warning")
        self.call_after_refresh(self._titles)
        self.call_after_refresh(self._side_shown)
        self._boot()

    @work(exclusive=True, group="boot")
    async def _boot(self) -> None:
        try:
            self.host = await self.factory()
        except TickuiError as exc:
            self.failure = redact(str(exc))
            self.exit(2)
            return
        host = self.host
        host.engine.subscribe(self._on_engine_change)
        host.ticker.on_change(self._on_ticker_change)
        await self.load_all()
        await self.read_workers()
        self._titles()
        await host.start()
        # the screen's own pace: paused while ticks come each second and beat it instead
        self._second_timer = self.set_interval(1.0, self.second)
        await self.drain()
        self.ready.set()
        self.refresh_bindings()

    async def on_unmount(self) -> None:
        if self.host is not None:
            await self.host.close()

    async def load_all(self) -> None:
        """The first full picture: every task with its stats, the newest occurrences."""
        store = self.host.store
        self._data_version = await store.data_version()
        self.task_rows.load(await store.list_tasks())
        newest = await store.newest_occurrences(1)
        self.notices.newest_at_load = newest[0].id if newest else 0
        await self._load_occurrences()
        self.tasks_table.sync_size()

    async def _load_occurrences(self) -> None:
        """The newest occurrences that pass the Occurrences pane's filters (again after a
        filter changed); the cursor stays on the same occurrence when it is still shown."""
        rows = self.occ_rows
        rows.load(await self.host.store.newest_occurrences(rows.window, **rows.query()))
        for occ in rows.by_id.values():
            self.note_worker(occ)
        self.occ_table.sync_size()

    # ---- settings -----------------------------------------------------------------------

    def remember(self, **changes: object) -> None:
        """Keep a view choice for next time; a folder that cannot be written is said once."""
        self.prefs = self.prefs.but(**changes)
        try:
            saved.save(self.prefs, self.settings_file)
        except OSError as exc:
            if not self._save_failed:
                self._save_failed = True
                self.notify(
                    f"settings not saved ({exc.strerror or exc}); they last until you quit",
                    title="Settings",
                    severity="warning",
                )

    def _theme_changed(self, theme: Theme) -> None:
        if theme.name != self.prefs.theme:
            self.remember(theme=theme.name)

    # ---- what changed -----------------------------------------------------------------

    def _on_engine_change(self, change: EngineChange) -> None:
        self._dirty_tasks.update(change.tasks)
        self._dirty_occ.update(change.occurrences)
        self._status_dirty = self._status_dirty or change.status or bool(change.occurrences)
        self._wake()

    def _on_ticker_change(self) -> None:
        self._ticker_dirty = True
        self._wake()

    def mark(self, tasks: Iterable[int] = (), occurrences: Iterable[int] = ()) -> None:
        self._dirty_tasks.update(tasks)
        self._dirty_occ.update(occurrences)
        self._wake()

    def _dirty(self) -> bool:
        return bool(
            self._dirty_tasks or self._dirty_occ or self._status_dirty or self._ticker_dirty
        )

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
        if self.host is not None and self.is_running:
            self.call_later(self.drain)  # on the app's queue: after what it is handling

    async def drain(self) -> None:
        """Apply what the engine said changed: fetch those rows only, repaint those rows."""
        if self.host is None or self._draining:
            return
        self._draining = True
        self._drains = [self._drains[1], asyncio.get_running_loop().time()]
        try:
            await self._apply_dirty()
            if self._status_dirty:
                self._status_dirty = False
                self.show_status()
            if self._ticker_dirty:
                self._ticker_dirty = False
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
        store = self.host.store
        occ_ids, self._dirty_occ = self._dirty_occ, set()
        task_ids, self._dirty_tasks = self._dirty_tasks, set()
        rows_moved = False
        if occ_ids:
            # A run's end can write rows nobody announced (its queued retry, a buffered
            # slot): take whatever is newer than the newest row shown, too.
            newer = await store.newest_occurrences(
                self.occ_rows.window, self.occ_rows.newest_id, **self.occ_rows.query()
            )
            occ_ids |= {o.id for o in newer}
            for occ in await store.occurrences_by_id(sorted(occ_ids)):
                old = self.occ_rows.by_id.get(occ.id)
                self._tell_failure(old, occ)
                kept = self.occ_rows.upsert(occ)
                if kept:
                    self.note_worker(occ)
                # rows came or went (a new run, or one a state filter now hides): resize
                rows_moved |= (old is None) == kept
                task_ids.add(occ.task_id)
        if task_ids:
            await self._refresh_tasks(task_ids)
        if rows_moved:
            self.occ_table.sync_size()
            self._titles()
        elif occ_ids:
            for occ_id in occ_ids:
                index = self.occ_rows.index_of(occ_id)
                if index is not None:
                    self.occ_table.refresh_row(index)

    def _tell_failure(self, old: Occurrence | None, occ: Occurrence) -> None:
        """A run that just ended failed: a toast (and the bell when [ui] bell is on)."""
        message = self.notices.failed_run(old, occ, asyncio.get_running_loop().time())
        if message is not None:
            self.notify(message, title=f"Run {occ.id} failed", severity="error")
            if self.ring_bell:
                self.bell()

    async def _refresh_tasks(self, ids: set[int]) -> None:
        store = self.host.store
        ordered = sorted(ids)
        found = await store.tasks_by_id(ordered)
        stats = await store.task_stats(ordered)
        before = len(self.task_rows)
        for task in found:
            if task.id in stats:
                task.stats = stats[task.id]
            told = self.notices.paused_task(self.task_rows.by_id.get(task.id), task)
            if told is not None:
                self.notify(told, title="Task paused", severity="error", timeout=30)
            if self.task_rows.upsert(task):
                before = -1  # added or moved (a sort by NEXT moves a task that ran)
        for gone in ids - {t.id for t in found}:
            if gone in self.task_rows.by_id:
                self.task_rows.remove(gone)
                before = -1
        if before != len(self.task_rows):
            self.tasks_table.sync_size()
            return
        for task in found:
            index = self.task_rows.index_of(task.id)
            if index is not None:
                self.tasks_table.refresh_row(index)

    async def look_outside(self) -> None:
        """Commits by another connection (a `tickui task ...`, a second tickui) move
        data_version; then compare narrow task versions and fetch newer occurrences."""
        if self.host is None or self.host.closed:
            return
        store = self.host.store
        try:
            version = await store.data_version()
            if version == self._data_version:
                return
            self._data_version = version
            versions = await store.task_versions()
            known = self.task_rows.by_id
            changed = {
                task_id
                for task_id, (updated, nxt, enabled, gen) in versions.items()
                if (t := known.get(task_id)) is None
                or (t.updated_at, t.next_run_at, int(t.enabled), t.generation)
                != (updated, nxt, enabled, gen)
            }
            changed |= set(known) - set(versions)
            newer = await store.newest_occurrences(
                self.occ_rows.window, self.occ_rows.newest_id, **self.occ_rows.query()
            )
            self.mark(changed, [o.id for o in newer] + self.occ_rows.active_ids())
            self._status_dirty = True
            self.workers_due(committed=True)
        except Exception as exc:
            self.notify(redact(f"could not read the database: {exc}"), severity="error")

    async def second(self) -> None:
        """Once a second: look for other processes' commits, then move countdowns,
        durations and the clock. While ticks come at least once a second, the drain after
        a tick does the repaint (one frame a second for both); this timer does it when they
        do not, or stall. Nothing polls faster than the screen changes."""
        if self.host is None:
            return
        await self.look_outside()
        since = self._since_second()
        if since >= 1.5 or (since >= 0.9 and not self._ticks_drive_seconds()):
            self._each_second()
            if not self._ticks_drive_seconds():
                self.show_ticker()  # the breaker's probe countdown, between slow ticks
        if self._dirty():  # a safety net: nothing marked is left waiting
            self._wake()

    async def _beat(self) -> None:
        """A tick came: it does the second's work (in the same frame as its own changes),
        and the one-second timer sleeps until ticks stop coming (STALLED s without one),
        so an idle dashboard wakes once a second, not twice."""
        loop = asyncio.get_running_loop()
        self._second_timer.pause()
        if self._stalled is not None:
            self._stalled.cancel()
        self._stalled = loop.call_later(STALLED, self._second_timer.resume)
        if self._since_second() >= 0.9:
            self._each_second()  # before any await: one frame with the tick's own changes
            await self.look_outside()

    def _ticks_drive_seconds(self) -> bool:
        ticker = self.host.ticker
        return ticker.is_running and ticker.config.interval_ms <= 1000

    def _since_second(self) -> float:
        return asyncio.get_running_loop().time() - self._last_second

    def _each_second(self) -> None:
        """Repaint the cells whose text changed (countdowns, durations) and the clock;
        nothing else."""
        self._last_second = asyncio.get_running_loop().time()
        self.tasks_table.refresh_changed()
        self.occ_table.refresh_changed()
        self.show_status()
        self._titles()  # "↑ N newer above" follows the Occurrences pane's scroll
        self.workers_due()  # "2s ago", and the heartbeats the engine recorded

    def show_status(self) -> None:
        """The header, on the dashboard even while a dialog is over it. Tells the user when
        this engine lost the lease it held."""
        host = self.host
        status = host.engine.status()
        lost = self.notices.lease(status)
        if lost is not None:
            self.notify(lost, title="Lease lost", severity="error")
        waiting = host.engine.dispatcher.active() if self._waiting else None
        with contextlib.suppress(Exception):
            self.dashboard.query_one(StatusLine).show(
                short_path(host.db),
                status,
                host.ticker.status,
                host.clock.now(),
                host.clock.scale,
                host.demo,
                self.view.zone(),
                self.view.label(),
                waiting,
            )

    def show_ticker(self) -> None:
        """Ticks and breaker panes and the banner, on the dashboard even under a dialog."""
        ticker = self.host.ticker
        metrics = ticker.metrics()
        self._tell_breaker(metrics)
        with contextlib.suppress(Exception):
            screen = self.dashboard
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
            self._failures_were_on = False

    def _breaker_note(self, metrics) -> str:
        if metrics.simulating_failures or not self._failures_were_on:
            return ""
        if metrics.breaker_state == CLOSED:
            return ""
        retry = metrics.breaker_retry_in_s
        if retry is None:
            return "f is off: closes on its next probe"
        at = self._now() + round(retry * 1_000_000)
        clock = clock_in(at, self.view.zone())
        return f"f is off: closes on its next probe at {clock} (in {retry:.0f}s)"

    # ---- actions ----------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if isinstance(self.screen, RunScreen) and action not in ("help", "quit"):
            return False  # the run view shows its own keys
        if isinstance(self.screen, DetailScreen) and action not in DETAIL_APP_ACTIONS:
            return False  # the detail shows its own keys (and help, quit, enter opens a run)
        if self._waiting and action in QUITTING_OFF:  # quitting: c cancels what it waits for
            return False
        if action in TASK_ACTIONS and isinstance(self.screen, ModalScreen):
            return False
        if action in VIEW_ACTIONS and self.screen is not self.dashboard:
            return False
        if action in TASK_ACTIONS or action in ("toggle_engine", "toggle_ticker"):
            return self.host is not None and self.ready.is_set()
        return True

    # ---- engine, ticker, simulated failures ----------------------------------------

    @work(exclusive=True, group="engine")
    async def action_toggle_engine(self) -> None:
        engine = self.host.engine
        if engine.running:
            active = engine.dispatcher.active()
            if active:
                self.notify(f"stopping the engine: waiting for {active} active run(s)")
            await engine.stop()
            self.notify("engine stopped")
        else:
            await engine.start()
            self.notify("engine started")
        self._status_dirty = True
        self.refresh_bindings()

    @work(exclusive=True, group="ticker")
    async def action_toggle_ticker(self) -> None:
        ticker = self.host.ticker
        if ticker.is_running:
            await ticker.stop()
            self.notify("ticker stopped: the engine waits for ticks")
        else:
            try:
                await ticker.start()
            except Exception as exc:
                self.notify(redact(f"ticker did not start: {exc}"), severity="error")
                return
            self.notify("ticker started")
        self._status_dirty = self._ticker_dirty = True

    def action_toggle_failures(self) -> None:
        """On the demo's own database at once; on a real one (its ticks matter to someone)
        only after a yes."""
        ticker = self.host.ticker
        if ticker.simulate_failures or self.host.demo:
            self._set_failures(not ticker.simulate_failures)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._set_failures(True)

        self.push_screen(
            ConfirmScreen(
                "Fail every tick publish on purpose? This is not the demo's database: "
                "consumers of these ticks miss them until you press f again.",
                yes_label="Fail publishes (y)",
                no_label="Keep publishing (n)",
            ),
            answered,
        )

    def _set_failures(self, on: bool) -> None:
        ticker = self.host.ticker
        ticker.simulate_failures = on
        if not on and ticker.breaker.state != CLOSED:
            self._failures_were_on = True
        self.notify(f"simulated publish failures {'on' if on else 'off'}", severity="warning")
        self._ticker_dirty = True
        self.show_ticker()

    # ---- help, palette, quitting --------------------------------------------------------

    def action_hooks(self) -> None:
        host = self.host
        if host is None:
            return
        hooks = host.hooks
        self.push_screen(
            HooksScreen(
                host.store.recent_deliveries,
                lambda: hooks.status() if hooks is not None else None,
                self.view.zone(),
            )
        )

    def action_help(self) -> None:
        screen = self.screen
        kind = (
            "run"
            if isinstance(screen, RunScreen)
            else "detail"
            if isinstance(screen, DetailScreen)
            else "dashboard"
        )
        self.push_screen(HelpScreen(help_groups(kind)))

    async def action_quit(self) -> None:
        if self._waiting:  # already on the way out: say so, and how to hurry it
            active = self.host.engine.dispatcher.active() if self.host else 0
            self.notify(f"already quitting: waiting for {active} run(s); c cancels them")
            return
        active = self.host.engine.dispatcher.active() if self.host else 0
        if not active:
            await self._leave(None)
            return

        def chosen(choice: str | None) -> None:
            if choice == "wait":
                self._wait_and_leave()
            elif choice is not None:
                self.call_later(self.hang_up)

        self.push_screen(QuitScreen(active), chosen)

    @work(exclusive=True, group="quit")
    async def _wait_and_leave(self) -> None:
        """Quit after the active runs end; meanwhile the header counts them down and `c`
        cancels them (the dashboard stays live: this waits in a worker)."""
        self._waiting = True
        self._status_dirty = True
        self.refresh_bindings()
        self.show_status()
        self._leaving = asyncio.current_task()
        await self.host.close(WAIT_FOREVER)
        self.exit(0)

    async def hang_up(self) -> None:
        """What `q` then "cancel them" does (also SIGHUP and SIGTERM): every active run
        cancelled and recorded, the host closed, exit 0."""
        host = self.host
        if host is not None and self._waiting:  # close() is already waiting for the runs
            ids = [o.id for o in await host.store.active_occurrences()]
            for occ_id in ids:
                with contextlib.suppress(Exception):
                    await host.engine.cancel(occ_id)
            waiter = self._leaving
            if waiter is not None and waiter is not asyncio.current_task():
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(asyncio.shield(waiter), 30)
            self.exit(0)
            return
        await self._leave(0.0)

    async def _leave(self, grace: float | None) -> None:
        if self.host is not None:
            await self.host.close(grace)
        self.exit(0)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's own (theme, keys, quit, ...) once, then tickui's: no duplicates."""
        seen: set[str] = set()
        for command in super().get_system_commands(screen):
            seen.add(command.title.lower())
            yield command
        for key, action, label, text in KEYS:
            if action in ("focus_next", "quit") or label.lower() in seen:
                continue
            yield SystemCommand(f"{label} ({SHOWN_KEY.get(key, key)})", text, _runner(self, action))


def _runner(app: TickuiApp, action: str) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        await app.run_action(action)

    return run
