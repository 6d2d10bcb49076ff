"""How many times each schedule fires in each column of a time axis. Pure: schedules and
instants in, counts out.

An interval's counts are arithmetic. A cron's or a one-off's fire times come from the
schedule itself (`next_after`, so DST gaps and folds fall where the engine fires them),
are kept per schedule (tasks that share an expression and zone share them) and extended
as the axis moves on. A schedule that fires more than `CAP` times in one look ahead is
counted exactly up to its `CAP`th fire and estimated past it from the mean gap so far
(an every-second cron over 7 days would otherwise take seconds); such counts say so.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Hashable
from dataclasses import dataclass

from tickui.schedules.triggers import IntervalSchedule, Schedule

CAP = 2_000  # fire times worked out one by one per schedule and look ahead


@dataclass(frozen=True, slots=True)
class Counts:
    """Runs in each column, their total, and whether any was estimated."""

    per_column: tuple[int, ...]
    total: int
    estimated: bool = False
    sparse: tuple[tuple[int, int], ...] | None = None  # (column, runs) when few have runs

    def marks(self) -> tuple[tuple[int, int], ...]:
        """(column, runs) of the columns with runs."""
        if self.sparse is not None:
            return self.sparse
        return tuple((c, n) for c, n in enumerate(self.per_column) if n)


def _from_times(times: list[int], start: int, step: int, cols: int) -> Counts:
    found: dict[int, int] = {}
    for moment in times:
        column = (moment - start) // step
        found[column] = found.get(column, 0) + 1
    per = [0] * cols
    for column, runs in found.items():
        per[column] = runs
    return Counts(tuple(per), len(times), False, tuple(sorted(found.items())))


@dataclass(slots=True)
class _Fires:
    start: int  # fire times after this ...
    end: int  # ... up to this one are all in `times` (when capped, the last one's)
    times: list[int]
    capped: bool  # the look ahead stopped at CAP: past `end`, the mean gap stands in
    done: bool = False  # the schedule ends (a one-off, a date cron never reaches again)


def interval_counts(schedule: IntervalSchedule, start: int, step: int, cols: int) -> Counts:
    """Exact: the grid anchor + k*every counted in each column (`cols` columns `step`
    long from `start`), fires after `start`. Walks the fires or the columns, the fewer."""
    every, anchor = schedule.every, schedule.anchor
    end = start + step * cols
    first = schedule.next_after(start)
    per = [0] * cols
    if first >= end:
        return Counts(tuple(per), 0)
    if (end - first) // every < cols:
        return _from_times(list(range(first, end, every)), start, step, cols)
    index = (first - anchor) // every  # the k of the first fire
    for c in range(cols):
        high = (start + (c + 1) * step - 1 - anchor) // every  # the last k in column c
        per[c] = max(0, high - index + 1)
        index = max(index, high + 1)
    return Counts(tuple(per), sum(per))


class FireCache:
    """Fire times of schedules, kept by a key the caller gives (the task's expression and
    zone, say): one look ahead serves every task with that key and every axis after it."""

    def __init__(self) -> None:
        self._kept: dict[Hashable, _Fires] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def forget(self, keep: set[Hashable]) -> None:
        """Drop the schedules no task uses any more."""
        for key in [k for k in self._kept if k not in keep]:
            del self._kept[key]

    def _fires(self, key: Hashable, schedule: Schedule, start: int, end: int) -> _Fires:
        kept = self._kept.get(key)
        if kept is None or start < kept.start or (kept.capped and start > _midway(kept)):
            kept = self._kept[key] = _Fires(start, start, [], False)
        elif kept.times and kept.times[0] <= start:  # the passed ones go
            kept.times = kept.times[bisect_right(kept.times, start) :]
            kept.start = start
        if not kept.capped and not kept.done and kept.end < end:
            _extend(kept, schedule, end)
        return kept

    def counts(self, key: Hashable, schedule: Schedule, start: int, step: int, cols: int) -> Counts:
        """Runs of `schedule` after `start` in each of `cols` columns `step` long."""
        if isinstance(schedule, IntervalSchedule):
            return interval_counts(schedule, start, step, cols)
        end = start + step * cols
        kept = self._fires(key, schedule, start, end)
        times = kept.times
        counts = _from_times(
            times[bisect_right(times, start) : bisect_left(times, end)], start, step, cols
        )
        if not (kept.capped and kept.end < end):
            return counts
        per = list(counts.per_column)
        _estimate(per, kept, start, step, cols)
        return Counts(tuple(per), sum(per), True)

    def times(self, key: Hashable, schedule: Schedule, start: int, end: int) -> list[int]:
        """The fire times in (start, end) worked out one by one (an interval's too), at
        most CAP of them."""
        if isinstance(schedule, IntervalSchedule):
            first = schedule.next_after(start)
            last = min(end - 1, first + (CAP - 1) * schedule.every)
            return list(range(first, last + 1, schedule.every)) if first < end else []
        times = self._fires(key, schedule, start, end).times
        return times[bisect_right(times, start) : bisect_left(times, end)]


def _midway(kept: _Fires) -> int:
    """A capped look ahead is taken again once half of it has passed."""
    return kept.start + (kept.end - kept.start) // 2


def _extend(kept: _Fires, schedule: Schedule, end: int) -> None:
    current = kept.times[-1] if kept.times else kept.start
    while len(kept.times) < CAP:
        following = schedule.next_after(current)
        if following is None:
            kept.done, kept.end = True, end
            return
        kept.times.append(following)
        current = following
        if following >= end:
            kept.end = following  # none between: the axis may move on to it for free
            return
    kept.capped, kept.end = True, current


def _estimate(per: list[int], kept: _Fires, start: int, step: int, cols: int) -> None:
    """Past a capped look ahead: each column's share of the span after it, at the mean gap
    of the fires found."""
    gap = max(1, (kept.end - kept.start) // max(1, len(kept.times)))
    for c in range(cols):
        low, high = start + c * step, start + (c + 1) * step
        if high > kept.end:
            per[c] += round((high - max(low, kept.end)) / gap)
