"""Time-lapse without consequences: a private copy of the database and simulated runs.

`--time-scale N` (N other than 1) never opens the real database for writing and never
runs a task's command. `TimeLapse` copies the database (the source read-only) into a
fresh 0700 temp folder and removes that folder again; `SimulatedDispatcher` answers like
the subprocess dispatcher, but a run only takes the task's median recorded duration
(engine time) and ends as its recorded success rate says.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import logging
import os
import shutil
import statistics
import tempfile
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tickui.common.clock import Clock
from tickui.common.errors import StoreError
from tickui.common.redact import redact
from tickui.common.timeutil import MICROS, format_duration
from tickui.dispatch import Dispatcher, DispatchFailure, Fence, Job, NotStarted, Receipt
from tickui.dispatch.base import wait_until_done
from tickui.model.occurrence import RUN_CANCELED, RUN_COMPLETED, RUN_FAILED, RUN_TRANSITION
from tickui.store import (
    NewEvent,
    Store,
    copy_database,
    finished_runs,
    inspect_file,
    neutralize,
    newest_occurrence_id,
    outcome_counts,
)

log = logging.getLogger("tickui.simulate")

TEMP_PREFIX = "tickui-timelapse-"
COPY_NAME = "timelapse.db"
POLL_SECONDS = 0.05  # how often a run's end is re-checked (the clock may be moved by hand)


# ---- the copy ---------------------------------------------------------------------------


async def _copy_server(url: str, target: Path) -> bool:
    """A PostgreSQL store's every table into a new private SQLite file (read only there);
    False when the database has no tickui schema yet (an empty time-lapse)."""
    from tickui.common.errors import NotSetUp
    from tickui.store import Store, copy_store

    try:
        source = await Store.open(url, readonly=True)
    except NotSetUp:
        return False
    try:
        copy = await Store.open(target)
        try:
            await copy_store(source, copy)
        finally:
            await copy.close()
    finally:
        await source.close()
    return True


class TimeLapse:
    """A copy of `source` in a private temp folder for the length of a `with` block.

    The folder (0700) holds the copy, its logs and its -wal/-shm; it is removed on leaving
    the block, whatever ends it. `copied` says whether there was a database to copy.
    """

    def __init__(self, source: Path | str, scale: float, real_commands: bool = False) -> None:
        # a SQLite file, or a PostgreSQL store's URL (copied into a file the same way)
        self.source: Path | str = source if isinstance(source, str) else source.expanduser()
        self.scale = scale
        self.real_commands = real_commands
        self.folder: Path | None = None
        self.copied = False
        self.profiles: dict[str, Profile] = {}
        self.baseline = 0  # occurrences up to this id were copied, not simulated

    @property
    def copy(self) -> Path:
        assert self.folder is not None
        return self.folder / COPY_NAME

    def __enter__(self) -> TimeLapse:
        self.folder = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX))  # 0700
        try:
            if isinstance(self.source, str):
                self.copied = asyncio.run(_copy_server(self.source, self.copy))
            else:
                self.copied = copy_database(self.source, self.copy)
            if self.copied:
                try:
                    inspect_file(self.copy)
                except StoreError as exc:
                    raise StoreError(str(exc).replace(str(self.copy), str(self.source))) from None
                neutralize(self.copy)
                self.profiles = read_profiles(self.copy)
                self.baseline = newest_occurrence_id(self.copy)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def summary(self) -> dict[str, object]:
        """What the time-lapse did, per task, read from the copy before it is removed."""
        tasks: dict[str, dict[str, Any]] = {}
        for task, state, count, missed, late in outcome_counts(self.copy, self.baseline):
            entry = tasks.setdefault(task, {"missed": 0, "late_max_s": None})
            entry[state] = count
            entry["missed"] += missed
            if late is not None:
                entry["late_max_s"] = max(late / MICROS, entry["late_max_s"] or 0.0)
        return {
            "scale": self.scale,
            "copy_of": self.shown_source,
            "runs": "real" if self.real_commands else "simulated",
            "tasks": tasks,
        }

    @property
    def shown_source(self) -> str:
        """The source as it may be shown (a URL without its password)."""
        return redact(self.source) if isinstance(self.source, str) else str(self.source)

    def banner(self) -> str:
        runs = "real commands on the copy" if self.real_commands else "simulated runs"
        if self.copied:
            where = f"on a copy of {self.shown_source}"
        else:
            where = f"on an empty database ({self.shown_source} does not exist and is not created)"
        return f"tickui: time-lapse x{self.scale:g} {where}; {runs}; the real database is untouched"


# ---- what history says about a task ----------------------------------------------------


@dataclass(frozen=True)
class Profile:
    """How a task's recorded runs went: median duration (µs), share that succeeded, and
    the exit code its failures gave most often."""

    duration: int = MICROS
    success_rate: float = 1.0
    exit_code: int = 1
    samples: int = 0


DEFAULT_PROFILE = Profile()


def read_profiles(path: Path) -> dict[str, Profile]:
    """Each task's profile from its succeeded and failed occurrences in the file at `path`
    (the copy, read before the simulation adds to it)."""
    durations: dict[str, list[int]] = {}
    outcomes: dict[str, Counter[str]] = {}
    codes: dict[str, Counter[int]] = {}
    for task, state, started, finished, code in finished_runs(path):
        outcomes.setdefault(task, Counter())[state] += 1
        if started is not None and finished is not None and finished >= started:
            durations.setdefault(task, []).append(finished - started)
        if state == "failed" and code not in (None, 0):
            codes.setdefault(task, Counter())[code] += 1
    profiles = {}
    for task, counts in outcomes.items():
        total = counts["succeeded"] + counts["failed"]
        spans = durations.get(task)
        common = codes.get(task)
        profiles[task] = Profile(
            duration=round(statistics.median(spans)) if spans else MICROS,
            success_rate=counts["succeeded"] / total,
            exit_code=common.most_common(1)[0][0] if common else 1,
            samples=total,
        )
    return profiles


def succeeds(task: str, occurrence_id: int, rate: float) -> bool:
    """Whether a simulated run succeeds: a fixed draw from the task and occurrence, so the
    same database gives the same outcomes, and about `rate` of the runs succeed."""
    digest = hashlib.sha256(f"{task}\0{occurrence_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


# ---- the dispatcher ----------------------------------------------------------------------


@dataclass
class _SimRun:
    occurrence_id: int
    command_id: str | None
    run_id: str
    start: int
    end: int
    kind: str
    payload: dict[str, object]
    done: asyncio.Event = field(default_factory=asyncio.Event)


class SimulatedDispatcher(Dispatcher):
    """The Dispatcher protocol without processes: a run is a running event now and an
    outcome event when its engine-time duration has passed on the engine's clock."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        profiles: dict[str, Profile] | None = None,
        poll: float = POLL_SECONDS,
    ) -> None:
        self.store = store
        self.clock = clock
        self.profiles = profiles or {}
        self.poll = poll
        self.log_dir = store.log_dir
        self._runs: dict[int, _SimRun] = {}
        self._ends: list[tuple[int, int]] = []  # (end, occurrence id), a heap
        self._wake = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None

    def active(self) -> int:
        return len(self._runs)

    def profile(self, task: str) -> Profile:
        return self.profiles.get(task, DEFAULT_PROFILE)

    def _plan(self, job: Job, now: int) -> _SimRun:
        occ, spec = job.occurrence, job.task.spec
        profile = self.profile(occ.task)
        duration = profile.duration
        payload: dict[str, object]
        if spec.timeout and duration > spec.timeout:
            duration, kind = spec.timeout, RUN_FAILED
            payload = {
                "exit_code": None,
                "error_code": "TIMEOUT",
                "detail": f"timed out after {format_duration(spec.timeout)} (simulated)",
            }
        elif succeeds(occ.task, occ.id, profile.success_rate):
            kind, payload = RUN_COMPLETED, {"exit_code": 0}
        else:
            code = profile.exit_code
            kind = RUN_FAILED
            payload = {
                "exit_code": code,
                "error_code": "EXIT_NONZERO",
                "detail": f"exit {code} (simulated)",
            }
        run = _SimRun(
            occ.id,
            occ.command_id,
            f"sim-{uuid.uuid4().hex[:16]}",
            now,
            now + duration,
            kind,
            payload,
        )
        outcome = "succeeds" if kind == RUN_COMPLETED else str(payload["detail"])
        self._write_log(
            occ.id,
            f"simulated run (time-lapse): the command was not run\n"
            f"task: {occ.task}\noccurrence: {occ.id}\n"
            f"duration: {format_duration(duration)} (median of {profile.samples} recorded runs"
            f"{', 1s when none' if not profile.samples else ''})\n"
            f"success rate: {profile.success_rate:.0%}; this run {outcome}\n",
        )
        return run

    def _log_path(self, occurrence_id: int) -> Path:
        return self.log_dir / f"{occurrence_id}.log"

    def _write_log(self, occurrence_id: int, text: str) -> None:
        self.log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self._log_path(occurrence_id), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)

    async def dispatch(
        self, jobs: Sequence[Job], may_start: Fence | None = None
    ) -> list[Receipt | DispatchFailure | NotStarted]:
        results: list[Receipt | DispatchFailure | NotStarted] = []
        started: list[tuple[int, _SimRun]] = []
        fenced = False
        for job in jobs:
            if not fenced and may_start is not None:
                try:
                    fenced = not await may_start()
                except Exception:
                    log.exception("the start fence failed; starting nothing more of this batch")
                    fenced = True
            if fenced:
                results.append(NotStarted("lease lost"))
                continue
            try:
                run = self._plan(job, self.clock.now())
            except Exception as exc:
                results.append(DispatchFailure("DISPATCH_FAILED", f"simulated start: {exc}"))
                continue
            started.append((len(results), run))
            results.append(
                Receipt(job.occurrence.command_id or "", str(self._log_path(run.occurrence_id)))
            )
        if not started:
            return results
        events = [
            NewEvent(
                run.start,
                RUN_TRANSITION,
                run.command_id,
                run.run_id,
                {
                    "state": "running",
                    "log_path": str(self._log_path(run.occurrence_id)),
                    "simulated": True,
                },
            )
            for _, run in started
        ]
        try:
            await self.store.append_events(events)
        except Exception as exc:
            for index, _ in started:
                results[index] = DispatchFailure("DISPATCH_FAILED", f"simulated start: {exc}")
            return results
        for _, run in started:
            self._runs[run.occurrence_id] = run
            heapq.heappush(self._ends, (run.end, run.occurrence_id))
        self._ensure_timer()
        self._wake.set()
        return results

    def _ensure_timer(self) -> None:
        if self._timer is None or self._timer.done():
            self._timer = asyncio.create_task(self._finish_loop(), name="tickui-simulated-runs")

    async def _finish_loop(self) -> None:
        while True:
            self._wake.clear()
            now = self.clock.now()
            due: list[_SimRun] = []
            while self._ends and self._ends[0][0] <= now:
                _, occ_id = heapq.heappop(self._ends)
                run = self._runs.pop(occ_id, None)  # None: cancelled meanwhile
                if run is not None:
                    due.append(run)
            if due:
                events = [NewEvent(r.end, r.kind, r.command_id, r.run_id, r.payload) for r in due]
                try:
                    await self.store.append_events(events)
                except Exception:
                    log.exception("recording %d simulated outcome(s) failed", len(due))
                for run in due:
                    run.done.set()
                continue
            if not self._ends:
                await self._wake.wait()
                continue
            wait = (self._ends[0][0] - now) / MICROS / self.clock.scale
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(self.poll, max(wait, 0.001)))

    async def cancel(self, occurrence_id: int, reason: str) -> bool:
        run = self._runs.pop(occurrence_id, None)
        if run is None:
            return False
        try:
            await self.store.append_events(
                [
                    NewEvent(
                        self.clock.now(),
                        RUN_CANCELED,
                        run.command_id,
                        run.run_id,
                        {"exit_code": None, "detail": reason},
                    )
                ]
            )
        except Exception:
            log.exception("recording the cancel of occurrence %s failed", occurrence_id)
        finally:
            run.done.set()
        return True

    async def shutdown(self, grace: float) -> None:
        """Let runs end for up to `grace` real seconds, then cancel the rest."""
        await wait_until_done((run.done for run in self._runs.values()), grace)
        for occ_id in list(self._runs):
            await self.cancel(occ_id, "engine_stopped")
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._timer
            self._timer = None
