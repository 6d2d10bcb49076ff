"""What each table cell says and how it is coloured. Pure: rows and `now` in, text out."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo

from tickui.common.redact import safe_text
from tickui.common.timeutil import MICROS, machine_zone, span
from tickui.model.records import Occurrence, Task

MODES = ("local", "utc", "task")


@lru_cache(maxsize=256)
def _task_zone(name: str) -> tzinfo | None:
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError, OSError):  # ZoneInfoNotFoundError is a KeyError
        return None


@dataclass(frozen=True)
class TimeView:
    """Which zone times are shown in: the machine's, UTC, or each task's own."""

    mode: str = "local"
    local: tzinfo | None = None  # None: the machine's zone

    def zone(self, task_tz: str | None = None) -> tzinfo:
        if self.mode == "utc":
            return UTC
        if self.mode == "task" and task_tz:
            zone = _task_zone(task_tz)
            if zone is not None:
                return zone
        return self.local or machine_zone()

    def label(self) -> str:
        if self.mode == "utc":
            return "UTC"
        if self.mode == "task":
            return "task zones"
        return f"local ({datetime.now(self.zone()).tzname()})"


def when_text(moment: int | None, now: int, zone: tzinfo) -> str:
    """A time read at a glance: the clock today, weekday and minute within 6 days either
    side, else the date and minute. "-" for no time."""
    if moment is None:
        return "-"
    when = datetime.fromtimestamp(moment / MICROS, zone)
    days = abs((when.date() - datetime.fromtimestamp(now / MICROS, zone).date()).days)
    if days == 0:
        return when.strftime("%H:%M:%S")
    if days <= 6:
        return when.strftime("%a %H:%M")
    return when.strftime("%Y-%m-%d %H:%M")


def stamp_in(moment: int | None, zone: tzinfo) -> str:
    """The full moment with its zone's abbreviation: 2027-01-15 09:00:00 CET."""
    if moment is None:
        return "-"
    return datetime.fromtimestamp(moment / MICROS, zone).strftime("%Y-%m-%d %H:%M:%S %Z")


STATE_STYLE = {
    "claimed": "yellow",
    "accepted": "yellow",
    "running": "bold cyan",
    "succeeded": "green",
    "failed": "bold red",
    "cancelled": "magenta",
    "skipped": "bright_black",
    "queued": "yellow",
}
POLICY_SHORT = {"run_once": "once", "run_all": "all", "skip": "skip"}

Cell = tuple[str, str]  # text, rich style


def clock_in(moment: int | None, zone: tzinfo = UTC) -> str:
    """HH:MM:SS in `zone` (the header's clock, a run's start in a question); "-" for none."""
    if moment is None:
        return "-"
    return datetime.fromtimestamp(moment / MICROS, zone).strftime("%H:%M:%S")


def stamp_text(moment: int | None) -> str:
    if moment is None:
        return "-"
    return datetime.fromtimestamp(moment / MICROS, UTC).strftime("%Y-%m-%d %H:%M:%S")


