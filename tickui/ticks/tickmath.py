"""Slot arithmetic for the tick loop. Pure: monotonic seconds in, decisions out."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(slots=True)
class NextTick:
    index: int  # tick k is due at start + k * interval (+ its jitter)
    deadline: float
    missed: int  # whole slots that passed without a tick: counted, never emitted


def deadline(start: float, interval: float, index: int, jitter: float = 0.0) -> float:
    return start + index * interval + jitter


def next_tick(
    start: float, interval: float, last: int, now: float, jitter: float = 0.0
) -> NextTick:
    """The tick to wait for after tick `last`: the next one, unless its whole slot
    has already passed, in which case the current slot's tick and how many were skipped."""
    index = last + 1
    current = int((now - start) // interval)
    if current > index:
        return NextTick(current, deadline(start, interval, current, jitter), current - index)
    return NextTick(index, deadline(start, interval, index, jitter), 0)


def newest_slot(start: float, interval: float, planned: int, now: float) -> tuple[int, int]:
    """After waking for slot `planned` at `now`: the slot to tick for and how many slots
    to count as missed. Woken within the planned slot: (planned, 0). Woken after the
    whole slot passed (a stall): the newest slot whose time has come, and the ones
    skipped, so a stall gives one tick, never a late one followed by the current one."""
    current = int((now - start) // interval)
    if current > planned:
        return current, current - planned
    return planned, 0


def first_slot(now_us: int, slot_us: int) -> int:
    """The first wall-clock multiple of `slot_us` (since the epoch) at or after `now_us`,
    in integer microseconds: where an aligned ticker's slots fall, exactly."""
    return -(-now_us // slot_us) * slot_us


def draw_jitter(rng: random.Random, jitter: float) -> float:
    """A delay in [0, jitter] for one tick."""
    return rng.uniform(0.0, jitter) if jitter > 0 else 0.0


def clock_jump(previous_offset: float, offset: float, interval: float) -> float | None:
    """Wall minus monotonic time moved by more than an interval: a step or a resume.

    Returns the jump in seconds (positive: wall clock went forward), or None."""
    moved = offset - previous_offset
    return moved if abs(moved) > interval else None
