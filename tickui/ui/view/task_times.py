"""Each task's runs in each column of the timeline's axis, and every task's together (the
density row): which tasks share a schedule, and the sums. Pure: tasks and an axis in,
counts out; the fire times come from tickui.ui.view.fire_counts."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Iterable, Iterator

from tickui.model.records import Task
from tickui.model.spec import TaskSpec
from tickui.schedules.reasons import cron_reasons
from tickui.schedules.triggers import CronSchedule, offset_changes
from tickui.ui.view.cells import paused
from tickui.ui.view.fire_counts import Counts, FireCache
from tickui.ui.view.timeline import HOUR, OFF, ON, PAUSED, Axis


def add_counts(total: list[int], counts: Counts, times: int = 1) -> None:
    """Add `times` tasks' worth of `counts` into `total`, column by column."""
    for column, runs in counts.marks():
        total[column] += runs * times


def add_grids(total: list[int], every: int, phases: list[int], start: int, step: int) -> None:
    """Add the runs of interval grids sharing a period (`phases`, sorted: each grid fires
    at phase + k * every) into `total`'s columns, fires after `start`. A column's count is
    F(its last instant) - F(the one before it), F(b) the grids' fires up to b: each grid
    has b // every of them, less one when its phase is past b % every. O(log n) a column,
    however many grids."""
    many = len(phases)

    def upto(moment: int) -> int:
        whole, rest = divmod(moment, every)
        return many * whole - (many - bisect_right(phases, rest))

    before = upto(start)
    for column in range(len(total)):
        after = upto(start + (column + 1) * step - 1)
        total[column] += after - before
        before = after


def task_state(task: Task) -> str:
    """on, off (disabled by someone) or paused (disabled by pause_after)."""
    if task.enabled:
        return ON
    return PAUSED if paused(task.note) else OFF


def schedule_key(spec: TaskSpec, anchor: int, start: int) -> Hashable:
    """Tasks with one key fire at the same instants after `start`: a cron's expression and
    zone, an interval's grid (its period and phase, once its anchor has passed)."""
    if spec.kind == "interval":
        every, first = int(spec.expr), spec.anchor or anchor
        return ("interval", every, first % every if first <= start else first)
    return (spec.kind, spec.expr, spec.tz)


class TaskTimes:
    """Each task's runs in each column of an axis, and every task's together (the
    density row): counted once per schedule key, kept until the axis or the tasks
    change. Pure: the caller says when the tasks changed (`changed`)."""

    def __init__(self) -> None:
        self.fires = FireCache()
        self._counts: dict[Hashable, Counts] = {}
        self._shifted: dict[Hashable, frozenset[int]] = {}  # dst_columns, for this axis
        self._for: tuple | None = None  # the axis the counts are for
        self._density: Counts | None = None

    def changed(self) -> None:
        """Tasks were added, removed or changed: the density is counted again."""
        self._density = None

    def _axis(self, axis: Axis) -> None:
        key = (axis.start, axis.step, axis.cols)
        if key != self._for:
            self._for, self._counts, self._density, self._shifted = key, {}, None, {}

    def counts(self, task: Task, axis: Axis) -> Counts:
        self._axis(axis)
        key = schedule_key(task.spec, task.anchor, axis.start)
        found = self._counts.get(key)
        if found is None:
            schedule = task.spec.schedule(task.anchor)
            found = self.fires.counts(key, schedule, axis.start, axis.step, axis.cols)
            self._counts[key] = found
        return found

    def dst_columns(self, task: Task, axis: Axis) -> frozenset[int]:
        """The columns of the task's fire times that its own zone's clock change moves or
        doubles (a cron's DST reasons, tickui.schedules.reasons): only near a change of
        the task's zone in the span, so a plain day costs one look at the zone."""
        spec = task.spec
        if spec.kind != "cron" or spec.tz == "UTC":
            return frozenset()
        changes = offset_changes(spec.tz, axis.start, axis.end)
        if not changes:
            return frozenset()
        self._axis(axis)
        key = schedule_key(spec, task.anchor, axis.start)
        kept = self._shifted.get(key)
        if kept is None:
            kept = self._shifted[key] = self._dst_columns(key, task, axis, changes)
        return kept

    def _dst_columns(
        self, key: Hashable, task: Task, axis: Axis, changes: list[int]
    ) -> frozenset[int]:
        schedule = task.spec.schedule(task.anchor)
        assert isinstance(schedule, CronSchedule)
        found = set()
        times = self.fires.times(key, schedule, axis.start, axis.end)
        for change in changes:
            low, high = change - 2 * HOUR, change + 2 * HOUR  # a moved or doubled time
            before = max(axis.start, low)
            for moment in times[bisect_left(times, low) : bisect_left(times, high)]:
                if any(r.startswith("DST") for r in cron_reasons(schedule, before, moment)):
                    found.add(axis.column(moment))
                before = moment
        return frozenset(found)

    def density(self, tasks: Iterable[Task], axis: Axis) -> Counts:
        """The runs of the tasks that are on, in each column."""
        self._axis(axis)
        if self._density is None:
            for step in self.density_steps(tasks, axis):
                if step is not None:
                    self._density = step
        assert self._density is not None
        return self._density

    def density_steps(self, tasks: Iterable[Task], axis: Axis) -> Iterator[Counts | None]:
        """`density` a schedule at a time: None after each (and after every 500 tasks
        grouped: the caller may let other work run), the counts last."""
        self._axis(axis)
        shared: dict[Hashable, list] = {}  # key: [a task with it, how many are on]
        for seen, task in enumerate(tasks, 1):
            key = schedule_key(task.spec, task.anchor, axis.start)
            entry = shared.get(key)
            if entry is None:
                entry = shared[key] = [task, 0]
            entry[1] += task.enabled
            if seen % 500 == 0:
                yield None
        yield None
        total, estimated = [0] * axis.cols, False
        grids: dict[int, list[int]] = {}  # every: the phases of the running grids, repeated
        for key, (task, many) in shared.items():
            if not many:
                continue
            if key[0] == "interval" and key[2] < key[1]:  # a grid whose anchor has passed
                grids.setdefault(key[1], []).extend([key[2]] * many)
                continue
            counts = self.counts(task, axis)
            add_counts(total, counts, many)
            estimated = estimated or counts.estimated
            yield None
        for every, phases in grids.items():
            add_grids(total, every, sorted(phases), axis.start, axis.step)
            yield None
        self.fires.forget(set(shared))
        yield Counts(tuple(total), sum(total), estimated)
