"""The tickui dashboard: the engine and ticker in the UI's own loop, shown live.

Engine and ticker only record what changed (ids, a flag); a short timer drains that
into the panes, so no widget is touched from engine code and a burst repaints once.
Another process's commits are noticed through `PRAGMA data_version`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from textual import work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen
from textual.theme import Theme
from textual.widgets import Input

from tickui.breaker import CLOSED, OPEN
from tickui.engine import EngineChange, RunNowRefused, queue_run_now
from tickui.errors import TickuiError
from tickui.models import Occurrence, Task
from tickui.redact import redact, safe_text
from tickui.spec import TaskSpec
from tickui.ui import settings as saved
from tickui.ui.cells import MODES, TimeView, occurrence_cells, outcome_code, task_cells
from tickui.ui.columns import OCCURRENCE_COLUMNS, TASK_COLUMNS, CellSource
from tickui.ui.detail import DetailScreen, DetailSource
from tickui.ui.dialogs import ConfirmScreen, HelpScreen, QuitScreen
from tickui.ui.form import AddTaskScreen
from tickui.ui.host import Host
from tickui.ui.output import RunScreen, RunSource
from tickui.ui.panes import Banner, BreakerPane, KeyFooter, StatusLine, TablePane, TicksPane
from tickui.ui.rows import OccurrenceRows, TaskRows
from tickui.ui.table import RowTable

DRAIN_EVERY = 0.05  # drains (repaints of what changed): on average at most this often
DRAIN_DELAY = 0.01  # a drain waits this long after the first mark, to gather a burst
EXTERNAL_EVERY = 0.5  # another process's commits are looked for this often
NARROW = 110  # below this width the side panes move under the tables
SHORT = 30  # below this height the narrow layout drops the sparkline
WAIT_FOREVER = 24 * 3600.0
FAILURE_QUIET = 60.0  # s: a task that keeps failing raises one toast in this long

HostFactory = Callable[[], Awaitable[Host]]


@dataclass(frozen=True)
class Key:
    key: str
    action: str
    label: str  # in the footer and the palette
    text: str  # in the help screen
    rank: int  # the footer drops high ranks first when narrow; 0 always shows
    show: bool = True


KEY_GROUPS: list[tuple[str, list[Key]]] = [
    ("Runs", [
        Key("r", "run_now", "Run now", "Run the selected task now (its schedule does not move)", 2),
        Key("enter", "detail", "Open",
            "Open: a task's detail (Tasks pane) or a run's output (Occurrences pane)", 3),
        Key("c", "cancel_run", "Cancel run",
            "Cancel the selected running occurrence (asks first); while quitting: all of them", 4),
    ]),
    ("Tasks", [
        Key("a", "add_task", "Add", "Add a task (the form checks it as you type)", 6),
        Key("E", "edit_task", "Edit", "Edit the selected task (the add form, filled in)", 9),
        Key("e", "toggle_enabled", "Enable/disable", "Enable or disable the selected task", 5),
        Key("d", "delete_task", "Delete", "Delete the selected task (asks first; history stays)",
            10),
    ]),
    ("View", [
        Key("slash", "filter", "Filter",
            "Filter the focused pane by task name (enter keeps it, esc clears it)", 7),
        Key("F", "cycle_state", "State",
            "Occurrences: show all, failed, running or not skipped runs", 12),
        Key("T", "follow_task", "Follow",
            "Occurrences: only the selected task's runs (again: every task's)", 13),
        Key("S", "cycle_sort", "Sort",
            "Tasks: sort by the next column; click a header to sort by it, again to reverse",
            11),
        Key("z", "cycle_zone", "Zone", "Times in local time, UTC or each task's own zone", 14),
        Key("H", "toggle_side", "Side panes", "Hide or show the Ticks and breaker panes", 15),
        Key("tab", "focus_next", "Next pane", "Move between the Tasks and Occurrences panes", 20,
            show=False),
    ]),
    ("Engine", [
        Key("s", "toggle_engine", "Start/stop engine", "Start or stop the engine", 8),
        Key("t", "toggle_ticker", "Start/stop ticker", "Start or stop the tick emitter", 16),
        Key("f", "toggle_failures", "Fail publishes",
            "Simulate publish failures (watch the breaker; asks first on a real database)", 17),
    ]),
    ("App", [
        Key("question_mark", "help", "Help", "This help", 0),
        Key("q", "quit", "Quit", "Quit (asks about active runs)", 0),
    ]),
]  # fmt: skip
KEYS = [(k.key, k.action, k.label, k.text) for _, keys in KEY_GROUPS for k in keys]
RANKS = {k.action: k.rank for _, keys in KEY_GROUPS for k in keys}
SHOWN_KEY = {"question_mark": "?", "slash": "/"}

# Keys that act on the dashboard's panes: off under dialogs (the detail screen uses some).
TASK_ACTIONS = (
    "run_now", "toggle_enabled", "delete_task", "detail", "cancel_run", "add_task", "filter",
    "toggle_failures", "edit_task",
)  # fmt: skip
VIEW_ACTIONS = ("cycle_state", "follow_task", "cycle_sort", "cycle_zone", "toggle_side")
QUITTING_OFF = frozenset(TASK_ACTIONS + VIEW_ACTIONS + ("toggle_engine", "toggle_ticker")) - {
    "cancel_run"
}  # keys that mean nothing while quit waits for the runs


def _rank(action: str) -> int:
    return RANKS.get(action, 50)


class Dashboard(Screen[None]):
    """The main screen. Its layout classes follow its own size on every resize (the app's
    size moves before the screen is laid out again, so classes set there came a resize
    late)."""

    def __init__(self, tasks: RowTable, occurrences: RowTable) -> None:
        super().__init__()
        self.tasks = tasks
        self.occurrences = occurrences

    def compose(self) -> ComposeResult:
        yield StatusLine(id="status")
        yield Banner("", id="banner")
        with Horizontal(id="body"):
            with Vertical(id="tables"):
                yield TablePane("Tasks", self.tasks, id="tasks-pane")
                yield TablePane("Occurrences (newest first)", self.occurrences, id="occ-pane")
            with Vertical(id="side"):
                yield TicksPane(id="ticks")
                yield BreakerPane(id="breaker")
        yield Input(placeholder="filter by task name (enter keeps, esc clears)", id="filter")
        yield KeyFooter(_rank, id="footer")

    def on_mount(self) -> None:
        self.tasks.focus()
        self.lay_out(self.app.size.width, self.app.size.height)

    def on_resize(self, event) -> None:
        self.lay_out(event.size.width, event.size.height)

    def lay_out(self, width: int, height: int) -> None:
        narrow, short = width < NARROW, height < SHORT
        if self.has_class("-narrow") != narrow or self.has_class("-short") != short:
            self.set_class(narrow, "-narrow")
            self.set_class(short, "-short")
            self.refresh(layout=True)


class TickuiApp(App[int]):
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
    ) -> None:
        """`settings_file`: where view choices are kept (default: the user's config folder;
        fixed scenes such as screenshots give their own)."""
        super().__init__()
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
        self.occ_cells = CellSource(self.occ_rows, occurrence_cells)
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
        self._breaker_state: str | None = None
        self._lease_state: str | None = None
        self._failures_were_on = False  # `f` was on: say when the breaker closes again
        self._save_failed = False
        self._waiting = False  # quitting, waiting for active runs
        self._leaving: asyncio.Task | None = None
        self._newest_at_load = 0  # failures up to this occurrence id were there before us
        self._filtering_occ = False  # the filter box filters the Occurrences pane (else Tasks)
        self._failures_told: dict[int, tuple[float, int]] = {}  # task: (told at, not told)
        self.failure: str | None = None
        if self.prefs.theme:
            with contextlib.suppress(Exception):  # a theme this Textual does not know
                self.theme = self.prefs.theme

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
        self._titles()
        await host.start()
        self.set_interval(EXTERNAL_EVERY, self.look_outside)
        self.set_interval(1.0, self.second)
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
        self._newest_at_load = newest[0].id if newest else 0
        await self._load_occurrences()
        self.tasks_table.sync_size()

    async def _load_occurrences(self) -> None:
        """The newest occurrences that pass the Occurrences pane's filters (again after a
        filter changed); the cursor stays on the same occurrence when it is still shown."""
        rows = self.occ_rows
        rows.load(await self.host.store.newest_occurrences(rows.window, **rows.query()))
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
                if self._ticks_drive_seconds() and self._since_second() >= 0.9:
                    self._each_second()  # in the same frame as the tick's own changes
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
        occ_added = False
        if occ_ids:
            for occ in await store.occurrences_by_id(sorted(occ_ids)):
                old = self.occ_rows.by_id.get(occ.id)
                self._tell_failure(old, occ)
                self.occ_rows.upsert(occ)
                occ_added |= old is None and occ.id in self.occ_rows.by_id
                task_ids.add(occ.task_id)
        if task_ids:
            await self._refresh_tasks(task_ids)
        if occ_added:
            self.occ_table.sync_size()
        elif occ_ids:
            for occ_id in occ_ids:
                index = self.occ_rows.index_of(occ_id)
                if index is not None:
                    self.occ_table.refresh_row(index)

    def _tell_failure(self, old: Occurrence | None, occ: Occurrence) -> None:
        """A run that just ended failed: a toast naming the task and its code (and the bell
        when [ui] bell is on). One seen failed before is not told again, and a task that
        keeps failing is told at most once a minute (with how many more failed)."""
        if occ.state != "failed" or (old is not None and old.state == "failed"):
            return
        if old is None and occ.id <= self._newest_at_load:
            return  # a failure from before this dashboard started: not news
        now = asyncio.get_running_loop().time()
        told, unsaid = self._failures_told.get(occ.task_id, (-FAILURE_QUIET, 0))
        if now - told < FAILURE_QUIET:
            self._failures_told[occ.task_id] = (told, unsaid + 1)
            return
        self._failures_told[occ.task_id] = (now, 0)
        code = outcome_code(occ)
        detail = safe_text((occ.detail or "").replace("\n", " "))[:80]
        more = f" ({unsaid} more failed since the last notice)" if unsaid else ""
        self.notify(
            f"{occ.task} failed ({code}){': ' + detail if detail else ''}{more}",
            title=f"Run {occ.id} failed",
            severity="error",
        )
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
        except Exception as exc:
            self.notify(redact(f"could not read the database: {exc}"), severity="error")

    def second(self) -> None:
        """Countdowns, durations and the clock move every second. While ticks come at
        least once a second, the drain after a tick does this (one frame a second for both);
        this timer does it when they do not, or stall."""
        if self.host is None:
            return
        since = self._since_second()
        if since >= 1.5 or (since >= 0.9 and not self._ticks_drive_seconds()):
            self._each_second()
            if not self._ticks_drive_seconds():
                self.show_ticker()  # the breaker's probe countdown, between slow ticks
        if self._dirty():  # a safety net: nothing marked is left waiting
            self._wake()

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

    def show_status(self) -> None:
        """The header, on the dashboard even while a dialog is over it. Tells the user when
        this engine lost the lease it held."""
        host = self.host
        status = host.engine.status()
        if self._lease_state == "held" and status.lease_state != "held" and status.running:
            self.notify(
                f"this dashboard's engine lost the lease ({status.lease_state}"
                f"{', held by ' + status.holder if status.holder else ''}): it runs nothing"
                " until it holds it again",
                title="Lease lost",
                severity="error",
            )
        self._lease_state = status.lease_state
        waiting = host.engine.dispatcher.active() if self._waiting else None
        with contextlib.suppress(Exception):
            self.dashboard.query_one(StatusLine).show(
                _short(host.db),
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
        state = metrics.breaker_state
        if state == OPEN and self._breaker_state not in (None, OPEN):
            reason = metrics.transitions[-1]["reason"] if metrics.transitions else ""
            reason = safe_text(reason or metrics.last_error or "too many failed publishes")
            self.notify(f"tick publishes stop for a while: {reason}", title="Breaker open",
                        severity="error")  # fmt: skip
        self._breaker_state = state
        if state == CLOSED:
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
        clock = datetime.fromtimestamp(at / 1_000_000, self.view.zone()).strftime("%H:%M:%S")
        return f"f is off: closes on its next probe at {clock} (in {retry:.0f}s)"

    # ---- what is selected -------------------------------------------------------------

    def selected_task(self) -> Task | None:
        """The task highlighted now, by id: in the Tasks pane, or the selected
        occurrence's task in the Occurrences pane, or the detail screen's."""
        if isinstance(self.screen, DetailScreen):
            return self.screen.task_row
        if self.focused is self.occ_table:
            occ = self.selected_occurrence()
            return self.task_rows.by_id.get(occ.task_id) if occ is not None else None
        key = self.tasks_table.selected_key
        return self.task_rows.by_id.get(key) if key is not None else None

    def selected_occurrence(self) -> Occurrence | None:
        """The occurrence highlighted now (by id); from the Tasks pane, the selected task's
        newest active run."""
        if self.focused is self.occ_table:
            key = self.occ_table.selected_key
            return self.occ_rows.by_id.get(key) if key is not None else None
        key = self.tasks_table.selected_key
        if key is None:
            return None
        running = [o for o in self.occ_rows.by_id.values() if o.task_id == key and o.active]
        return max(running, key=lambda o: o.id) if running else None

    def _need_task(self) -> Task | None:
        task = self.selected_task()
        if task is None:
            self.notify("no task selected", severity="warning")
        return task

    # ---- actions ----------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if isinstance(self.screen, RunScreen) and action not in ("help", "quit"):
            return False  # the run view shows its own keys
        if self._waiting and action in QUITTING_OFF:  # quitting: c cancels what it waits for
            return False
        if action in TASK_ACTIONS and isinstance(self.screen, ModalScreen):
            return False
        if action in VIEW_ACTIONS and self.screen is not self.dashboard:
            return False
        if action in TASK_ACTIONS or action in ("toggle_engine", "toggle_ticker"):
            return self.host is not None and self.ready.is_set()
        return True

    async def action_run_now(self) -> None:
        task = self._need_task()
        if task is None:
            return
        engine = self.host.engine
        try:
            if engine.running and engine.holds_lease:
                occ = await engine.run_now(task.name)
                self.mark([task.id], [occ.id])
                self.notify(f"started {task.name}: occurrence {occ.id}")
            else:
                await self._queue_run_now(task)
        except RunNowRefused as exc:
            self.notify(
                f"{task.name}: {exc.reason} ({exc.code})",
                title="Run now refused",
                severity="warning",
            )
        except TickuiError as exc:
            self.notify(redact(str(exc)), title="Run now failed", severity="error")
        await self.drain()

    async def _queue_run_now(self, task: Task) -> None:
        """Not the lease holder: leave a request for whoever holds it (or starts next)."""
        await queue_run_now(self.host.store, task, self.clock.now())
        where = (
            "the lease holder runs it"
            if self.host.engine.running
            else "the engine is stopped; it runs when an engine starts"
        )
        self.notify(f"queued run-now of {task.name}: {where}")

    async def action_toggle_enabled(self) -> None:
        task = self._need_task()
        if task is None:
            return
        try:
            await self.host.store.set_enabled(task.name, not task.enabled, self.clock.now())
        except TickuiError as exc:
            self.notify(redact(str(exc)), severity="error")
            return
        self.notify(f"{'disabled' if task.enabled else 'enabled'} {task.name}")
        self.mark([task.id])
        await self.drain()

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

    def action_detail(self) -> None:
        if isinstance(self.screen, DetailScreen):  # enter on a run picked in the detail
            self.screen.action_open_selected()
            return
        if self.focused is self.occ_table:
            occ = self.selected_occurrence()
            if occ is not None:
                self.open_run(occ)
            return
        task = self._need_task()
        if task is not None:
            self.push_screen(DetailScreen(task, self._detail_source()))

    def _detail_source(self) -> DetailSource:
        assert self.host is not None
        return DetailSource(
            current_task=lambda task: self.task_rows.by_id.get(task.id, task),
            history=lambda name, limit: self.host.store.history(name, limit=limit),
            now=self._now,
            cancel=self.cancel_occurrence,
            open_run=self.open_run,
            view=lambda: self.view,
        )

    def open_run(self, occ: Occurrence) -> None:
        """That run's facts and whole output (from the Occurrences pane or a task's runs)."""
        assert self.host is not None
        store = self.host.store

        async def occurrence(occ_id: int) -> Occurrence | None:
            found = await store.occurrences_by_id([occ_id])
            return found[0] if found else None

        def zone(run: Occurrence):
            task = self.task_rows.by_id.get(run.task_id)
            return self.view.zone(task.spec.tz if task is not None else None)

        self.push_screen(RunScreen(occ, RunSource(occurrence, self._now, _short_text, zone)))

    def action_add_task(self) -> None:
        self.push_screen(
            AddTaskScreen(self._now, zone_for_preview=self._preview_zone()), self._added
        )

    def _preview_zone(self):
        """The form previews fire times in the zone the dashboard shows (task mode: the
        task's own)."""
        return None if self.view.mode == "task" else self.view.zone()

    async def _added(self, spec: TaskSpec | None) -> None:
        if spec is None:
            return
        try:
            task = await self.host.store.add_task(spec, self.clock.now(), source="ui")
        except TickuiError as exc:
            self.notify(redact(str(exc)), title="Not added", severity="error")
            return
        self.notify(f"added {task.name}")
        self.mark([task.id])
        await self.drain()
        self.tasks_table.select_key(task.id)

    def action_edit_task(self) -> None:
        """The add form filled in with the task highlighted now; saved through the same
        checks (a bad or taken name changes nothing)."""
        task = self._need_task()
        if task is None:
            return

        async def edited(spec: TaskSpec | None) -> None:
            if spec is None:
                return
            try:
                changed = await self.host.store.edit_task(task.name, spec, self.clock.now())
            except TickuiError as exc:
                self.notify(redact(str(exc)), title="Not saved", severity="error")
                return
            self.notify(f"saved {changed.name}")
            self.mark([changed.id])
            await self.drain()

        self.push_screen(
            AddTaskScreen(self._now, task=task, zone_for_preview=self._preview_zone()), edited
        )

    def action_delete_task(self) -> None:
        task = self._need_task()
        if task is None:
            return

        async def answered(yes: bool | None) -> None:
            if not yes:
                return
            try:
                await self.host.store.remove_task(task.name)
            except TickuiError as exc:
                self.notify(redact(str(exc)), severity="error")
                return
            self.notify(f"deleted {task.name}; its history stays")
            self.mark([task.id])
            await self.drain()

        self.push_screen(
            ConfirmScreen(
                f"Delete task {task.name}? Its history stays.",
                yes_label="Delete (y)",
                no_label="Keep (n)",
            ),
            answered,
        )

    async def action_cancel_run(self) -> None:
        if self._waiting:
            await self.hang_up()
            return
        await self.cancel_occurrence(self.selected_occurrence())

    async def cancel_occurrence(self, occ: Occurrence | None) -> None:
        """Ask first, naming the run; `y` cancels exactly that occurrence id."""
        if occ is None or not occ.active:
            self.notify(
                "no running occurrence selected", title="Cancel refused", severity="warning"
            )
            return
        started = occ.started_at or occ.scheduled_for
        task = self.task_rows.by_id.get(occ.task_id)
        zone = self.view.zone(task.spec.tz if task is not None else None)
        clock = datetime.fromtimestamp(started / 1_000_000, zone).strftime("%H:%M:%S")
        word = "started" if occ.started_at is not None else "scheduled"

        async def answered(yes: bool | None) -> None:
            if yes:
                await self._cancel(occ)

        self.push_screen(
            ConfirmScreen(
                f"Cancel run {occ.id} ({occ.task}, {word} {clock})?",
                yes_label="Cancel run (y)",
                no_label="Keep (n)",
            ),
            answered,
        )

    async def _cancel(self, occ: Occurrence) -> None:
        if not await self.host.engine.cancel(occ.id):
            self.notify(
                f"occurrence {occ.id} is not run by this engine (or it already ended)",
                title="Cancel refused",
                severity="warning",
            )
            return
        self.notify(f"cancelling occurrence {occ.id} ({occ.task})")
        self.mark([occ.task_id], [occ.id])

    # ---- view: filters, sort, zone, side panes ----------------------------------------

    def _filter_box(self) -> Input:
        return self.dashboard.query_one("#filter", Input)

    def action_filter(self) -> None:
        """One filter box; what it filters is the pane focused when `/` was pressed."""
        box = self._filter_box()
        occ = self.focused is self.occ_table
        self._filtering_occ = occ
        box.placeholder = (
            "occurrences: task name contains (enter keeps, esc clears)"
            if occ
            else "tasks: name contains (enter keeps, esc clears)"
        )
        with box.prevent(Input.Changed):
            box.value = self.occ_rows.text if occ else self.task_rows.filter
        box.display = True
        box.focus()

    async def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id != "filter":
            return
        if self._filtering_occ:  # remembered on enter or esc, not per key
            await self._filter_occurrences(save=False, text=event.value)
        else:
            self.task_rows.set_filter(event.value)
            self.tasks_table.sync_size()
            self._titles()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            if self._filtering_occ:
                self.remember(occ_text=self.occ_rows.text)
            event.input.display = False
            (self.occ_table if self._filtering_occ else self.tasks_table).focus()

    async def on_key(self, event) -> None:
        box = self.focused
        if event.key == "escape" and isinstance(box, Input) and box.id == "filter":
            event.stop()
            box.value = ""  # clears that pane's filter (through Input.Changed)
            if self._filtering_occ:
                self.remember(occ_text="")
            box.display = False
            (self.occ_table if self._filtering_occ else self.tasks_table).focus()

    async def _filter_occurrences(self, save: bool = True, **changes: object) -> None:
        """Change the Occurrences pane's filters and read its rows again from the store."""
        rows = self.occ_rows
        current = {"text": rows.text, "state": rows.state, "task_id": rows.task_id}
        current.update(changes)
        task = self.task_rows.by_id.get(current["task_id"] or -1)
        rows.set_filter(**current, task_name=task.name if task is not None else None)
        if save:
            self.remember(occ_text=current["text"], occ_state=current["state"])
        self._titles()
        if self.host is not None:
            keep = self.occ_table.selected_key
            await self._load_occurrences()
            if keep is not None and keep in rows.by_id:
                self.occ_table.select_key(keep)

    async def action_cycle_state(self) -> None:
        states = OccurrenceRows.STATES
        now = self.occ_rows.state
        await self._filter_occurrences(state=states[(states.index(now) + 1) % len(states)])

    async def action_follow_task(self) -> None:
        """Only the highlighted occurrence's (or task's) runs; pressed again, every task's."""
        if self.occ_rows.task_id is not None:
            await self._filter_occurrences(task_id=None)
            return
        task = self.selected_task()
        if task is None:
            self.notify("no task selected", severity="warning")
            return
        await self._filter_occurrences(task_id=task.id)

    def action_cycle_sort(self) -> None:
        """The next sortable column, ascending (a header click picks one, or reverses)."""
        columns = TaskRows.SORTABLE
        title, _ = self.task_rows.sort
        nxt = columns[(columns.index(title) + 1) % len(columns)] if title in columns else "NEXT"
        self._sort(nxt, False)

    def _sort(self, title: str, descending: bool) -> None:
        keep = self.tasks_table.selected_key
        self.task_rows.set_sort(title, descending)
        self.tasks_table.sync_size()
        if keep is not None:
            self.tasks_table.select_key(keep)
        self.remember(sort_column=title, sort_descending=descending)
        self._titles()

    def on_row_table_header_clicked(self, event) -> None:
        if event.table is not self.tasks_table or event.column_title not in TaskRows.SORTABLE:
            return
        title, descending = self.task_rows.sort
        self._sort(event.column_title, not descending if title == event.column_title else False)

    def action_cycle_zone(self) -> None:
        self.view = TimeView(MODES[(MODES.index(self.view.mode) + 1) % len(MODES)])
        self.task_cells.view = self.occ_cells.view = self.view
        self.remember(zone=self.view.mode)
        self.tasks_table.refresh()
        self.occ_table.refresh()
        if self.host is not None:
            self.show_status()
            self.show_ticker()
        self.notify(f"times in {self.view.label()}")

    def action_toggle_side(self) -> None:
        self.remember(side_hidden=not self.prefs.side_hidden)
        self._side_shown()

    def _side_shown(self) -> None:
        with contextlib.suppress(Exception):
            self.dashboard.query_one("#side").display = not self.prefs.side_hidden

    def _titles(self) -> None:
        """Filters and sort in the pane titles: what the panes leave out is never hidden."""
        if not self.dashboard.is_mounted:
            return
        tasks = self.dashboard.query_one("#tasks-pane")
        occ = self.dashboard.query_one("#occ-pane")
        title, descending = self.task_rows.sort
        text = f"Tasks · by {title} {'▼' if descending else '▲'}"
        if self.task_rows.filter:
            shown = f"{len(self.task_rows)} of {self.task_rows.total}"
            text += f" · {shown} match {self.task_rows.filter!r}"
        tasks.border_title = text
        label = self.occ_rows.filter_label()
        occ.border_title = "Occurrences" + (f" · {label}" if label else " (newest first)")

    # ---- help, palette, quitting --------------------------------------------------------

    def action_help(self) -> None:
        groups = [
            (title, [(SHOWN_KEY.get(k.key, k.key), k.text) for k in keys])
            for title, keys in KEY_GROUPS
        ]
        groups.append(
            (
                "Moving",
                [
                    ("↑ ↓ pgup pgdn", "Move in a pane; mouse wheel and click work too"),
                    ("ctrl+p", "Command palette (all of the above, and themes)"),
                ],
            )
        )
        self.push_screen(HelpScreen(groups))

    async def action_quit(self) -> None:
        if self._waiting:
            return  # already on the way out; c cancels the runs
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


def _short_text(path: str) -> str:
    return _short(Path(path))


def _short(path: Path) -> str:
    home = str(Path.home())
    text = str(path)
    return "~" + text[len(home) :] if text.startswith(home + "/") else text
