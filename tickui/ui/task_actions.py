"""What the keys that act on a task or a run do, given the task or run: run now, enable,
add, edit, delete, open, cancel. The dashboard picks the row (by id, when the key was
pressed), a task's detail passes its own task; a destructive one asks first."""

from __future__ import annotations

from textual.screen import Screen

from tickui.common.errors import TickuiError
from tickui.common.paths import short_path
from tickui.common.redact import redact
from tickui.engine import RunNowRefused, queue_run_now
from tickui.model.audit import Actor
from tickui.model.occurrence import QUEUED
from tickui.model.records import Occurrence, Task
from tickui.model.spec import TaskSpec
from tickui.runtime.host import Host
from tickui.ui.board import Board
from tickui.ui.live import LiveRefresh
from tickui.ui.screens.detail import DetailScreen, DetailSource
from tickui.ui.screens.dialogs import ConfirmScreen
from tickui.ui.screens.form import AddTaskScreen
from tickui.ui.screens.run import RunScreen, RunSource
from tickui.ui.view.cells import clock_in


class TaskActions:
    """Acts through `board`'s host and shows the outcome through `live`; dialogs and
    views open over `screen`."""

    def __init__(self, board: Board, live: LiveRefresh, screen: Screen) -> None:
        self.board = board
        self.live = live
        self.screen = screen
        self.actor = Actor.here("dashboard")  # who acts, for each change's audit entry

    @property
    def host(self) -> Host:
        assert self.board.host is not None
        return self.board.host

    def notify(self, message: str, **kwargs) -> None:
        self.screen.app.notify(message, **kwargs)

    def push(self, screen: Screen, done=None) -> None:
        self.screen.app.push_screen(screen, done)

    async def run_now(self, task: Task) -> None:
        engine = self.host.engine
        try:
            if engine.running and engine.holds_lease:
                occ = await engine.run_now(task.name, self.actor)
                self.live.mark([task.id], [occ.id])
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
        await self.live.drain()

    async def _queue_run_now(self, task: Task) -> None:
        """Not the lease holder: leave a request for whoever holds it (or starts next)."""
        await queue_run_now(self.host.store, task, self.host.clock.now(), self.actor)
        where = (
            "the lease holder runs it"
            if self.host.engine.running or self.host.watch
            else "the engine is stopped; it runs when an engine starts"
        )
        self.notify(f"queued run-now of {task.name}: {where}")

    async def toggle_enabled(self, task: Task) -> None:
        try:
            await self.host.store.set_enabled(
                task.name, not task.enabled, self.host.clock.now(), actor=self.actor
            )
        except TickuiError as exc:
            self.notify(redact(str(exc)), severity="error")
            return
        self.notify(f"{'disabled' if task.enabled else 'enabled'} {task.name}")
        self.live.mark([task.id])
        await self.live.drain()

    def open_detail(self, task: Task) -> None:
        board = self.board
        self.push(
            DetailScreen(
                task,
                DetailSource(
                    current_task=lambda task: board.task_rows.by_id.get(task.id, task),
                    history=lambda name, limit: self.host.store.history(name, limit=limit),
                    now=board.now,
                    cancel=self.cancel,
                    open_run=self.open_run,
                    view=lambda: board.view,
                    reasons=self.host.store.miss_reasons,
                    remote=self.host.store.remote_output,
                    run_now=self.run_now,
                    toggle_enabled=self.toggle_enabled,
                    edit=self.edit,
                    quitting=lambda: board.quitting,
                    audit=lambda name, limit: self.host.store.audit_entries(name, limit),
                ),
            )
        )

    def open_run(self, occ: Occurrence) -> None:
        """That run's facts and whole output (from the Occurrences pane or a task's runs)."""
        store = self.host.store
        tasks = self.board.task_rows.by_id

        async def occurrence(occ_id: int) -> Occurrence | None:
            found = await store.occurrences_by_id([occ_id])
            return found[0] if found else None

        def zone(run: Occurrence):
            task = tasks.get(run.task_id)
            return self.board.view.zone(task.spec.tz if task is not None else None)

        def retries(run: Occurrence) -> int | None:
            task = tasks.get(run.task_id)
            return task.spec.retries if task is not None else None

        remote = store.remote_output  # what workers reported (Kafka)
        source = RunSource(
            occurrence, self.board.now, short_path, zone, retries, remote, cancel=self.cancel
        )
        self.push(RunScreen(occ, source))

    def add(self) -> None:
        self.push(
            AddTaskScreen(
                self.board.now,
                zone_for_preview=self._preview_zone(),
                taken=self._name_taken,
            ),
            self._added,
        )

    def _name_taken(self, name: str) -> bool:
        return any(task.name == name for task in self.board.task_rows.by_id.values())

    def _preview_zone(self):
        """The form previews fire times in the zone the dashboard shows (task mode: the
        task's own)."""
        view = self.board.view
        return None if view.mode == "task" else view.zone()

    async def _added(self, spec: TaskSpec | None) -> None:
        if spec is None:
            return
        try:
            task = await self.host.store.add_task(
                spec, self.host.clock.now(), source="ui", actor=self.actor
            )
        except TickuiError as exc:
            self.notify(redact(str(exc)), title="Not added", severity="error")
            return
        self.notify(f"added {task.name}")
        self.live.mark([task.id])
        await self.live.drain()
        self.board.task_widget.select_key(task.id)

    def edit(self, task: Task) -> None:
        """The add form filled in with `task`; saved through the same checks (a bad or
        taken name changes nothing)."""

        async def edited(spec: TaskSpec | None) -> None:
            if spec is None:
                return
            try:
                changed = await self.host.store.edit_task(
                    task.name, spec, self.host.clock.now(), actor=self.actor
                )
            except TickuiError as exc:
                self.notify(redact(str(exc)), title="Not saved", severity="error")
                return
            self.notify(f"saved {changed.name}")
            self.live.mark([changed.id])
            await self.live.drain()

        self.push(
            AddTaskScreen(
                self.board.now,
                task=task,
                zone_for_preview=self._preview_zone(),
                taken=self._name_taken,
            ),
            edited,
        )

    def delete(self, task: Task) -> None:
        async def answered(yes: bool | None) -> None:
            if not yes:
                return
            try:
                await self.host.store.remove_task(
                    task.name, self.host.clock.now(), actor=self.actor
                )
            except TickuiError as exc:
                self.notify(redact(str(exc)), severity="error")
                return
            self.notify(f"deleted {task.name}; its history stays")
            self.live.mark([task.id])
            await self.live.drain()

        self.push(
            ConfirmScreen(
                f"Delete task {task.name}? Its history stays.",
                yes_label="Delete (y)",
                no_label="Keep (n)",
            ),
            answered,
        )

    async def cancel(self, occ: Occurrence | None) -> None:
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
        task = self.board.task_rows.by_id.get(occ.task_id)
        zone = self.board.view.zone(task.spec.tz if task is not None else None)
        clock = clock_in(started, zone)
        word = "started" if occ.started_at is not None else "due" if waiting else "scheduled"

        async def answered(yes: bool | None) -> None:
            if yes:
                await self._cancel(occ)

        self.push(
            ConfirmScreen(
                f"Cancel run {occ.id} ({occ.task}, {word} {clock})?",
                yes_label="Cancel run (y)",
                no_label="Keep (n)",
            ),
            answered,
        )

    async def _cancel(self, occ: Occurrence) -> None:
        if not await self.host.engine.cancel(occ.id, self.actor):
            self.notify(
                f"occurrence {occ.id} is not run by this engine (or it already ended)",
                title="Cancel refused",
                severity="warning",
            )
            return
        self.notify(f"cancelling occurrence {occ.id} ({occ.task})")
        self.live.mark([occ.task_id], [occ.id])
