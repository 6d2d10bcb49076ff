"""What headless `tickui run` says of its own runs: a line when each starts and ends, and
the summary of what it started, succeeded and failed (never the database's older rows)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from typing import Any

from tickui.cli.output import say, shown_time
from tickui.common.redact import redact_data, safe_text
from tickui.common.timeutil import iso, span
from tickui.engine import EngineChange
from tickui.model.records import FINISHED, Occurrence
from tickui.store import Store

QUIET, LINES, JSON = "quiet", "lines", "json"


class RunReport:
    """Follows the engine's changes; prints (in `mode`) and counts the runs this engine
    claimed since `since` (engine-clock microseconds). Store reads happen in its own task,
    so the engine's listener only records ids."""

    def __init__(self, store: Store, owner: str, since: int, mode: str = LINES) -> None:
        self.store, self.owner, self.since, self.mode = store, owner, since, mode
        self.counts: Counter[str] = Counter()
        self.stopping = False
        self.cancelled_at_stop: list[Occurrence] = []
        self._started: set[int] = set()
        self._ended: set[int] = set()
        self._pending: set[int] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def listen(self, change: EngineChange) -> None:
        if change.occurrences:
            self._pending.update(change.occurrences)
            self._wake.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._follow())

    async def close(self) -> None:
        """Report what is still pending (the runs the stop settled), then stop following."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self.flush()

    async def _follow(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        ids, self._pending = sorted(self._pending), set()
        if not ids:
            return
        for occ in await self.store.occurrences_by_id(ids):
            self._see(occ)

    def _see(self, occ: Occurrence) -> None:
        if occ.claimed_at < self.since or (occ.owner and occ.owner != self.owner):
            return  # not this `tickui run`'s (one recovered after a crash, another engine's)
        if occ.started_at is not None and occ.id not in self._started:
            self._started.add(occ.id)
            self.counts["started"] += 1
            self._say_started(occ)
        outcome = occ.state if occ.state in (*FINISHED, "skipped") else None
        if outcome is None or occ.id in self._ended:
            return
        self._ended.add(occ.id)
        self.counts[outcome] += 1
        if outcome == "cancelled" and self.stopping:
            self.cancelled_at_stop.append(occ)
        self._say_ended(occ, outcome)

    def _say_started(self, occ: Occurrence) -> None:
        if self.mode == JSON:
            self._json(event="started", **_facts(occ), at=iso(occ.started_at))
        elif self.mode == LINES:
            say(start_text(occ), redacted=True)
            sys.stdout.flush()  # a line as it happens, also through a pipe

    def _say_ended(self, occ: Occurrence, outcome: str) -> None:
        took = _took(occ)
        if self.mode == JSON:
            self._json(
                event="ended",
                **_facts(occ),
                outcome=outcome,
                at=iso(occ.finished_at),
                duration_s=None if took is None else round(took / 1_000_000, 3),
                exit_code=occ.exit_code,
                error_code=occ.error_code,
                detail=occ.detail,
            )
        elif self.mode == LINES:
            say(end_text(occ, outcome), redacted=True)
            sys.stdout.flush()

    def _json(self, **fields: Any) -> None:
        print(json.dumps(redact_data(fields)), flush=True)

    def summary(self) -> dict[str, Any]:
        """The runs this `tickui run` started, by outcome."""
        keys = ("started", "succeeded", "failed", "cancelled", "skipped")
        out: dict[str, Any] = {key: self.counts[key] for key in keys}
        out["cancelled_at_stop"] = len(self.cancelled_at_stop)
        return out


def _took(occ: Occurrence) -> int | None:
    if occ.started_at is None or occ.finished_at is None:
        return None
    return max(0, occ.finished_at - occ.started_at)


def start_text(occ: Occurrence) -> str:
    """`started    backup  slot 2026-12-05 02:30:00 UTC  run 12`, redacted."""
    return f"started    {_what(occ)}"


def end_text(occ: Occurrence, outcome: str | None = None) -> str:
    """`failed     backup  slot ...  run 12  in 1.20s  (EXIT_NONZERO exit 4)`, redacted."""
    outcome = outcome or occ.state
    detail = _detail(occ) if outcome != "succeeded" else ""
    code = f"exit {occ.exit_code}" if occ.exit_code not in (None, 0) else ""
    if code and detail.startswith(code):  # `exit 3: disk full` says the code itself
        code = ""
    why = " ".join(part for part in (occ.error_code or "", code, detail) if part)
    parts = [f"{outcome:<10} {_what(occ)}"]
    took = _took(occ)
    if took is not None:
        parts.append(f"in {span(took)}")
    if why:
        parts.append(f"({why})")
    return "  ".join(parts)


def _detail(occ: Occurrence) -> str:
    """The run's detail, unless it only repeats its exit code."""
    detail = safe_text(occ.detail or "")[:80]
    return "" if detail == f"exit {occ.exit_code}" else detail


def _facts(occ: Occurrence) -> dict[str, Any]:
    return {"run": occ.id, "task": occ.task, "kind": occ.kind, "slot": iso(occ.scheduled_for)}


def _what(occ: Occurrence) -> str:
    kind = "" if occ.kind == "scheduled" else f" ({occ.kind})"
    return f"{safe_text(occ.task)}{kind}  slot {shown_time(occ.scheduled_for)}  run {occ.id}"


def summary_line(session: dict[str, Any]) -> str:
    """The human summary of a session, for stderr before the final JSON."""
    said = (
        f"{session['started']} started, {session['succeeded']} succeeded, "
        f"{session['failed']} failed, {session['cancelled']} cancelled "
        f"({session['cancelled_at_stop']} at the stop), {session['skipped']} skipped"
    )
    verdict = "healthy" if session["healthy"] else f"not healthy: {session['problems']}"
    return f"tickui: this run: {said}; {verdict}"


def print_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
