"""The circuit breaker around publishing: pure, driven by monotonic time."""

from __future__ import annotations

import pytest

from tickui.ticks.breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker

WALL = 1_800_000_000_000_000  # wall time in microseconds; only recorded, never decisive


def opened(threshold: int = 3, reset: float = 10.0, at: float = 100.0) -> CircuitBreaker:
    breaker = CircuitBreaker(threshold, reset)
    for i in range(threshold):
        assert breaker.allow(at, WALL)
        breaker.failure(at, WALL + i, f"fail {i}")
    assert breaker.state == OPEN
    return breaker


def test_starts_closed_and_allows():
    breaker = CircuitBreaker(3, 10.0)
    assert breaker.state == CLOSED
    assert breaker.failures == 0
    assert breaker.allow(0.0, WALL)
    assert breaker.allow(0.0, WALL)  # CLOSED never limits calls
    assert breaker.retry_in(0.0) is None
    assert list(breaker.transitions) == []


def test_failures_below_threshold_stay_closed():
    breaker = CircuitBreaker(3, 10.0)
    breaker.failure(1.0, WALL, "a")
    breaker.failure(2.0, WALL, "b")
    assert breaker.state == CLOSED
    assert breaker.failures == 2
    assert breaker.last_error == "b"
    assert breaker.allow(2.0, WALL)
    assert list(breaker.transitions) == []


def test_opens_at_threshold_consecutive_failures():
    breaker = CircuitBreaker(3, 10.0)
    for i in range(3):
        breaker.failure(5.0, WALL + i, "broker down")
    assert breaker.state == OPEN
    assert breaker.opened_at == 5.0
    assert len(breaker.transitions) == 1
    t = breaker.transitions[0]
    assert (t.source, t.target) == (CLOSED, OPEN)
    assert t.at == WALL + 2
    assert "3 consecutive failures" in t.reason
    assert "broker down" in t.reason


def test_threshold_of_one_opens_on_first_failure():
    breaker = CircuitBreaker(1, 1.0)
    breaker.failure(0.0, WALL, "x")
    assert breaker.state == OPEN


def test_success_in_closed_resets_the_count():
    breaker = CircuitBreaker(3, 10.0)
    breaker.failure(1.0, WALL, "a")
    breaker.failure(1.0, WALL, "b")
    breaker.success(1.0, WALL)
    assert breaker.failures == 0
    breaker.failure(1.0, WALL, "c")
    breaker.failure(1.0, WALL, "d")
    assert breaker.state == CLOSED  # only 2 consecutive since the success
    breaker.failure(1.0, WALL, "e")
    assert breaker.state == OPEN
    # a success in CLOSED is no transition
    assert [(t.source, t.target) for t in breaker.transitions] == [(CLOSED, OPEN)]


def test_open_refuses_until_reset_timeout():
    breaker = opened(reset=10.0, at=100.0)
    assert not breaker.allow(100.0, WALL)
    assert not breaker.allow(105.0, WALL)
    assert not breaker.allow(109.999, WALL)
    assert breaker.state == OPEN
    assert breaker.allow(110.0, WALL)  # exactly the timeout: a probe may go
    assert breaker.state == HALF_OPEN


def test_retry_in_counts_down_on_monotonic_time():
    breaker = opened(reset=10.0, at=100.0)
    assert breaker.retry_in(100.0) == pytest.approx(10.0)
    assert breaker.retry_in(104.0) == pytest.approx(6.0)
    assert breaker.retry_in(110.0) == pytest.approx(0.0)
    assert breaker.retry_in(500.0) == 0.0  # never negative
    breaker.allow(110.0, WALL)
    assert breaker.state == HALF_OPEN
    assert breaker.retry_in(110.0) is None  # only while OPEN


def test_half_open_lets_exactly_one_probe_through():
    breaker = opened(reset=10.0, at=100.0)
    assert breaker.allow(111.0, WALL + 7)
    assert breaker.state == HALF_OPEN
    t = breaker.transitions[-1]
    assert (t.source, t.target) == (OPEN, HALF_OPEN)
    assert t.at == WALL + 7
    assert "reset timeout" in t.reason
    # while the probe is out, everybody else is refused
    assert not breaker.allow(111.0, WALL)
    assert not breaker.allow(200.0, WALL)
    assert breaker.state == HALF_OPEN


def test_probe_success_closes():
    breaker = opened(reset=10.0, at=100.0)
    assert breaker.allow(110.0, WALL)
    breaker.success(110.5, WALL + 9)
    assert breaker.state == CLOSED
    assert breaker.failures == 0
    assert breaker.opened_at is None
    t = breaker.transitions[-1]
    assert (t.source, t.target, t.at) == (HALF_OPEN, CLOSED, WALL + 9)
    assert "succeeded" in t.reason
    assert breaker.allow(110.5, WALL)
    assert breaker.allow(110.5, WALL)  # no more probe limit


