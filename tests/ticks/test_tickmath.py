"""The tick loop's slot arithmetic, with made-up monotonic times."""

from __future__ import annotations

import random

import pytest

from tickui.ticks.tickmath import (
    clock_jump,
    deadline,
    draw_jitter,
    first_slot,
    newest_slot,
    next_tick,
)


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


# ---- slots, missed ticks and bursts --------------------------------------------------------


def test_tick_k_is_due_at_start_plus_k_intervals_plus_its_jitter():
    assert deadline(1000.0, 0.25, 0) == 1000.0
    assert deadline(1000.0, 0.25, 8) == 1002.0
    assert deadline(1000.0, 0.25, 8, jitter=0.125) == 1002.125
    nt = next_tick(start=1000.0, interval=0.25, last=7, now=1001.0, jitter=0.125)
    assert (nt.index, nt.deadline, nt.missed) == (8, 1002.125, 0)


def test_the_first_tick_is_due_at_start():
    nt = next_tick(start=10.0, interval=1.0, last=-1, now=9.5)
    assert (nt.index, nt.deadline, nt.missed) == (0, 10.0, 0)


def test_late_inside_the_next_slot_is_emitted_late_not_skipped():
    # tick 3 due at 3.0; now is 3.9: still tick 3's slot, so tick 3 (late), none missed
    nt = next_tick(start=0.0, interval=1.0, last=2, now=3.9)
    assert (nt.index, nt.deadline, nt.missed) == (3, 3.0, 0)


def test_a_whole_slot_passed_is_missed():
    # tick 3's slot [3, 4) is over at 4.0: jump to tick 4 and count tick 3 as missed
    nt = next_tick(start=0.0, interval=1.0, last=2, now=4.0)
    assert (nt.index, nt.deadline, nt.missed) == (4, 4.0, 1)


def test_late_by_many_slots_jumps_to_the_current_one_without_a_burst():
    start, interval = 0.0, 0.01
    nt = next_tick(start, interval, last=9, now=5.0025)  # a 5 s stall after tick 9
    assert nt.index == 500 and nt.missed == 490
    assert nt.deadline == deadline(start, interval, 500)
    # after emitting it, the next tick is the next slot on the grid: no catch-up burst
    after = next_tick(start, interval, last=nt.index, now=5.003)
    assert (after.index, after.missed) == (501, 0)
    assert after.deadline == deadline(start, interval, 501) > 5.003


def test_the_loop_never_emits_two_ticks_for_one_stall():
    """Replay a loop that stalls now and then: every emitted tick's deadline is in
    the future or within its own slot, so ticks never come back to back."""
    rng = random.Random(3)
    start, interval, now, last = 0.0, 0.01, 0.0, -1
    missed = emitted = 0
    for step in range(3000):
        nt = next_tick(start, interval, last, now)
        missed += nt.missed
        assert nt.index > last
        assert now - nt.deadline < interval  # never more than a slot late
        now = max(now, nt.deadline) + rng.uniform(0, 0.002)
        if step % 100 == 99:
            now += rng.uniform(0.02, 0.5)  # a stall (GC, a blocked loop, a slow disk)
        last = nt.index
        emitted += 1
    assert missed > 0
    assert emitted + missed == last + 1  # every slot is either emitted or counted


def _simulate(ticks: int, start: float, interval: float, seed: int) -> tuple[float, int]:
    """Wake at each deadline, emit at a random cost below one interval, plan the next."""
    rng = random.Random(seed)
    mono, last, missed = start, -1, 0
    for _ in range(ticks):
        nt = next_tick(start, interval, last, mono)
        missed += nt.missed
        mono = max(mono, nt.deadline)  # the sleep
        mono += rng.uniform(0.0, interval * 0.95)  # the emit
        last = nt.index
    nt = next_tick(start, interval, last, mono)
    return nt.deadline, nt.index + missed


def test_tick_2000_is_due_exactly_at_start_plus_2000_intervals():
    # binary-exact numbers: the grid has no rounding at all
    start, interval = 1024.0, 0.015625
    due, index = _simulate(2000, start, interval, seed=11)
    assert index == 2000
    assert due == start + 2000 * interval == 1055.25


def test_no_drift_with_a_decimal_interval():
    start, interval = 12345.678, 0.01
    due, index = _simulate(2000, start, interval, seed=5)
    assert index == 2000
    assert due == start + 2000 * interval
    assert abs(due - (start + 20.0)) < 1e-9


