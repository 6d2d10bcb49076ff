"""The rows the two big panes show, kept in order so one change costs one row.

Tasks: every task, in the chosen sort order (a key tuple per task, kept sorted with
bisect), with a filtered view. Occurrences: a bounded window of the newest ones that pass
the filter (the store keeps the rest; `tickui history` and the detail screen read further
back). Both are plain objects: no widgets, no I/O.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

from tickui.model.occurrence import ACTIVE, QUEUED
from tickui.model.records import Occurrence, Task
from tickui.schedules.triggers import CronSchedule, preview
from tickui.store import ascii_lower

OCCURRENCE_WINDOW = 500

_LAST = (1,)  # a missing value sorts after every present one, both ways


def _text_key(text: str, descending: bool) -> tuple:
    if not descending:
        return (0, text)
    # Reversed order of strings: negated code points, and a tail above every code point
    # so that "abc" comes before its prefix "ab".
    return (0, (*(-ord(c) for c in text), 1))


def _num_key(value: float | None, descending: bool) -> tuple:
    if value is None:
        return _LAST
    return (0, -value if descending else value)


def _next_value(task: Task) -> int | None:
    return task.due_at if task.enabled else None


PERIOD_FROM = 1_830_297_600 * 1_000_000  # 2028-01-01 UTC: a fixed reference


@lru_cache(maxsize=4096)
def _cron_period(expr: str, tz: str) -> int | None:
    """The gap between a cron's first two fire times after a fixed instant: how often it
    runs, for sorting (`0 3 * * *` a day, `*/1 * * * *` a minute)."""
    try:
        times = preview(CronSchedule(expr, tz), PERIOD_FROM, 2)
    except Exception:  # a definition this version cannot read: sorted last
        return None
    return times[1] - times[0] if len(times) == 2 else None


def _period_value(task: Task) -> int | None:
    """SCHEDULE sorts by how often a task runs (every 1s before every 1d, crons among
    them by their gap); a one-off comes after every repeating task."""
    spec = task.spec
    if spec.kind == "interval":
        return int(spec.expr)
    if spec.kind == "cron":
        return _cron_period(spec.expr, spec.tz)
    return None


def _last_value(task: Task) -> int | None:
    return task.stats.last_started_at or task.stats.last_scheduled_for


def _state_rank(task: Task) -> int:
    """STATE sorts what is happening first: running, a retry waiting, on, off."""
    stats = task.stats
    if stats.active:
        return 0
    if stats.retry_attempt is not None:
        return 1
    return 2 if task.enabled else 3


# What each sortable column sorts by: (kind, value of a task).
_SORTS: dict[str, tuple[str, Callable[[Task], Any]]] = {
    "NAME": ("text", lambda t: t.name),
    "SCHEDULE": ("num", _period_value),
    "NEXT": ("num", _next_value),
    "LEFT": ("num", _next_value),
    "LAST": ("num", _last_value),
    "PASSED": ("num", lambda t: -v if (v := _last_value(t)) is not None else None),
    "RESULT": ("text?", lambda t: t.stats.last_result),
    "OK%": ("num", lambda t: t.stats.success_rate),
    "MED": ("num", lambda t: t.stats.median_duration_us),
    "STATE": ("num", lambda t: _state_rank(t)),
    "POLICY": ("text", lambda t: f"{t.spec.misfire}/{t.spec.concurrency}"),
    "MISS/SKIP": ("num", lambda t: t.stats.missed + t.stats.skipped),
}


class TaskRows:
    """Every task in sort order (default NEXT ascending, none and disabled last, ties by
    name then id), and the filtered view the table shows."""

    SORTABLE = tuple(_SORTS)
    # `S` steps through these: LEFT orders as NEXT does and PASSED as LAST reversed, so
    # stepping onto them would change nothing on screen (a header click still sorts by them)
    CYCLE = tuple(title for title in _SORTS if title not in ("LEFT", "PASSED"))
    DEFAULT_SORT = ("NEXT", False)

    def __init__(self) -> None:
        self.by_id: dict[int, Task] = {}
        self._keys: dict[int, tuple] = {}  # task id: its sort key (last item the id)
        self._order: list[tuple] = []
        self._view: list[tuple] = []
        self.filter = ""
        self._sort = self.DEFAULT_SORT
        self.held = False  # the order holds: a changed task keeps its place
        self.stale = False  # held, and some task would have moved

    def __len__(self) -> int:
        return len(self._view)

    @property
    def total(self) -> int:
        return len(self._order)

    @property
    def sort(self) -> tuple[str, bool]:
        return self._sort

    def set_sort(self, title: str, descending: bool = False) -> None:
        if title not in _SORTS:
            raise ValueError(f"cannot sort by {title!r}")
        self._sort = (title, descending)
        self._rekey()

    def _key(self, task: Task) -> tuple:
        title, descending = self._sort
        kind, value_of = _SORTS[title]
        value = value_of(task)
        if kind == "num":
            primary = _num_key(value, descending)
        elif value is None:
            primary = _LAST
        else:
            primary = _text_key(value, descending)
        return (primary, task.name, task.id)

    def hold(self, on: bool) -> bool:
        """Hold the order (a task that changes keeps its place; a new one is still put
        in order) or release it; True when releasing re-sorted the rows."""
        moved = self.held and not on and self.stale
        self.held = on
        if moved:
            self._rekey()
        return moved

    def _rekey(self) -> None:
        self.stale = False
        self._keys = {task.id: self._key(task) for task in self.by_id.values()}
        self._order = sorted(self._keys.values())
        self._refilter()

    def load(self, tasks: Iterable[Task]) -> None:
        self.by_id = {task.id: task for task in tasks}
        self._rekey()

    def at(self, index: int) -> Task | None:
        if 0 <= index < len(self._view):
            return self.by_id[self._view[index][-1]]
        return None

    def key_at(self, index: int) -> int | None:
        return self._view[index][-1] if 0 <= index < len(self._view) else None

    def index_of(self, task_id: int) -> int | None:
        key = self._keys.get(task_id)
        if key is None:
            return None
        index = bisect_left(self._view, key)
        return index if index < len(self._view) and self._view[index] == key else None

    def _shown(self, name: str) -> bool:
        return self.filter in name.lower()

    def _refilter(self) -> None:
        shown = self._shown
        self._view = [k for k in self._order if shown(k[1])] if self.filter else list(self._order)

    def set_filter(self, text: str) -> None:
        self.filter = text.strip().lower()
        self._refilter()

    def upsert(self, task: Task) -> bool:
        """Keep `task`; True when the shown rows changed order or membership (the table
        must then re-find its cursor), False when the task kept its place."""
        old_key = self._keys.get(task.id)
        self.by_id[task.id] = task
        key = self._key(task)
        if key == old_key:
            return False
        if self.held and old_key is not None and old_key[1] == task.name:
            self.stale = True
            return False
        if old_key is not None:
            self._drop(old_key)
        self._keys[task.id] = key
        insort(self._order, key)
        if self._shown(task.name):
            insort(self._view, key)
        return True

    def remove(self, task_id: int) -> None:
        self.by_id.pop(task_id, None)
        key = self._keys.pop(task_id, None)
        if key is not None:
            self._drop(key)

    def _drop(self, key: tuple) -> None:
        for keys in (self._order, self._view):
            index = bisect_left(keys, key)
            if index < len(keys) and keys[index] == key:
                del keys[index]


class OccurrenceRows:
    """The newest `window` occurrences that pass the filter, newest first."""

    STATES = ("all", "failed", "running", "not skipped")
    _STATE_SETS: dict[str, tuple[str, ...] | None] = {
        "all": None,
        "failed": ("failed",),
        "running": ACTIVE,
        "not skipped": (*ACTIVE, "succeeded", "failed", "cancelled"),
    }

    def __init__(self, window: int = OCCURRENCE_WINDOW) -> None:
        self.window = window
        self.by_id: dict[int, Occurrence] = {}
        self._ids: list[int] = []  # negated ids, ascending = newest first
        self.text = ""
        self.state = "all"
        self.task_id: int | None = None
        self.task_name: str | None = None  # for the label only
        self._pending: dict[int, dict[int, Occurrence]] = {}  # task id: its active or queued

    def pending(self, task_id: int) -> list[Occurrence]:
        """The task's runs held here that are active or wait to start (its Tasks row
        says so), oldest first."""
        held = self._pending.get(task_id)
        return sorted(held.values(), key=lambda o: o.id) if held else []

    def _note_pending(self, occ: Occurrence) -> None:
        if occ.active or occ.state == QUEUED:
            self._pending.setdefault(occ.task_id, {})[occ.id] = occ
        else:
            self._forget_pending(occ)

    def _forget_pending(self, occ: Occurrence) -> None:
        held = self._pending.get(occ.task_id)
        if held is not None and held.pop(occ.id, None) is not None and not held:
            del self._pending[occ.task_id]

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def newest_id(self) -> int:
        return -self._ids[0] if self._ids else 0

    # ---- the filter ------------------------------------------------------------------

    def set_filter(
        self,
        text: str = "",
        state: str = "all",
        task_id: int | None = None,
        task_name: str | None = None,
    ) -> None:
        """Change what is kept; rows the new filter hides go now, and the caller reloads
        from `query()` to fill the window with the rows it shows."""
        if state not in self.STATES:
            raise ValueError(f"unknown state filter {state!r}")
        self.text, self.state = text.strip(), state
        self.task_id = task_id
        self.task_name = task_name if task_id is not None else None
        for occ_id in [i for i, o in self.by_id.items() if not self.shows(o)]:
            self._remove(occ_id)

    def shows(self, occ: Occurrence) -> bool:
        if self.task_id is not None and occ.task_id != self.task_id:
            return False
        states = self._STATE_SETS[self.state]
        if states is not None and occ.state not in states:
            return False
        return not self.text or ascii_lower(self.text) in ascii_lower(occ.task)

    def filter_label(self) -> str:
        """ "" with no filter, else e.g. "task ~ 'back' · failed"."""
        parts = []
        if self.task_id is not None:
            parts.append(f"task = {self.task_name or self.task_id}")
        if self.text:
            parts.append(f"task ~ {self.text!r}")
        if self.state != "all":
            parts.append(self.state)
        return " · ".join(parts)

    def query(self) -> dict[str, Any]:
        """Keyword arguments of `store.newest_occurrences` for this filter."""
        states = self._STATE_SETS[self.state]
        return {
            "task_text": self.text or None,
            "states": list(states) if states is not None else None,
            "task_id": self.task_id,
        }

    # ---- rows ------------------------------------------------------------------------

    def load(self, occurrences: Iterable[Occurrence]) -> None:
        self.by_id = {}
        self._ids = []
        self._pending = {}
        for occ in occurrences:
            self.upsert(occ)

    def at(self, index: int) -> Occurrence | None:
        if 0 <= index < len(self._ids):
            return self.by_id[-self._ids[index]]
        return None

    def key_at(self, index: int) -> int | None:
        return -self._ids[index] if 0 <= index < len(self._ids) else None

    def index_of(self, occ_id: int) -> int | None:
        if occ_id not in self.by_id:
            return None
        return bisect_left(self._ids, -occ_id)

    def upsert(self, occ: Occurrence) -> bool:
        """Keep `occ` if the filter shows it and it is in the window; False when it is not
        kept (hidden by the filter, dropped now if it was shown, or older than the window)."""
        if not self.shows(occ):
            self._remove(occ.id)
            return False
        if occ.id in self.by_id:
            self.by_id[occ.id] = occ
            self._note_pending(occ)
            return True
        if len(self._ids) >= self.window and -occ.id > self._ids[-1]:
            return False
        insort(self._ids, -occ.id)
        self.by_id[occ.id] = occ
        self._note_pending(occ)
        while len(self._ids) > self.window:
            self._forget_pending(self.by_id.pop(-self._ids.pop()))
        return True

    def _remove(self, occ_id: int) -> None:
        occ = self.by_id.pop(occ_id, None)
        if occ is not None:
            del self._ids[bisect_left(self._ids, -occ_id)]
            self._forget_pending(occ)

    def active_ids(self) -> list[int]:
        return [occ.id for occ in self.by_id.values() if occ.active]
