"""The main screen: header, Tasks and Occurrences, Ticks, breaker and workers, filter box,
keys. It owns the keys that act on its rows (each on the row highlighted when pressed,
by id) and how the panes show them: filters, the tasks' sort, the time zone, the side
panes, and the pane titles that say which are on."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import Input

from tickui.common.redact import redact
from tickui.model.records import Occurrence, Task
from tickui.ui.board import Board
from tickui.ui.keys import (
    DASHBOARD_GROUPS,
    QUITTING_OFF,
    TASK_ACTIONS,
    VIEW_ACTIONS,
    bindings,
    rank,
)
from tickui.ui.live import LiveRefresh
from tickui.ui.screens.detail import DetailScreen
from tickui.ui.screens.hooks import HooksScreen
from tickui.ui.task_actions import TaskActions
from tickui.ui.view.cells import MODES, TimeView
from tickui.ui.view.grid import cell_text
from tickui.ui.view.rows import OccurrenceRows, TaskRows
from tickui.ui.widgets.grid import TaskGrid
from tickui.ui.widgets.panes import Banner, BreakerPane, KeyFooter, StatusLine, TablePane, TicksPane
from tickui.ui.widgets.table import RowTable
from tickui.ui.widgets.timeline import DayTimeline
from tickui.ui.widgets.workers import WorkersPane

# Below this width the side panes move under the tables: beside them (40 columns) at 120
# the tables lost OK%, MISS/SKIP and the runs' details.
NARROW = 140
SHORT = 30  # below this height the narrow layout drops the sparkline
# Below this height the narrow layout drops the side panes: under them the Tasks pane had
# no row left (a breaker that opens is still told, as a notification).
TINY = 20


class Dashboard(Screen[None]):
    """The main screen, showing `board` and kept live by its own `LiveRefresh`. Its layout
    classes follow its own size on every resize (the app's size moves before the screen
    is laid out again, so classes set there came a resize late)."""

    BINDINGS = bindings(groups=DASHBOARD_GROUPS)

    class HangUp(Message):
        """`c` while quit waits for the runs: cancel them all and leave now."""

    def __init__(self, board: Board, *, ring_bell: bool = False) -> None:
        super().__init__()
        self.board = board
        self.tasks = board.tasks_table
        self.occurrences = board.occ_table
        self.live = LiveRefresh(board, self, ring_bell=ring_bell)
        self.actions = TaskActions(board, self.live, self)
        self._filtering_occ = False  # the filter box filters the Occurrences pane (else Tasks)

    def compose(self) -> ComposeResult:
        yield StatusLine(id="status")
        yield Banner("", id="banner")
        with Horizontal(id="body"):
            with Vertical(id="tables"):
                yield TablePane("Tasks", *self.board.task_views.values(), id="tasks-pane")
                yield TablePane("Occurrences (newest first)", self.occurrences, id="occ-pane")
            with Vertical(id="side"):
                yield TicksPane(id="ticks")
                yield BreakerPane(id="breaker")
                yield WorkersPane(id="workers")  # shown when runs go to workers (live.py)
        yield Input(placeholder="filter by task name (enter keeps, esc clears)", id="filter")
        yield KeyFooter(rank, id="footer")

    @property
    def task_view(self) -> RowTable | DayTimeline:
        """The Tasks pane's view shown now (the table, the grid, the timeline): one cursor,
        one filter."""
        return self.board.task_widget

    def on_mount(self) -> None:
        self.task_view.focus()
        self.lay_out(self.app.size.width, self.app.size.height)

    def on_resize(self, event) -> None:
        self.lay_out(event.size.width, event.size.height)

    def lay_out(self, width: int, height: int) -> None:
        wanted = {"-narrow": width < NARROW, "-short": height < SHORT, "-tiny": height < TINY}
        if any(self.has_class(name) != on for name, on in wanted.items()):
            for name, on in wanted.items():
                self.set_class(on, name)
            self.refresh(layout=True)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Keys that mean nothing now are hidden: under a dialog, while quitting (`c` then
        cancels what quit waits for), before the host is up."""
        board, shown = self.board, self.app.screen
        if board.quitting and action in QUITTING_OFF:
            return False
        if action in TASK_ACTIONS and isinstance(shown, ModalScreen):
            return False
        if action in VIEW_ACTIONS and shown is not self:
            return False
        if action == "clear_filter":  # esc goes on to others where no filter is on
            return self._filtered_pane() is not None
        if action in TASK_ACTIONS:
            return board.host is not None and board.ready.is_set()
        return True

    def action_focus_next(self) -> None:
        self.focus_next()

    # ---- the rows the keys act on -------------------------------------------------------

    def selected_task(self) -> Task | None:
        """The task highlighted now, by id: in the Tasks pane, or the selected
        occurrence's task in the Occurrences pane, or the detail screen's (a palette
        command there)."""
        screen = self.app.screen
        if isinstance(screen, DetailScreen):
            return screen.task_row
        rows = self.board.task_rows
        if self.focused is self.occurrences:
            occ = self.selected_occurrence()
            return rows.by_id.get(occ.task_id) if occ is not None else None
        key = self.task_view.selected_key
        return rows.by_id.get(key) if key is not None else None

    def selected_occurrence(self) -> Occurrence | None:
        """The occurrence highlighted now (by id); in the grid, the run under its cursor
        while it is active; else from the Tasks pane, the selected task's newest active
        run."""
        rows = self.board.occ_rows
        if self.focused is self.occurrences:
            key = self.occurrences.selected_key
            return rows.by_id.get(key) if key is not None else None
        grid = self.board.grid
        if self.focused is grid:
            run = grid.current_run()
            if run is not None and run.active:
                return rows.by_id.get(run.id, run)
        key = self.task_view.selected_key
        if key is None:
            return None
        running = [o for o in rows.by_id.values() if o.task_id == key and o.active]
        return max(running, key=lambda o: o.id) if running else None

    def _need_task(self) -> Task | None:
        task = self.selected_task()
        if task is None:
            self.notify("no task selected", severity="warning")
        return task

    # ---- runs and tasks -----------------------------------------------------------------

    async def action_run_now(self) -> None:
        task = self._need_task()
        if task is None:
            return
        await self.actions.run_now(task)

    async def action_toggle_enabled(self) -> None:
        task = self._need_task()
        if task is not None:
            await self.actions.toggle_enabled(task)

    def action_detail(self) -> None:
        screen = self.app.screen
        if isinstance(screen, DetailScreen):  # a palette command on a task's detail
            screen.action_open_selected()
            return
        if self.focused is self.occurrences:
            occ = self.selected_occurrence()
            if occ is not None:
                self.actions.open_run(occ)
            return
        if self.focused is self.board.grid:  # the run under the grid's cursor
            run = self.board.grid.current_run()
            if run is None:
                self.notify("no run in this cell", severity="warning")
            else:
                self.actions.open_run(run)
            return
        task = self._need_task()
        if task is not None:
            self.actions.open_detail(task)

    def action_add_task(self) -> None:
        self.actions.add()

    def action_edit_task(self) -> None:
        task = self._need_task()
        if task is not None:
            self.actions.edit(task)

    def action_delete_task(self) -> None:
        task = self._need_task()
        if task is not None:
            self.actions.delete(task)

    async def action_cancel_run(self) -> None:
        if self.board.quitting:
            self.post_message(self.HangUp())
            return
        await self.actions.cancel(self.selected_occurrence())

    # ---- what the panes show ------------------------------------------------------------

    def _filter_box(self) -> Input:
        return self.query_one("#filter", Input)

    def action_filter(self) -> None:
        """One filter box; what it filters is the pane focused when `/` was pressed."""
        box = self._filter_box()
        occ = self.focused is self.occurrences
        self._filtering_occ = occ
        box.placeholder = (
            "occurrences: task name contains (enter keeps, esc clears)"
            if occ
            else "tasks: name contains (enter keeps, esc clears)"
        )
        with box.prevent(Input.Changed):
            box.value = self.board.occ_rows.text if occ else self.board.task_rows.filter
        box.display = True
        box.focus()

    async def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id != "filter":
            return
        if self._filtering_occ:  # remembered on enter or esc, not per key
            await self._filter_occurrences(save=False, text=event.value)
        else:
            self.board.task_rows.set_filter(event.value)
            if event.value.strip():
                self.task_view.show_top()  # a new filter starts at its first match
            else:
                self.task_view.sync_size()  # cleared: the task found stays picked
            self.show_titles()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            if self._filtering_occ:
                self.board.remember(occ_text=self.board.occ_rows.text)
            event.input.display = False
            (self.occurrences if self._filtering_occ else self.task_view).focus()

    async def on_key(self, event) -> None:
        self.task_view.hold_briefly()  # before the key acts: its row stays where it is
        box = self.focused
        if event.key == "escape" and isinstance(box, Input) and box.id == "filter":
            event.stop()
            box.value = ""  # clears that pane's filter (through Input.Changed)
            if self._filtering_occ:
                self.board.remember(occ_text="")
            box.display = False
            (self.occurrences if self._filtering_occ else self.task_view).focus()

    def _filtered_pane(self) -> RowTable | None:
        """The focused table when it has a filter on (esc clears it), else None."""
        board = self.board
        if self.focused is self.task_view and board.task_rows.filter:
            return self.task_view
        occ = board.occ_rows
        if self.focused is self.occurrences and (
            occ.text or occ.state != "all" or occ.task_id is not None
        ):
            return self.occurrences
        return None

    async def action_clear_filter(self) -> None:
        """One key out of any filter: the focused pane shows everything again."""
        pane = self._filtered_pane()
        if pane is self.task_view:
            self.board.task_rows.set_filter("")
            self.task_view.sync_size()
            self.show_titles()
        elif pane is self.occurrences:
            await self._filter_occurrences(text="", state="all", task_id=None)

    async def _filter_occurrences(self, save: bool = True, **changes: object) -> None:
        """Change the Occurrences pane's filters and read its rows again from the store."""
        board = self.board
        rows = board.occ_rows
        current = {"text": rows.text, "state": rows.state, "task_id": rows.task_id}
        current.update(changes)
        task = board.task_rows.by_id.get(current["task_id"] or -1)
        rows.set_filter(**current, task_name=task.name if task is not None else None)
        if save:
            board.remember(occ_text=current["text"], occ_state=current["state"])
        self.show_titles()
        if board.host is not None:
            keep = self.occurrences.selected_key
            await board.load_occurrences()
            if rows.filter_label() or keep is None or not self.occurrences.select_key(keep):
                self.occurrences.show_top()  # a new filter starts at the newest runs
            # else cleared: the run found through the filter stays picked, among all
            self.show_titles()

    async def action_cycle_state(self) -> None:
        states = OccurrenceRows.STATES
        now = self.board.occ_rows.state
        await self._filter_occurrences(state=states[(states.index(now) + 1) % len(states)])

    async def action_follow_task(self) -> None:
        """Only the highlighted occurrence's (or task's) runs; pressed again, every task's."""
        if self.board.occ_rows.task_id is not None:
            await self._filter_occurrences(task_id=None)
            return
        task = self.selected_task()
        if task is None:
            self.notify("no task selected", severity="warning")
            return
        await self._filter_occurrences(task_id=task.id)

    def action_cycle_sort(self) -> None:
        """The next sortable column on screen, ascending (a header click picks one, or
        reverses): sorting by a column the width hides would change nothing visible."""
        shown = set(self.tasks.shown_titles())
        columns = [c for c in TaskRows.CYCLE if c in shown] or list(TaskRows.CYCLE)
        title, _ = self.board.task_rows.sort
        nxt = columns[(columns.index(title) + 1) % len(columns)] if title in columns else "NEXT"
        self._sort(nxt, False)

    def _sort(self, title: str, descending: bool) -> None:
        view = self.task_view
        keep = view.selected_key
        self.board.task_rows.set_sort(title, descending)
        view.sync_size()
        if keep is not None:
            view.select_key(keep)
        self.board.remember(sort_column=title, sort_descending=descending)
        self.show_titles()

    def on_row_table_header_clicked(self, event) -> None:
        if event.table is not self.tasks or event.column_title not in TaskRows.SORTABLE:
            return
        title, descending = self.board.task_rows.sort
        self._sort(event.column_title, not descending if title == event.column_title else False)

    def action_cycle_view(self) -> None:
        """The Tasks pane's next view (Board.task_views), on the same task; the pane keeps
        the focus if it had it."""
        board = self.board
        views = list(board.task_views)
        old = self.task_view
        board.task_view_name = views[(views.index(board.task_view_name) + 1) % len(views)]
        new = self.task_view
        key = old.selected_key
        old.display = False
        new.display = True
        if new is board.grid:
            board.grid.stale()  # what it held may be old: the rows on screen read again
        new.sync_size()
        if key is not None:
            new.select_key(key)
        if self.focused is old or self.focused is None:
            new.focus()
        self.show_titles()

    async def on_task_grid_wanted(self, event: TaskGrid.Wanted) -> None:
        """The grid's rows on screen want their runs: one query for all of them."""
        host = self.board.host
        if host is None:
            return
        try:
            runs = await host.store.recent_runs(event.ids, event.per_task)
        except Exception as exc:  # the store went away: said once, the rows ask again
            event.grid.stale(event.ids)
            self.notify(redact(f"could not read the runs: {exc}"), severity="error")
            return
        event.grid.put(runs, event.ids, event.per_task)

    def on_task_grid_moved(self, _event: TaskGrid.Moved) -> None:
        self.show_titles()

    def action_cycle_zone(self) -> None:
        board = self.board
        board.set_view(TimeView(MODES[(MODES.index(board.view.mode) + 1) % len(MODES)]))
        board.remember(zone=board.view.mode)
        if board.host is not None:
            self.live.show_status()
            self.live.show_ticker()
        self.show_titles()
        self.notify(f"times in {board.view.label()}")

    def action_toggle_side(self) -> None:
        self.board.remember(side_hidden=not self.board.prefs.side_hidden)
        self.show_side()

    def show_side(self) -> None:
        """As the user chose (H): a class, so that the tiny layout can still hide them."""
        self.set_class(self.board.prefs.side_hidden, "-side-hidden")

    def action_hooks(self) -> None:
        host = self.board.host
        if host is None:
            return
        hooks = host.hooks
        self.app.push_screen(
            HooksScreen(
                host.store.recent_deliveries,
                lambda: hooks.status() if hooks is not None else None,
                self.board.view.zone(),
            )
        )

    def show_titles(self) -> None:
        """Filters and sort in the pane titles: what the panes leave out is never hidden."""
        try:
            tasks = self.query_one("#tasks-pane")
            occ = self.query_one("#occ-pane")
        except NoMatches:  # mounted but not composed yet, or being taken down: next second
            return
        board = self.board
        rows = board.task_rows
        title, descending = rows.sort
        text = f"Tasks · by {title} {'▼' if descending else '▲'}"
        if board.task_view_name == "grid":
            text = f"Tasks · grid · {self._grid_cell()}"
        elif board.task_view_name == "timeline":
            text = "Tasks · timeline · + and - zoom"
        if rows.held and rows.stale:  # the order waits for the cursor to go back up
            text += " · order held (home resumes)"
        if rows.filter:
            text += f" · {len(rows)} of {rows.total} match {rows.filter!r} · esc clears"
        if tasks.border_title != text:  # called each second: repaint on a change only
            tasks.border_title = text
        label = board.occ_rows.filter_label()
        text = "Occurrences" + (f" · {label} · esc clears" if label else " (newest first)")
        above = self.occurrences.scroll_offset.y
        if above:  # kept on the picked run, newer ones went out of sight: say how many
            text += f" · ↑ {above} newer above"
        if occ.border_title != text:
            occ.border_title = text
        zone = f"times in {board.view.label()} · z changes"  # one zone per table, said
        for pane in (tasks, occ):
            if pane.border_subtitle != zone:
                pane.border_subtitle = zone
        self._say_when_empty(bool(label))

    def _say_when_empty(self, occ_filtered: bool) -> None:
        """An empty pane says why and the way on: a new database how to add a task, a
        filter that matches nothing the key that clears it."""
        board = self.board
        if not board.ready.is_set():
            return
        rows = board.task_rows
        if rows.total == 0:
            hint = "No tasks yet: press a to add one, or tickui task add NAME --every 1m -- CMD"
        elif rows.filter:
            hint = f"No task matches {rows.filter!r}: esc clears the filter"
        else:
            hint = ""
        for view in board.task_views.values():
            view.say_when_empty(hint)
        self.occurrences.say_when_empty(
            "No run matches this filter: esc clears it" if occ_filtered else "No runs yet"
        )

    def _grid_cell(self) -> str:
        """The grid's cell under the cursor, in words (its time in the task's zone)."""
        board, grid = self.board, self.board.grid
        task = board.task_rows.by_id.get(grid.selected_key or -1)
        if task is None:
            return "no task"
        zone = board.view.zone(task.spec.tz)
        return cell_text(task.name, grid.slot, grid.current_runs(), board.now(), zone)
