"""The Tasks pane's history grid: the table's rows (same order, same filter, the same row
cursor), each a strip of its task's recent runs, on the Line API: only the rows on
screen are painted, and only their runs are asked for.

It does no I/O: it keeps the runs it is given (`put`) and, when a row on screen has none
or stale ones, posts `Wanted` with those tasks' ids (the screen reads them in one query)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from rich.segment import Segment
from textual.binding import Binding
from textual.events import Click
from textual.message import Message
from textual.strip import Strip

from tickui.model.records import Occurrence, Task
from tickui.ui.view.grid import Fit, fit_slots, header_text, row_cells, slot_at
from tickui.ui.view.layout import RowSource
from tickui.ui.widgets.table import RowTable


class TaskGrid(RowTable):
    """Rows of `source` (the Tasks table's), cells of each task's runs; ← → move the
    cursor between runs (0 the newest), ↑ ↓ between tasks as in the table."""

    BINDINGS = [
        Binding("left", "slot(1)", "Older run", show=False),
        Binding("right", "slot(-1)", "Newer run", show=False),
    ]

    class Wanted(Message):
        """These tasks' rows are on screen without their runs (or with stale ones)."""

        def __init__(self, grid: TaskGrid, ids: list[int], per_task: int) -> None:
            super().__init__()
            self.grid = grid
            self.ids = ids
            self.per_task = per_task

    class Moved(Message):
        """The cell under the cursor (or what is known of it) changed."""

    def __init__(
        self,
        source: RowSource,
        task_at: Callable[[int], Task | None],
        now: Callable[[], int],
        *,
        id: str | None = None,
    ) -> None:
        super().__init__([], source, now, id=id)
        self.task_at = task_at
        self.slot = 0  # the cursor's run: 0 the newest
        self.runs: dict[int, list[Occurrence]] = {}  # task id: its newest runs, newest first
        self.per_task = 0  # how many runs a task the held ones were read for
        self._stale: set[int] = set()  # held, but changed since
        self._asked: set[int] = set()  # asked for, not put yet
        self._want_pending = False

    # ---- the runs --------------------------------------------------------------------

    @property
    def fit(self) -> Fit:
        return fit_slots(self._width)

    def put(self, runs: dict[int, list[Occurrence]], ids: Iterable[int], per_task: int) -> None:
        """The runs read for `ids` (a task with none is absent from `runs`): held and their
        rows on screen repainted."""
        ids = list(ids)
        if per_task < self.per_task:  # read for a narrower grid than now: read again
            self._asked.difference_update(ids)
            self._want_soon()
            return
        for task_id in ids:
            self.runs[task_id] = runs.get(task_id, [])
            self._stale.discard(task_id)
            self._asked.discard(task_id)
            index = self.source.index_of(task_id)
            if index is not None:
                self.refresh_row(index)
        if self.selected_key in ids:
            self.post_message(self.Moved())

    def note(self, occurrences: Iterable[Occurrence]) -> None:
        """Runs the live refresh read (changed or new): each replaces the held run of its
        id, or, newer than its task's newest held, goes first. A task whose runs are not
        held is left to be read when its row is on screen."""
        changed: set[int] = set()
        for occ in sorted(occurrences, key=lambda o: o.id):
            runs = self.runs.get(occ.task_id)
            if runs is None:
                continue
            at = next((i for i, held in enumerate(runs) if held.id == occ.id), None)
            if at is not None:
                runs[at] = occ
            elif not runs or occ.id > runs[0].id:
                runs.insert(0, occ)
                del runs[max(self.per_task, 1) :]
            else:  # older than the newest held and not held: not one of its newest
                continue
            changed.add(occ.task_id)
        for task_id in changed:
            index = self.source.index_of(task_id)
            if index is not None:
                self.refresh_row(index)
        if self.selected_key in changed:
            self.post_message(self.Moved())

    def stale(self, ids: Iterable[int] | None = None) -> None:
        """These tasks' runs changed (None: every task's): rows on screen are read again,
        the old cells shown until then."""
        self._stale.update(self.runs if ids is None else ids)
        self._asked.difference_update(self.runs if ids is None else ids)
        if self.display:
            self._want_soon()

    @property
    def reading(self) -> bool:
        """Some rows wait for their runs (asked for, or changed since read)."""
        return bool(self._stale or self._asked)

    def current_runs(self) -> list[Occurrence] | None:
        """The runs of the task under the cursor, newest first; None while not read."""
        key = self.selected_key
        return self.runs.get(key) if isinstance(key, int) else None

    def current_run(self) -> Occurrence | None:
        """The run under the cursor, if that cell has one."""
        runs = self.current_runs()
        return runs[self.slot] if runs is not None and self.slot < len(runs) else None

    def _visible_ids(self) -> list[int]:
        top = self.scroll_offset.y
        ids = []
        for index in range(top, min(len(self.source), top + max(0, self.size.height - 1))):
            key = self.source.key_at(index)
            if isinstance(key, int):
                ids.append(key)
        return ids

    def _want_soon(self) -> None:
        if not self._want_pending and self.is_mounted:
            self._want_pending = True
            self.call_later(self._want)

    def _want(self) -> None:
        """Ask for the runs of the rows on screen that have none, or stale ones."""
        self._want_pending = False
        if not self.display or not self.is_mounted:
            return
        per_task = self.fit.slots
        if per_task > self.per_task:  # wider than the runs held: read every row again
            self.per_task = per_task
            self._stale.update(self.runs)
            self._asked.clear()
        wanted = [
            task_id
            for task_id in self._visible_ids()
            if (task_id not in self.runs or task_id in self._stale) and task_id not in self._asked
        ]
        if wanted and per_task > 0:
            self._asked.update(wanted)
            self.post_message(self.Wanted(self, wanted, self.per_task))

    # ---- cursor ----------------------------------------------------------------------

    def move_to(self, index: int) -> None:
        before = self.selected_key
        super().move_to(index)
        if self.selected_key != before:
            self.post_message(self.Moved())

    def sync_size(self) -> None:
        before = self.selected_key
        super().sync_size()
        self._want_soon()
        if self.selected_key != before:
            self.post_message(self.Moved())

    def move_slot(self, slot: int) -> None:
        """The cursor on run `slot` of its row (0 the newest), within the cells shown
        and the runs the row has."""
        runs = self.current_runs() or []
        last = max(0, min(self.fit.slots, len(runs)) - 1)
        slot = max(0, min(slot, last))
        if slot != self.slot:
            self.slot = slot
            self.refresh_row(self.cursor)
            self.post_message(self.Moved())

    def action_slot(self, step: int) -> None:
        self.move_slot(self.slot + step)

    def refresh_changed(self) -> None:
        """Each second: the cells say outcomes, not times, so only rows that came, went or
        moved repaint (the title says the running cell's time)."""
        source = self.source
        if len(source) + 1 != self.virtual_size.height or (
            self._key is not None and source.key_at(self.cursor) != self._key
        ):
            self.sync_size()

    def on_show(self) -> None:
        self._want_soon()

    # ---- painting --------------------------------------------------------------------

    def _header(self, width: int, layout: Sequence[tuple[int, int]]) -> Strip:
        style = self.get_component_rich_style("rowtable--header")
        return Strip([Segment(header_text(self.fit, width).ljust(width), style)], width)

    def render_line(self, y: int) -> Strip:
        width = self._width
        if y == 0:
            return self._header(width, [])
        index = self.scroll_offset.y + y - 1
        task = self.task_at(index)
        if task is None:
            if y == 1 and self.empty_text and not len(self.source):
                style = self._cell_style("bright_black", False)
                return Strip([Segment((" " + self.empty_text)[:width].ljust(width), style)], width)
            return Strip.blank(width, self.rich_style)
        fit = self.fit
        runs = self.runs.get(task.id)
        if runs is None or task.id in self._stale:
            self._want_soon()
        selected = index == self.cursor
        cells = row_cells(task.name, runs, fit)
        at = len(cells) - 1 - self.slot if selected else -1
        segments = [Segment(cells[0][0], self._cell_style(cells[0][1], selected))]
        for i, (text, spec) in enumerate(cells[1:], 1):
            if i == at and text.strip():
                segments.append(Segment(text[:-1], self._cell_style("", False)))
                segments.append(Segment(text[-1], self._cell_style(spec, True)))
            else:
                segments.append(Segment(text, self._cell_style(spec, False)))
        if fit.used < width:
            segments.append(Segment(" " * (width - fit.used), self._cell_style("", False)))
        return Strip(segments).crop(0, width)

    # ---- mouse -----------------------------------------------------------------------

    def on_click(self, event: Click) -> None:
        if event.y < 1:
            return
        self.move_to(self.scroll_offset.y + event.y - 1)
        slot = slot_at(event.x, self.fit)
        if slot is not None:
            self.move_slot(slot)

    def shown_titles(self) -> list[str]:
        return []

    def column_at(self, x: int) -> str | None:
        return None
