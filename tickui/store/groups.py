"""The query groups every store is made of, in the order a store class lists them: written
once, in the SQL both databases share, over StoreBase's connection plumbing."""

from __future__ import annotations

from tickui.store.audit import AuditQueries
from tickui.store.claims import ClaimQueries
from tickui.store.coordination import Coordination
from tickui.store.events import EventLog
from tickui.store.hooks import HookQueries
from tickui.store.queue import QueueQueries
from tickui.store.tasks import TaskQueries
from tickui.store.workers import WorkerQueries

QUERY_GROUPS = (
    TaskQueries,
    ClaimQueries,
    QueueQueries,
    EventLog,
    Coordination,
    HookQueries,
    WorkerQueries,
    AuditQueries,
)