def test_the_reference_loop_would_drift_by_every_emit_cost():
    """The contrast the arithmetic exists for: sleeping one interval after each emit."""
    rng = random.Random(11)
    interval, mono, costs = 0.015625, 1024.0, 0.0
    for _ in range(2000):
        mono += interval
        cost = rng.uniform(0.0, interval * 0.95)
        mono += cost
        costs += cost
    assert mono - (1024.0 + 2000 * interval) > 10 * interval  # it would be far behind
    due, _ = _simulate(2000, 1024.0, 0.015625, seed=11)
    assert due == 1024.0 + 2000 * 0.015625


# ---- jitter ----------------------------------------------------------------------------------


def test_jitter_bounds_over_many_draws_and_seeds():
    for seed in range(5):
        rng = random.Random(seed)
        for bound in (0.001, 0.05, 9.999):
            draws = [draw_jitter(rng, bound) for _ in range(4000)]
            assert all(0.0 <= d <= bound for d in draws)
            assert len(set(draws)) > 3900  # really random, not a constant
            mean = sum(draws) / len(draws)
            assert 0.4 * bound < mean < 0.6 * bound  # spread over the range


def test_jitter_is_reproducible_with_a_seed():
    one = [draw_jitter(random.Random(42), 0.3) for _ in range(3)]
    two = [draw_jitter(random.Random(42), 0.3) for _ in range(3)]
    assert one == two


def test_no_jitter_is_exactly_zero_and_draws_nothing():
    rng = random.Random(9)
    state = rng.getstate()
    assert draw_jitter(rng, 0.0) == 0.0
    assert draw_jitter(rng, -1.0) == 0.0
    assert rng.getstate() == state


# ---- clock jumps -----------------------------------------------------------------------------


def test_clock_jump_threshold_is_strictly_more_than_an_interval():
    assert clock_jump(100.0, 100.0, 0.5) is None
    assert clock_jump(100.0, 100.5, 0.5) is None  # exactly an interval: not a jump
    assert clock_jump(100.0, 99.5, 0.5) is None
    assert clock_jump(100.0, 100.5001, 0.5) == pytest.approx(0.5001)
    assert clock_jump(100.0, 99.4999, 0.5) == pytest.approx(-0.5001)


def test_clock_jump_sign_follows_the_wall_clock():
    forward = clock_jump(-5.0, 3595.0, 1.0)  # wall clock stepped an hour ahead (resume)
    backward = clock_jump(3595.0, -5.0, 1.0)  # stepped an hour back (NTP)
    assert forward == pytest.approx(3600.0)
    assert backward == pytest.approx(-3600.0)


def test_small_wobble_is_not_a_jump_whatever_the_interval():
    rng = random.Random(2)
    offset = 1e9
    for interval in (0.01, 1.0, 60.0):
        for _ in range(500):
            wobble = rng.uniform(-interval, interval) * 0.99
            assert clock_jump(offset, offset + wobble, interval) is None


# ---- the stall rule and wall-clock slots ---------------------------------------------------


def test_woken_within_the_planned_slot_ticks_for_it():
    assert newest_slot(start=10.0, interval=1.0, planned=4, now=14.0) == (4, 0)
    assert newest_slot(start=10.0, interval=1.0, planned=4, now=14.999) == (4, 0)


def test_woken_after_a_stall_ticks_once_for_the_newest_slot_and_counts_the_rest():
    # planned slot 4 (due at 14.0), woken at 17.5: slots 4, 5 and 6 passed whole
    assert newest_slot(start=10.0, interval=1.0, planned=4, now=17.5) == (7, 3)
    # just into the next slot: one missed
    assert newest_slot(start=10.0, interval=1.0, planned=4, now=15.0) == (5, 1)


def test_a_stall_then_the_next_plan_has_no_catch_up():
    index, missed = newest_slot(0.0, 0.5, planned=2, now=3.6)
    assert (index, missed) == (7, 5)
    nt = next_tick(0.0, 0.5, last=index, now=3.6)
    assert (nt.index, nt.deadline, nt.missed) == (8, 4.0, 0)  # the next slot, not a burst


def test_first_slot_is_the_next_wall_clock_multiple_of_the_interval():
    assert first_slot(1_000_000_000_123_456, 1_000_000) == 1_000_000_001_000_000
    assert first_slot(1_000_000_001_000_000, 1_000_000) == 1_000_000_001_000_000  # on it
    assert first_slot(1_800_000_000_000_001, 250_000) == 1_800_000_000_250_000
