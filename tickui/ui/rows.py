"""The rows the two big panes show, kept in order so one change costs one row.

Tasks: every task, ordered by name, with a filtered view. Occurrences: a bounded window
of the newest ones (the store keeps the rest; `tickui history` and the detail screen
read further back). Both are plain objects: no widgets, no I/O.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable

from tickui.models import Occurrence, Task

OCCURRENCE_WINDOW = 500


class TaskRows:
    def __init__(self) -> None:
        self.by_id: dict[int, Task] = {}
        self._order: list[tuple[str, int]] = []
        self._view: list[tuple[str, int]] = []
        self.filter = ""

    def __len__(self) -> int:
        return len(self._view)

    @property
    def total(self) -> int:
        return len(self._order)

    def load(self, tasks: Iterable[Task]) -> None:
        self.by_id = {task.id: task for task in tasks}
        self._order = sorted((task.name, task.id) for task in self.by_id.values())
        self._refilter()

    def at(self, index: int) -> Task | None:
        if 0 <= index < len(self._view):
            return self.by_id[self._view[index][1]]
        return None

    def index_of(self, task_id: int) -> int | None:
        task = self.by_id.get(task_id)
        if task is None:
            return None
        key = (task.name, task_id)
        index = bisect_left(self._view, key)
        return index if index < len(self._view) and self._view[index] == key else None

    def _shown(self, name: str) -> bool:
        return self.filter in name

    def _refilter(self) -> None:
        self._view = (
            [key for key in self._order if self._shown(key[0])]
            if self.filter
            else list(self._order)
        )

    def set_filter(self, text: str) -> None:
        self.filter = text.strip().lower()
        self._refilter()

    def upsert(self, task: Task) -> None:
        old = self.by_id.get(task.id)
        self.by_id[task.id] = task
        if old is not None and old.name == task.name:
            return
        if old is not None:
            self._drop((old.name, old.id))
        key = (task.name, task.id)
        insort(self._order, key)
        if self._shown(task.name):
            insort(self._view, key)

    def remove(self, task_id: int) -> None:
        old = self.by_id.pop(task_id, None)
        if old is not None:
            self._drop((old.name, old.id))

    def _drop(self, key: tuple[str, int]) -> None:
        for keys in (self._order, self._view):
            index = bisect_left(keys, key)
            if index < len(keys) and keys[index] == key:
                del keys[index]


class OccurrenceRows:
    """The newest `window` occurrences, newest first."""

    def __init__(self, window: int = OCCURRENCE_WINDOW) -> None:
        self.window = window
        self.by_id: dict[int, Occurrence] = {}
        self._ids: list[int] = []  # negated ids, ascending = newest first

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def newest_id(self) -> int:
        return -self._ids[0] if self._ids else 0

    def load(self, occurrences: Iterable[Occurrence]) -> None:
        self.by_id = {}
        self._ids = []
        for occ in occurrences:
            self.upsert(occ)

    def at(self, index: int) -> Occurrence | None:
        if 0 <= index < len(self._ids):
            return self.by_id[-self._ids[index]]
        return None

    def index_of(self, occ_id: int) -> int | None:
        if occ_id not in self.by_id:
            return None
        return bisect_left(self._ids, -occ_id)

    def upsert(self, occ: Occurrence) -> bool:
        """Keep `occ` if it is in the window; False when it is older than everything kept."""
        if occ.id in self.by_id:
            self.by_id[occ.id] = occ
            return True
        if len(self._ids) >= self.window and -occ.id > self._ids[-1]:
            return False
        insort(self._ids, -occ.id)
        self.by_id[occ.id] = occ
        while len(self._ids) > self.window:
            del self.by_id[-self._ids.pop()]
        return True

    def active_ids(self) -> list[int]:
        return [occ.id for occ in self.by_id.values() if occ.active]
