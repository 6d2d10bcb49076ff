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
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input

from tickui.engine import EngineChange, RunNowRefused, queue_run_now
from tickui.errors import TickuiError
from tickui.models import Occurrence, Task
from tickui.redact import redact
from tickui.spec import TaskSpec
from tickui.ui.cells import occurrence_cells, task_cells
from tickui.ui.columns import OCCURRENCE_COLUMNS, TASK_COLUMNS, CellSource
from tickui.ui.detail import DetailScreen, DetailSource
from tickui.ui.dialogs import ConfirmScreen, HelpScreen, QuitScreen
from tickui.ui.form import AddTaskScreen
from tickui.ui.host import Host
from tickui.ui.output import RunScreen, RunSource
from tickui.ui.panes import Banner, BreakerPane, StatusLine, TablePane, TicksPane
from tickui.ui.rows import OccurrenceRows, TaskRows
from tickui.ui.table import RowTable

DRAIN_EVERY = 0.05  # drains (repaints of what changed): on average at most this often
DRAIN_DELAY = 0.01  # a drain waits this long after the first mark, to gather a burst
EXTERNAL_EVERY = 0.5  # another process's commits are looked for this often
NARROW = 110  # below this width the side panes move under the tables
WAIT_FOREVER = 24 * 3600.0

TASK_ACTIONS = (
    "run_now", "toggle_enabled", "delete_task", "detail", "cancel_run", "add_task", "filter",
    "toggle_failures",
)  # fmt: skip
HostFactory = Callable[[], Awaitable[Host]]

KEYS = [
    ("r", "run_now", "Run now", "Run the selected task now (its schedule does not move)"),
    ("e", "toggle_enabled", "Enable/disable", "Enable or disable the selected task"),
    ("s", "toggle_engine", "Start/stop engine", "Start or stop the engine"),
    ("t", "toggle_ticker", "Start/stop ticker", "Start or stop the tick emitter"),
    ("enter", "detail", "Detail", "Task detail: next fire times, runs, output"),
    ("a", "add_task", "Add", "Add a task (the form checks it as you type)"),
    ("d", "delete_task", "Delete", "Delete the selected task (asks first; history stays)"),
    ("c", "cancel_run", "Cancel run", "Cancel the selected running occurrence"),
    ("slash", "filter", "Filter", "Filter tasks by name"),
    ("f", "toggle_failures", "Fail publishes", "Simulate publish failures (watch the breaker)"),
    ("tab", "focus_next", "Next pane", "Move between the Tasks and Occurrences panes"),
    ("question_mark", "help", "Help", "This help"),
    ("q", "quit", "Quit", "Quit (asks about active runs)"),
]


