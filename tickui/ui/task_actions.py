"""The dashboard's keys that act on a task or a run: run now, enable, add, edit, delete,
open, cancel. Each acts on the row highlighted when the key was pressed (by id), and a
destructive one asks first. Mixed into `TickuiApp`, whose host, rows and tables it uses."""

from __future__ import annotations

from tickui.common.errors import TickuiError
from tickui.common.redact import redact
from tickui.engine import RunNowRefused, queue_run_now
from tickui.model.occurrence import QUEUED
from tickui.model.records import Occurrence, Task
from tickui.model.spec import TaskSpec
from tickui.ui.screens.detail import DetailScreen, DetailSource
from tickui.ui.screens.dialogs import ConfirmScreen
from tickui.ui.screens.form import AddTaskScreen
from tickui.ui.screens.run import RunScreen, RunSource
from tickui.ui.view.cells import clock_in, short_path


class TaskActions:
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
            reasons=self.host.store.miss_reasons,
            remote=getattr(self.host.store, "remote_output", None),
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

        def retries(run: Occurrence) -> int | None:
            task = self.task_rows.by_id.get(run.task_id)
            return task.spec.retries if task is not None else None

        remote = getattr(store, "remote_output", None)  # what workers reported (Kafka)
        source = RunSource(occurrence, self._now, short_path, zone, retries, remote)
        self.push_screen(RunScreen(occ, source))

    def action_add_task(self) -> None:
        self.push_screen(
            AddTaskScreen(
                self._now,
                zone_for_preview=self._preview_zone(),
                taken=self._name_taken,
            ),
            self._added,
        )

    def _name_taken(self, name: str) -> bool:
        return any(task.name == name for task in self.task_rows.by_id.values())

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
            AddTaskScreen(
                self._now,
                task=task,
                zone_for_preview=self._preview_zone(),
                taken=self._name_taken,
            ),
            edited,
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
        waiting = occ is not None and occ.state == QUEUED  # a retry or slot not started yet
        if occ is None or not (occ.active or waiting):
            self.notify(
                "no running or waiting occurrence selected",
                title="Cancel refused",
                severity="warning",
            )
            return
        started = occ.started_at or (occ.retry_at if waiting else None) or occ.scheduled_for
        task = self.task_rows.by_id.get(occ.task_id)
        zone = self.view.zone(task.spec.tz if task is not None else None)
        clock = clock_in(started, zone)
        word = "started" if occ.started_at is not None else "due" if waiting else "scheduled"

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