def test_after_closing_it_needs_a_full_threshold_again():
    breaker = opened(threshold=3, reset=10.0, at=100.0)
    breaker.allow(110.0, WALL)
    breaker.success(110.0, WALL)
    breaker.failure(111.0, WALL, "a")
    breaker.failure(111.0, WALL, "b")
    assert breaker.state == CLOSED
    breaker.failure(111.0, WALL, "c")
    assert breaker.state == OPEN


def test_probe_failure_reopens_with_a_fresh_timer():
    breaker = opened(reset=10.0, at=100.0)
    assert breaker.allow(130.0, WALL)  # long after the timeout
    breaker.failure(131.0, WALL + 5, "still down")
    assert breaker.state == OPEN
    assert breaker.opened_at == 131.0
    t = breaker.transitions[-1]
    assert (t.source, t.target, t.at) == (HALF_OPEN, OPEN, WALL + 5)
    assert "probe failed" in t.reason and "still down" in t.reason
    # the timer restarted at 131, not at 100
    assert not breaker.allow(131.0, WALL)
    assert not breaker.allow(140.9, WALL)
    assert breaker.retry_in(136.0) == pytest.approx(5.0)
    assert breaker.allow(141.0, WALL)
    assert breaker.state == HALF_OPEN


def test_full_cycle_transitions_are_recorded_in_order():
    breaker = opened(threshold=2, reset=1.0, at=0.0)
    breaker.allow(1.0, WALL)
    breaker.failure(1.0, WALL, "x")
    breaker.allow(2.0, WALL)
    breaker.success(2.0, WALL)
    assert [(t.source, t.target) for t in breaker.transitions] == [
        (CLOSED, OPEN),
        (OPEN, HALF_OPEN),
        (HALF_OPEN, OPEN),
        (OPEN, HALF_OPEN),
        (HALF_OPEN, CLOSED),
    ]
    assert all(t.reason for t in breaker.transitions)


def test_transitions_are_bounded():
    breaker = CircuitBreaker(1, 1.0, keep=4)
    mono = 0.0
    for _ in range(10):
        breaker.failure(mono, WALL, "x")
        mono += 1.0
        breaker.allow(mono, WALL)
    assert len(breaker.transitions) == 4


@pytest.mark.parametrize(
    "walls",
    [
        # wall clock stepped far forward (a resume from sleep, an NTP step)
        [WALL, WALL + 86_400 * 10**6 * 365, WALL + 10**15, WALL + 10**16],
        # wall clock stepped backwards, before the epoch even
        [WALL, WALL - 86_400 * 10**6 * 365, 0, -(10**15)],
        # nonsense all over the place
        [10**17, -(10**17), 3, 10**12],
    ],
)
def test_wall_clock_jumps_change_nothing(walls):
    """Same monotonic sequence, wildly different wall values: same decisions."""

    def run(wall_of) -> list:
        breaker = CircuitBreaker(2, 10.0)
        seen = []
        steps = [
            ("failure", 0.0),
            ("failure", 1.0),  # opens at mono 1
            ("allow", 2.0),
            ("allow", 10.9),
            ("allow", 11.0),  # half-open, probe out
            ("allow", 11.0),  # refused
            ("failure", 11.5),  # reopen at 11.5
            ("allow", 21.0),
            ("allow", 21.5),  # half-open again
            ("success", 21.6),
            ("allow", 21.7),
        ]
        for i, (op, mono) in enumerate(steps):
            wall = wall_of(i)
            if op == "allow":
                seen.append(("allow", breaker.allow(mono, wall)))
            elif op == "failure":
                breaker.failure(mono, wall, "e")
            else:
                breaker.success(mono, wall)
            seen.append((breaker.state, breaker.retry_in(mono)))
        seen.append([(t.source, t.target, t.reason) for t in breaker.transitions])
        return seen

    steady = run(lambda i: WALL + i)
    jumpy = run(lambda i: walls[i % len(walls)])
    assert jumpy == steady
    assert steady[-1][-1][:2] == (HALF_OPEN, CLOSED)
    assert ("allow", False) in steady and ("allow", True) in steady


def test_wall_clock_going_back_does_not_hold_it_open():
    breaker = opened(reset=10.0, at=100.0)
    # wall clock jumps back an hour while monotonic time advances past the timeout
    assert breaker.allow(110.0, WALL - 3600 * 10**6)
    assert breaker.state == HALF_OPEN


def test_wall_clock_going_forward_does_not_release_it_early():
    breaker = opened(reset=10.0, at=100.0)
    assert not breaker.allow(101.0, WALL + 3600 * 10**6)
    assert breaker.state == OPEN
