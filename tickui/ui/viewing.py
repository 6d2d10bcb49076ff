"""How the dashboard shows things, chosen from the keyboard and remembered: filters, the
tasks' sort, the time zone, the side panes, and the pane titles that say which are on.
Mixed into `TickuiApp`, whose rows, tables and settings it uses."""

from __future__ import annotations

import contextlib

from textual.css.query import NoMatches
from textual.widgets import Input

from tickui.ui.view.cells import MODES, TimeView
from tickui.ui.view.rows import OccurrenceRows, TaskRows


class ViewChoices:
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
        columns = TaskRows.CYCLE
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
        try:
            tasks = self.dashboard.query_one("#tasks-pane")
            occ = self.dashboard.query_one("#occ-pane")
        except NoMatches:  # mounted but not composed yet, or being taken down: next second
            return
        title, descending = self.task_rows.sort
        text = f"Tasks · by {title} {'▼' if descending else '▲'}"
        if self.task_rows.filter:
            shown = f"{len(self.task_rows)} of {self.task_rows.total}"
            text += f" · {shown} match {self.task_rows.filter!r}"
        if tasks.border_title != text:  # called each second: repaint on a change only
            tasks.border_title = text
        label = self.occ_rows.filter_label()
        text = "Occurrences" + (f" · {label}" if label else " (newest first)")
        above = self.occ_table.scroll_offset.y
        if above:  # kept on the picked run, newer ones went out of sight: say how many
            text += f" · ↑ {above} newer above"
        if occ.border_title != text:
            occ.border_title = text
