"""The tick loop's slot arithmetic, with made-up monotonic times."""

from __future__ import annotations

import random

from tickui.tickmath import clock_jump, deadline, draw_jitter, next_tick


def test_on_time_ticks_follow_the_grid():
    nt = next_tick(start=100.0, interval=0.5, last=3, now=101.9)
    assert (nt.index, nt.deadline, nt.missed) == (4, 102.0, 0)


def test_late_by_whole_slots_skips_them_and_counts_them():
    nt = next_tick(start=0.0, interval=1.0, last=2, now=7.3)
    assert nt.index == 7 and nt.deadline == 7.0 and nt.missed == 4


def test_no_drift_over_2000_ticks_with_random_emit_costs():
    rng = random.Random(7)
    start, interval, now, last = 50.0, 0.01, 50.0, -1
    emitted = []
    for _ in range(2000):
        nt = next_tick(start, interval, last, now)
        now = max(now, nt.deadline) + rng.uniform(0, 0.009)  # wake up, emit
        emitted.append(nt.index)
        last = nt.index
    assert emitted == list(range(2000)), "a slot was skipped or repeated"
    assert deadline(start, interval, 1999) == start + 1999 * interval


def test_jitter_stays_within_bounds():
    rng = random.Random(1)
    draws = [draw_jitter(rng, 0.2) for _ in range(5000)]
    assert all(0 <= d <= 0.2 for d in draws)
    assert max(draws) > 0.19 and min(draws) < 0.01
    assert draw_jitter(rng, 0) == 0


def test_clock_jump_needs_more_than_an_interval():
    assert clock_jump(10.0, 10.5, 1.0) is None
    assert clock_jump(10.0, 13.0, 1.0) == 3.0
    assert clock_jump(10.0, 8.0, 1.0) == -2.0
