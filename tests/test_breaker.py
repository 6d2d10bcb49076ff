"""The circuit breaker, on monotonic time only."""

from __future__ import annotations

from tickui.breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker


def _fail(b: CircuitBreaker, mono: float, times: int, wall: int = 0) -> None:
    for _ in range(times):
        assert b.allow(mono, wall)
        b.failure(mono, wall, "boom")


def test_opens_at_the_threshold_and_fails_fast():
    b = CircuitBreaker(threshold=3, reset_timeout=10)
    _fail(b, 0.0, 2)
    assert b.state == CLOSED and b.failures == 2
    _fail(b, 0.0, 1)
    assert b.state == OPEN
    assert not b.allow(9.9, 0)
    assert b.retry_in(4.0) == 6.0
    assert [(t.source, t.target) for t in b.transitions] == [(CLOSED, OPEN)]
    assert "3 consecutive failures" in b.transitions[-1].reason


def test_a_success_resets_the_count():
    b = CircuitBreaker(threshold=3, reset_timeout=10)
    _fail(b, 0.0, 2)
    b.success(0.0, 0)
    _fail(b, 0.0, 2)
    assert b.state == CLOSED and b.failures == 2


def test_half_open_lets_one_probe_through_and_closes_on_success():
    b = CircuitBreaker(threshold=1, reset_timeout=5)
    _fail(b, 100.0, 1)
    assert b.allow(105.0, 0)
    assert b.state == HALF_OPEN
    assert not b.allow(105.1, 0), "a second probe while the first is out"
    b.success(105.2, 7)
    assert b.state == CLOSED and b.failures == 0 and b.retry_in(106) is None
    assert [t.target for t in b.transitions] == [OPEN, HALF_OPEN, CLOSED]
    assert b.transitions[-1].at == 7


def test_a_failed_probe_reopens_with_a_fresh_timer():
    b = CircuitBreaker(threshold=1, reset_timeout=5)
    _fail(b, 0.0, 1)
    assert b.allow(5.0, 0)
    b.failure(5.0, 0, "still down")
    assert b.state == OPEN
    assert not b.allow(9.9, 0)
    assert b.allow(10.0, 0) and b.state == HALF_OPEN
    assert "probe failed: still down" in b.transitions[-2].reason


def test_wall_clock_jumps_change_nothing():
    b = CircuitBreaker(threshold=1, reset_timeout=5)
    _fail(b, 0.0, 1, wall=10**15)
    assert not b.allow(1.0, 10**18)  # wall time leapt forward a long way: still open
    assert not b.allow(2.0, -(10**15))
    assert b.allow(5.0, 0)
