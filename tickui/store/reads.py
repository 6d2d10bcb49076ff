"""The reads the listings make (`task list`, `history`, `audit`): their SQL, and the decoding of
their rows into `Task`, `TaskStats` and `Occurrence`, with no I/O. The store's query
groups run them through aiosqlite; tickui.store.reader runs the same texts through a
blocking read-only connection, so both give the same values."""

from __future__ import annotations

from collections.abc import Iterable

from tickui.model.records import OCCURRENCE_COLUMNS, STATS_WINDOW, Task, TaskStats
from tickui.model.spec import TaskSpec
from tickui.model.states import ACTIVE, QUEUED

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    from typing import Any

NO_STATS = TaskStats()
SPEC_CACHE_MAX = 100_000

TASK_COLUMNS = (
    "id, name, spec, source, enabled, note, generation, created_at, updated_at, anchor, "
    "next_run_at, due_at, overridden"
)
TASK_SELECT = f"SELECT {TASK_COLUMNS} FROM tasks"
LIST_TASKS = f"{TASK_SELECT} ORDER BY name"
FIND_TASK = f"{TASK_SELECT} WHERE name = ?"

OCC_SELECT = "SELECT " + ", ".join(OCCURRENCE_COLUMNS) + " FROM occurrences"
ACTIVE_SQL = "('" + "', '".join(ACTIVE) + "')"
HISTORY = f"{OCC_SELECT} ORDER BY id DESC LIMIT ?"
HISTORY_OF = f"{OCC_SELECT} WHERE task = ? ORDER BY id DESC LIMIT ?"
# Each task's newest occurrences, of tasks given as one JSON array and how many a task
# less one (the OFFSET of the oldest kept): per task, one index lookup finds the oldest id
# kept and one index range reads from it (occurrences(task_id, id)), however long its
# history. The same text runs on PostgreSQL (tickui.store.pgconn rewrites json_each).
RECENT_OF = (
    "WITH shown(task_id) AS (SELECT value FROM json_each(?)) SELECT "
    + ", ".join(f"o.{column}" for column in OCCURRENCE_COLUMNS)
    + " FROM shown CROSS JOIN occurrences o ON o.task_id = shown.task_id"
    " AND o.id >= coalesce((SELECT p.id FROM occurrences p WHERE p.task_id = shown.task_id"
    " ORDER BY p.id DESC LIMIT 1 OFFSET ?), 0) ORDER BY o.task_id, o.id DESC"
)


def history_query(task: str | None, limit: int) -> tuple[str, tuple[Any, ...]]:
    """The newest `limit` occurrences, of one task's name or of all."""
    return (HISTORY, (limit,)) if task is None else (HISTORY_OF, (task, limit))


HAS_AUDIT = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'audit'"


def audit_query(task: str | None, limit: int) -> tuple[str, tuple[Any, ...]]:
    """The newest `limit` audit entries, of one task's name or of all."""
    from tickui.model.audit import AUDIT_COLUMNS  # the audit's records: not for the others

    select = f"SELECT {AUDIT_COLUMNS} FROM audit"
    if task is None:
        return f"{select} ORDER BY id DESC LIMIT ?", (limit,)
    return f"{select} WHERE task = ? ORDER BY id DESC LIMIT ?", (task, limit)


def stats_query(ids: Iterable[int] | None = None) -> tuple[str, list[Any]] | None:
    """The rows stats_from reads, of the tasks `ids` (every task's for None); None when
    `ids` is empty."""
    where, params = "", []
    if ids is not None:
        params = list(ids)
        if not params:
            return None
        where = f"WHERE task_id IN ({','.join('?' * len(params))})"
    sql = (
        "SELECT task_id, state, missed, scheduled_for, started_at, finished_at, attempt,"
        f" retry_at FROM occurrences {where} ORDER BY task_id DESC, id DESC"
    )
    return sql, params


def task_from_row(row: Any, stats: TaskStats | None, specs: dict[str, TaskSpec]) -> Task:
    """A row of TASK_COLUMNS as a Task; `specs` caches the parsed definitions by their
    JSON text (a dashboard reads the same few thousand again and again)."""
    spec = specs.get(row[2])
    if spec is None:
        if len(specs) > SPEC_CACHE_MAX:
            specs.clear()
        spec = specs[row[2]] = TaskSpec.from_json(row[2])
    # by position, in Task's field order (a scan makes one per due task)
    id_, name, _, source, enabled, note, generation, created, updated = row[:9]
    return Task(
        id_,
        name,
        spec,
        source,
        bool(enabled),
        note,
        generation,
        created,
        updated,
        row[9],  # anchor
        row[10],  # next_run_at
        row[11],  # due_at
        stats or NO_STATS,
        bool(row[12]),  # overridden
    )


def stats_from(rows: Iterable[Any]) -> dict[int, TaskStats]:
    """Rows (task_id, state, missed, scheduled_for, started_at, finished_at, attempt,
    retry_at) grouped by task, newest first within a task (stats_query's): one ordered
    pass gives the counts, the last row, and the last STATS_WINDOW finished runs' success
    rate and median duration. SQL window functions took twice as long here."""
    result: dict[int, TaskStats] = {}
    durations: dict[int, list[int]] = {}
    succeeded: dict[int, int] = {}
    stats = TaskStats()
    took: list[int] = []
    current = None
    for task_id, state, missed, scheduled, started, finished, attempt, retry_at in rows:
        if task_id != current:
            current = task_id
            stats = result[task_id] = TaskStats(state, scheduled, started, finished)
            took = durations[task_id] = []
            succeeded[task_id] = 0
        stats.missed += missed or 0
        if state == "skipped":
            stats.skipped += 1
        elif state == QUEUED:  # waits to start (a retry, a buffered or backfill slot)
            if attempt > 1 and stats.retry_attempt is None:  # the newest pending retry
                stats.retry_attempt, stats.retry_at = attempt, retry_at
            continue
        elif state in ACTIVE:
            stats.active += 1
        elif stats.finished < STATS_WINDOW:
            if stats.finished == 0:
                stats.last_result = state
            stats.finished += 1
            if state == "succeeded":
                succeeded[task_id] += 1
            if state != "cancelled" and started is not None and finished is not None:
                took.append(finished - started)
    for task_id, stats in result.items():
        if stats.finished:
            stats.success_rate = succeeded[task_id] / stats.finished
        took = durations[task_id]
        if took:
            stats.median_duration_us = round(_median(took))
    return result


def _median(values: list[int]) -> float:
    """statistics.median's value (the middle one, or the mean of the two middle ones),
    without loading statistics (with fractions and decimal) for a listing."""
    ordered = sorted(values)
    half = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[half]
    return (ordered[half - 1] + ordered[half]) / 2
