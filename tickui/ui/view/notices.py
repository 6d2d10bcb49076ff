"""Which changes are news worth a toast: a run that failed, the breaker opening, the
lease lost. Plain state taking the loop time; the app shows what these return."""

from __future__ import annotations

from tickui.common.redact import safe_text
from tickui.engine import EngineStatus
from tickui.model.records import Occurrence, Task
from tickui.ticks.breaker import OPEN
from tickui.ticks.ticker import TickerMetrics
from tickui.ui.view.cells import outcome_code, paused


class Notices:
    def __init__(self, quiet: float) -> None:
        self.quiet = quiet  # s: a task that keeps failing is told at most once in this long
        self.newest_at_load = 0  # failures up to this occurrence id were there before us
        self._told: dict[int, tuple[float, int]] = {}  # task id: (told at, failures not told)
        self._breaker: str | None = None
        self._lease: str | None = None

    def failed_run(self, old: Occurrence | None, occ: Occurrence, now: float) -> str | None:
        """The message for a run that just ended failed, or None: one seen failed before
        is not told again, one from before the dashboard started is not news, and a task
        that keeps failing is told once per `quiet` (saying how many more failed)."""
        if occ.state != "failed" or (old is not None and old.state == "failed"):
            return None
        if old is None and occ.id <= self.newest_at_load:
            return None
        told, unsaid = self._told.get(occ.task_id, (-self.quiet, 0))
        if now - told < self.quiet:
            self._told[occ.task_id] = (told, unsaid + 1)
            return None
        self._told[occ.task_id] = (now, 0)
        detail = safe_text((occ.detail or "").replace("\n", " "))[:80]
        more = f" ({unsaid} more failed since the last notice)" if unsaid else ""
        return f"{occ.task} failed ({outcome_code(occ)}){': ' + detail if detail else ''}{more}"

    @staticmethod
    def paused_task(old: Task | None, task: Task) -> str | None:
        """The message when pause_after has just disabled a task (seen enabled before)."""
        if old is None or not old.enabled or task.enabled or not paused(task.note):
            return None
        return f"{task.name} {safe_text(task.note or '')}: enable it (e) when it is fixed"

    def breaker(self, metrics: TickerMetrics) -> str | None:
        """The message when the breaker has just opened (not at start, not while open)."""
        state, before = metrics.breaker_state, self._breaker
        self._breaker = state
        if state != OPEN or before in (None, OPEN):
            return None
        reason = metrics.transitions[-1]["reason"] if metrics.transitions else ""
        reason = safe_text(reason or metrics.last_error or "too many failed publishes")
        return f"tick publishes stop for a while: {reason}"

    def lease(self, status: EngineStatus) -> str | None:
        """The message when this engine held the lease and, still running, no longer does."""
        before, self._lease = self._lease, status.lease_state
        if before != "held" or status.lease_state == "held" or not status.running:
            return None
        holder = f", held by {status.holder}" if status.holder else ""
        return (
            f"this dashboard's engine lost the lease ({status.lease_state}{holder}):"
            " it runs nothing until it holds it again"
        )
