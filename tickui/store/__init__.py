"""The store: what the rest of tickui may ask of the database, and nothing of how.

Callers use the contract (`Store`, in tickui.store.abc, opened with `Store.open`), the
values that cross it, and the database-file functions below (with `Reader`: a listing's
blocking read of a SQLite file, without an event loop); the SQLite implementation behind
them (tickui.store.sqlite and the query groups) is this package's own.
"""

from __future__ import annotations

from tickui.common import faults
from tickui.store import dbfile, schema
from tickui.store.dbfile import DATABASE_ERRORS, database_failure, inspect_file, lookup, os_failure
from tickui.store.reader import Reader, is_sqlite_file

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    from typing import Any

    from tickui.store.abc import (
        DEFAULT_KEEP,
        Beat,
        Delivery,
        DispatchSecurity,
        FinishedRun,
        LeaseLost,
        NewEvent,
        OutcomeCount,
        Queued,
        Store,
        SyncReport,
        ascii_lower,
    )
    from tickui.store.copies import (
        copy_database,
        finished_runs,
        neutralize,
        newest_occurrence_id,
        outcome_counts,
    )
    from tickui.store.tasksync import default_anchor
    from tickui.store.transfer import CopyReport, copy_store

# The contract and the rest, loaded when first asked for (`from tickui.store import Store`
# works as ever): a listing that reads through `Reader` needs none of them.
_CONTRACT = (
    "DEFAULT_KEEP", "Beat", "Delivery", "DispatchSecurity", "FinishedRun", "LeaseLost",
    "NewEvent", "OutcomeCount", "Queued", "Store", "SyncReport", "ascii_lower",
)  # fmt: skip
_COPIES = (
    "copy_database", "finished_runs", "neutralize", "newest_occurrence_id", "outcome_counts"
)  # fmt: skip
_LATER = {
    **dict.fromkeys(_CONTRACT, "tickui.store.abc"),
    **dict.fromkeys(_COPIES, "tickui.store.copies"),
    "default_anchor": "tickui.store.tasksync",
    "CopyReport": "tickui.store.transfer",
    "copy_store": "tickui.store.transfer",
}


def __getattr__(name: str) -> Any:
    module = _LATER.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = vars(importlib.import_module(module))[name]
    globals()[name] = value
    return value


SCHEMA_VERSION = schema.VERSION  # the newest schema this tickui reads and writes

faults.recognize(dbfile.fault_kind)  # the database's full disk and outages, for fault_text

__all__ = [
    "DATABASE_ERRORS",
    "DEFAULT_KEEP",
    "SCHEMA_VERSION",
    "Beat",
    "CopyReport",
    "Delivery",
    "DispatchSecurity",
    "FinishedRun",
    "LeaseLost",
    "NewEvent",
    "OutcomeCount",
    "Queued",
    "Reader",
    "Store",
    "SyncReport",
    "ascii_lower",
    "copy_database",
    "copy_store",
    "database_failure",
    "default_anchor",
    "finished_runs",
    "inspect_file",
    "is_sqlite_file",
    "lookup",
    "neutralize",
    "newest_occurrence_id",
    "os_failure",
    "outcome_counts",
]