class Dashboard(Screen[None]):
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
        yield Input(placeholder="filter tasks by name (enter keeps, esc clears)", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        self.tasks.focus()


class TickuiApp(App[int]):
    CSS_PATH = "tickui.tcss"
    TITLE = "tickui"
    BINDINGS = [
        Binding(key, action, label, show=key not in ("tab",))
        for key, action, label, _ in KEYS
        if action != "help"
    ] + [Binding("question_mark", "help", "Help", key_display="?")]

    def __init__(self, factory: HostFactory, *, header_clock: bool = True) -> None:
        super().__init__()
        self.factory = factory
        self.header_clock = header_clock
        self.host: Host | None = None  # type: ignore[assignment]
        self.ready = asyncio.Event()
        self.task_rows = TaskRows()
        self.occ_rows = OccurrenceRows()
        self.tasks_table = RowTable(
            TASK_COLUMNS, CellSource(self.task_rows, task_cells), self._now, id="tasks"
        )
        self.occ_table = RowTable(
            OCCURRENCE_COLUMNS,
            CellSource(self.occ_rows, occurrence_cells),
            self._now,
            id="occurrences",
        )
        self._dirty_tasks: set[int] = set()
        self._dirty_occ: set[int] = set()
        self._status_dirty = True
        self._ticker_dirty = True
        self._data_version: int | None = None
        self._draining = False
        self._drain_pending = False  # a drain is scheduled
        self._drains = [0.0, 0.0]  # loop times the last two drains started
        self._last_second = 0.0  # loop time countdowns and the clock were last looked at
        self.failure: str | None = None

    # ---- start and stop ---------------------------------------------------------------

    @property
    def clock(self):
        assert self.host is not None
        return self.host.clock

    def _now(self) -> int:
        return self.host.clock.now() if self.host is not None else 0

    def on_mount(self) -> None:
        self.push_screen(Dashboard(self.tasks_table, self.occ_table))
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
        await host.start()
        self.set_interval(EXTERNAL_EVERY, self.look_outside)
        self.set_interval(1.0, self.second)
        self.on_resize()
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
        self.occ_rows.load(await store.newest_occurrences(self.occ_rows.window))
        self.tasks_table.sync_size()
        self.occ_table.sync_size()

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
                occ_added |= occ.id not in self.occ_rows.by_id
                self.occ_rows.upsert(occ)
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

    async def _refresh_tasks(self, ids: set[int]) -> None:
        store = self.host.store
        ordered = sorted(ids)
        found = await store.tasks_by_id(ordered)
        stats = await store.task_stats(ordered)
        before = len(self.task_rows)
        for task in found:
            if task.id in stats:
                task.stats = stats[task.id]
            old = self.task_rows.by_id.get(task.id)
            self.task_rows.upsert(task)
            if old is None or old.name != task.name:
                before = -1
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
            newer = await store.newest_occurrences(self.occ_rows.window, self.occ_rows.newest_id)
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
        host = self.host
        with contextlib.suppress(Exception):
            self.screen.query_one(StatusLine).show(
                _short(host.db),
                host.engine.status(),
                host.ticker.status,
                host.clock.now(),
                host.clock.scale,
                host.demo,
            )

    def show_ticker(self) -> None:
        metrics = self.host.ticker.metrics()
        with contextlib.suppress(Exception):
            screen = self.screen
            screen.query_one(TicksPane).metrics = metrics
            screen.query_one(BreakerPane).metrics = metrics
            banner = screen.query_one(Banner)
            banner.display = metrics.simulating_failures
            if metrics.simulating_failures:
                banner.update(
                    " ⚠ SIMULATING PUBLISH FAILURES: every tick publish fails on purpose"
                    f" (breaker {metrics.breaker_state}). Press f to stop. "
                )

    def on_resize(self, event=None) -> None:
        self.set_class(self.size.width < NARROW, "-narrow")
        self.set_class(self.size.height < 30, "-short")

    # ---- what is selected -------------------------------------------------------------

    def selected_task(self) -> Task | None:
        if isinstance(self.screen, DetailScreen):
            return self.screen.task_row
        if self.focused is self.occ_table:
            occ = self.occ_rows.at(self.occ_table.cursor)
            if occ is not None:
                return self.task_rows.by_id.get(occ.task_id)
        return self.task_rows.at(self.tasks_table.cursor)

    def selected_occurrence(self) -> Occurrence | None:
        if self.focused is self.occ_table:
            return self.occ_rows.at(self.occ_table.cursor)
        task = self.task_rows.at(self.tasks_table.cursor)
        if task is None:
            return None
        running = [o for o in self.occ_rows.by_id.values() if o.task_id == task.id and o.active]
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
        if action in TASK_ACTIONS and isinstance(self.screen, ModalScreen):
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
        ticker = self.host.ticker
        ticker.simulate_failures = not ticker.simulate_failures
        state = "on" if ticker.simulate_failures else "off"
        self.notify(f"simulated publish failures {state}", severity="warning")
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
        if task is not None and not isinstance(self.screen, DetailScreen):
            self.push_screen(DetailScreen(task, self._detail_source()))

    def _detail_source(self) -> DetailSource:
        assert self.host is not None
        return DetailSource(
            current_task=lambda task: self.task_rows.by_id.get(task.id, task),
            history=lambda name, limit: self.host.store.history(name, limit=limit),
            now=self._now,
            cancel=self.cancel_occurrence,
            open_run=self.open_run,
        )

    def open_run(self, occ: Occurrence) -> None:
        """That run's facts and whole output (from the Occurrences pane or a task's runs)."""
        assert self.host is not None
        store = self.host.store

        async def occurrence(occ_id: int) -> Occurrence | None:
            found = await store.occurrences_by_id([occ_id])
            return found[0] if found else None

        self.push_screen(RunScreen(occ, RunSource(occurrence, self._now, _short_text)))

    def action_add_task(self) -> None:
        self.push_screen(AddTaskScreen(self._now), self._added)

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
        index = self.task_rows.index_of(task.id)
        if index is not None:
            self.tasks_table.move_to(index)

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

        self.push_screen(ConfirmScreen(f"Delete task {task.name}?"), answered)

    async def action_cancel_run(self) -> None:
        await self.cancel_occurrence(self.selected_occurrence())

    async def cancel_occurrence(self, occ: Occurrence | None) -> None:
        if occ is None or not occ.active:
            self.notify(
                "no running occurrence selected", title="Cancel refused", severity="warning"
            )
            return
        if not await self.host.engine.cancel(occ.id):
            self.notify(
                f"occurrence {occ.id} is not run by this engine",
                title="Cancel refused",
                severity="warning",
            )
            return
        self.notify(f"cancelling occurrence {occ.id} ({occ.task})")
        self.mark([occ.task_id], [occ.id])

    def action_filter(self) -> None:
        box = self.screen.query_one("#filter", Input)
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.task_rows.set_filter(event.value)
            self.tasks_table.cursor = 0
            self.tasks_table.sync_size()
            pane = self.screen.query_one("#tasks-pane")
            shown = f" · {len(self.task_rows)} of {self.task_rows.total} match {event.value!r}"
            pane.border_title = "Tasks" + (shown if event.value else "")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            event.input.display = bool(event.value)
            self.tasks_table.focus()

    def on_key(self, event) -> None:
        box = self.focused
        if event.key == "escape" and isinstance(box, Input) and box.id == "filter":
            box.value = ""
            box.display = False
            self.tasks_table.focus()
            event.stop()

    def action_help(self) -> None:
        keys = [
            ("?" if k == "question_mark" else "/" if k == "slash" else k, text)
            for k, _, _, text in KEYS
        ]
        keys += [
            ("↑ ↓ pgup pgdn", "Move in a pane; mouse wheel and click work too"),
            ("ctrl+p", "Command palette (all of the above, and themes)"),
        ]
        self.push_screen(HelpScreen(keys))

    async def action_quit(self) -> None:
        active = self.host.engine.dispatcher.active() if self.host else 0
        if not active:
            await self._leave(None)
            return

        async def chosen(choice: str | None) -> None:
            if choice is not None:
                await self._leave(WAIT_FOREVER if choice == "wait" else 0.0)

        self.push_screen(QuitScreen(active), chosen)

    async def _leave(self, grace: float | None) -> None:
        if self.host is not None:
            if grace:
                self.notify("waiting for active runs to finish…")
            await self.host.close(grace)
        self.exit(0)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for key, action, label, text in KEYS:
            if action in ("help", "focus_next"):
                continue
            yield SystemCommand(f"{label} ({key})", text, _runner(self, action))


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
