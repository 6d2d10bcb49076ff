"""Retries and pause-after: which failures are retried, how long the next attempt waits,
and how failed slots count towards pausing a task. Pure: plain values in, plain values out.
"""

from __future__ import annotations

from dataclasses import dataclass

from tickui.common.timeutil import MICROS, format_duration

REASONS = ("exit", "timeout", "interrupted", "dispatch")
DEFAULT_ON = ("exit", "timeout", "interrupted")
MAX_RETRIES = 100
DEFAULT_DELAY = 10 * MICROS
DEFAULT_MAX_DELAY = 3600 * MICROS
MIN_DELAY = 100_000  # 100 ms
MAX_DELAY = 7 * 86400 * MICROS
MAX_PAUSE_AFTER = 1000
JITTER = 0.10  # a delay is shortened by up to this fraction, fixed per occurrence


def reason(error_code: str | None) -> str:
    """The retry_on word a failure's error code falls under. A run that exited non-zero,
    was killed by a signal or failed by a runtime's own code is an `exit`. A worker lost
    mid-run interrupted it; a command no worker started in time was not dispatched."""
    if error_code == "TIMEOUT":
        return "timeout"
    if error_code in ("INTERRUPTED", "WORKER_LOST"):
        return "interrupted"
    if error_code in ("DISPATCH_FAILED", "DISPATCH_TIMEOUT", "DEADLINE"):
        return "dispatch"
    return "exit"


def retryable(state: str, error_code: str | None, retry_on: tuple[str, ...]) -> bool:
    """Only a failure is retried (never a cancelled, replaced or skipped run), and only
    for a reason the task names."""
    return state == "failed" and reason(error_code) in retry_on


def jitter_fraction(first_id: int, attempt: int) -> float:
    """A stable number in [0, 1) from the first attempt's id and the attempt number."""
    import hashlib  # loads OpenSSL: only a retry needs it

    digest = hashlib.sha256(f"retry:{first_id}:{attempt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def delay(attempt: int, base: int, cap: int, first_id: int) -> int:
    """Microseconds to wait after attempt `attempt` (1 = the first run) failed, before
    the next: base doubled per attempt, at most `cap`, shortened by a jitter of up to 10%
    fixed by the occurrence (the same after a restart)."""
    raw = min(base * 2 ** min(attempt - 1, 62), cap)
    return raw - int(raw * JITTER * jitter_fraction(first_id, attempt))


@dataclass(frozen=True, slots=True)
class Policy:
    """A task's retry and pause settings, as the store reads them from its definition."""

    retries: int = 0
    delay: int = DEFAULT_DELAY
    max_delay: int = DEFAULT_MAX_DELAY
    on: tuple[str, ...] = DEFAULT_ON
    pause_after: int | None = None

    @property
    def inert(self) -> bool:
        return not self.retries and self.pause_after is None


def next_retry(
    policy: Policy, state: str, error_code: str | None, attempt: int, first_id: int, finished: int
) -> int | None:
    """When the next attempt of a slot may start (retry_at), or None when there is none."""
    if attempt > policy.retries or not retryable(state, error_code, policy.on):
        return None
    return finished + delay(attempt, policy.delay, policy.max_delay, first_id)


def count_failures(failures: int, outcome: str, pause_after: int | None) -> tuple[int, bool]:
    """A slot's final outcome folded into the consecutive-failure count: (new count,
    pause now). Success resets; a failure adds one; anything else leaves it."""
    if outcome == "succeeded":
        return 0, False
    if outcome != "failed":
        return failures, False
    failures += 1
    return failures, pause_after is not None and failures >= pause_after


PAUSE_NOTE = "paused after"  # how a pause's note begins (a person's own note does not)


def pause_note(count: int, code: str | None) -> str:
    return f"{PAUSE_NOTE} {count} consecutive failures (last: {code or 'FAILED'})"


def attempt_text(attempt: int, retries: int) -> str:
    """'attempt 2/4' (of 1 + retries), or '' for a task that never retries."""
    if retries <= 0 and attempt <= 1:
        return ""
    return f"attempt {attempt}/{max(retries + 1, attempt)}"


def wait_text(retry_at: int | None, now: int) -> str:
    """'next in 40s' for a pending retry; 'due' once its time has come."""
    if retry_at is None or retry_at <= now:
        return "due"
    left = retry_at - now
    step = MICROS if left >= MICROS else 1000  # up to a whole second, or millisecond
    left = -(-left // step) * step
    return f"next in {format_duration(left)}"