def countdown(until: int | None, now: int) -> str:
    """Whole seconds, rounded up: it shows 1s until the moment itself, never 0s early."""
    if until is None:
        return "-"
    if until <= now:
        return "due"
    whole = -(-(until - now) // MICROS)
    return f"{whole}s" if whole < 60 else span(whole * MICROS)


def rate_text(rate: float | None) -> str:
    """97%; never 100% unless every run succeeded (99.6% reads 99%)."""
    if rate is None:
        return "-"
    return "100%" if rate >= 1 else f"{min(int(rate * 100), 99)}%"


def task_state(task: Task, now: int, pending: Sequence[Occurrence] = ()) -> Cell:
    """What the task is doing now, the most pressing first: a run ("running 41s", from
    its held occurrence, else from the stats), one starting, a retry or a slot waiting,
    else on, off or paused. A disabled task's run says it is off too."""
    stats, enabled = task.stats, task.enabled
    active = [o for o in pending if o.active]
    running = [o.started_at for o in active if o.state == "running" and o.started_at]
    off = "" if enabled else ", off"
    if running or (stats.active and not active):
        text = f"running {span(now - min(running))}" if running else "running"
        count = max(len(active), stats.active)
        text += f" ×{count}" if count > 1 else ""
        return (text + off, "bold cyan")
    if active:
        return ("starting" + off, "yellow")
    if stats.retry_attempt is not None:
        tries = f"{stats.retry_attempt}/{task.spec.retries + 1}"
        return (f"retry {tries} in {countdown(stats.retry_at, now)}{off}", "yellow")
    if any(o.state == "queued" for o in pending):
        return ("queued" + off, "yellow")
    return ("on", "green") if enabled else enabled_off(task.note)


def task_cells(
    task: Task, now: int, view: TimeView = TimeView(), pending: Sequence[Occurrence] = ()
) -> list[Cell]:
    """`pending`: the task's active and queued runs the board holds (its STATE)."""
    spec, stats = task.spec, task.stats
    zone = view.zone(spec.tz)
    enabled = task.enabled
    nxt = task.due_at if enabled else None
    last = stats.last_started_at or stats.last_scheduled_for
    result: Cell = (stats.last_result or "-", STATE_STYLE.get(stats.last_result or "", ""))
    if stats.retry_attempt is not None:  # a retry waits: say which and when
        wait = countdown(stats.retry_at, now)
        tries = f"{stats.retry_attempt}/{spec.retries + 1}"
        result = (f"{stats.last_result or '-'}, retry {tries} in {wait}", "yellow")
    counts = f"{stats.missed}/{stats.skipped}"
    rate = stats.success_rate
    return [
        (task.name, "bold" if enabled else "bold red" if paused(task.note) else "bright_black"),
        (spec.schedule_text(), ""),
        (when_text(nxt, now, zone), ""),
        (countdown(nxt, now), "bold" if nxt is not None and nxt - now < 5 * MICROS else ""),
        (when_text(last, now, zone), ""),
        (span(now - last) if last is not None else "-", "bright_black"),
        result,
        (rate_text(rate), "" if rate is None or rate >= 1 else "yellow" if rate >= 0.9 else "red"),
        (span(stats.median_duration_us) if stats.median_duration_us is not None else "-", ""),
        task_state(task, now, pending),
        (f"{POLICY_SHORT.get(spec.misfire, spec.misfire)}/{spec.concurrency}", "bright_black"),
        (counts, "yellow" if stats.missed or stats.skipped else "bright_black"),
    ]


PAUSED_NOTE = "paused after "  # pause_after's note begins so (engine): said loudly


def paused(note: str | None) -> bool:
    """Disabled by pause_after (N failed slots in a row), not by a person."""
    return (note or "").startswith(PAUSED_NOTE)


def enabled_off(note: str | None) -> Cell:
    """A disabled task's STATE cell: its note; loud when pause_after disabled it."""
    if paused(note):
        return (safe_text(f"PAUSED {(note or '').removeprefix('paused ')}"), "bold white on red")
    return (safe_text(f"off {note or ''}".strip()), "yellow")


def attempt_text(occ: Occurrence, retries: int | None, now: int) -> str:
    """ "attempt 2/4" for a retry (of however many the task allows, when known), with
    "next in 40s" while it waits; "" for a first attempt."""
    if occ.attempt <= 1:
        return ""
    text = f"attempt {occ.attempt}"
    if retries is not None:
        text += f"/{retries + 1}"
    if occ.state == "queued" and occ.retry_at is not None:
        text += f", next in {countdown(occ.retry_at, now)}"
    return text


KIND_SHORT = {"manual": "manual", "backfill": "backfill"}


def lateness(occ: Occurrence) -> str:
    if occ.started_at is None:
        return "-"
    late = occ.started_at - occ.scheduled_for
    sign = "+" if late >= 0 else "-"
    return f"{sign}{abs(late) / MICROS:.2f}s" if abs(late) < 60 * MICROS else sign + span(abs(late))


def duration(occ: Occurrence, now: int) -> str:
    if occ.started_at is None:
        return "-"
    end = occ.finished_at if occ.finished_at is not None else now
    return span(end - occ.started_at)


_CODE_WORDS = {
    "TIMEOUT": "TIMEOUT",
    "INTERRUPTED": "INTERRUPTED",
    "DISPATCH_FAILED": "DISPATCH",
    "RUN_FAILED": "FAILED",  # a runtime's failure that named no code
}


def outcome_code(occ: Occurrence) -> str:
    """What happened, in one word: the exit code of a run that exited on its own, else why
    it ended (a timeout's SIGTERM reads TIMEOUT, not -15; a kill by someone else names the
    signal). "" while nothing is known (running, skipped)."""
    if occ.state == "cancelled":
        return "REPLACED" if (occ.detail or "").startswith("replaced") else "CANCELLED"
    code = occ.error_code or ""
    word = _CODE_WORDS.get(code)
    if word is not None and (word != "FAILED" or occ.exit_code is None):
        return word
    if code == "KILLED" and occ.exit_code is not None and occ.exit_code < 0:
        try:
            return signal.Signals(-occ.exit_code).name
        except ValueError:
            return str(occ.exit_code)
    if occ.exit_code is not None:
        return str(occ.exit_code)
    return code


def detail_text(occ: Occurrence) -> str:
    detail = safe_text((occ.detail or "").replace("\n", " "))
    if occ.covers > 1:
        detail = f"{detail} · covers {occ.covers} slots" if detail else f"covers {occ.covers} slots"
    return detail


CODE_STYLE = {"": "", "0": "", "CANCELLED": "magenta", "REPLACED": "bright_black"}


def occurrence_cells(
    occ: Occurrence,
    now: int,
    view: TimeView = TimeView(),
    task_tz: str | None = None,
    retries: int | None = None,
) -> list[Cell]:
    """Times in the view's zone; in "task" mode, in `task_tz`, the zone of the run's task
    (an occurrence carries none of its own). `retries`: how many its task allows."""
    zone = view.zone(task_tz)
    code = outcome_code(occ)
    detail = detail_text(occ)
    attempt = attempt_text(occ, retries, now)
    if attempt:
        detail = f"{attempt} · {detail}" if detail else attempt
    return [
        (str(occ.id), "bright_black"),
        (occ.state, STATE_STYLE.get(occ.state, "")),
        (occ.task, "bold"),
        (KIND_SHORT.get(occ.kind, "sched"), "cyan" if occ.kind == "backfill" else ""),
        (when_text(occ.scheduled_for, now, zone), ""),
        (when_text(occ.started_at, now, zone), ""),
        (lateness(occ), "bright_black"),
        (duration(occ, now), ""),
        (code or "-", CODE_STYLE.get(code, "red")),
        (detail, "yellow" if occ.state == "queued" else "bright_black"),
    ]
