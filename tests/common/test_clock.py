"""The clocks: manual for tests, scaled for time-lapse."""

from __future__ import annotations

import pytest

from tickui.common.clock import ManualClock, ScaledClock
from tickui.common.errors import BadInput
from tickui.common.timeutil import MICROS


def test_manual_clock_moves_only_when_told():
    clock = ManualClock(1_000 * MICROS)
    assert clock.now() == 1_000 * MICROS
    clock.advance(2.5)
    assert clock.now() == 1_002_500_000 and clock.monotonic() == 2.5
    clock.set(5 * MICROS)  # a wall-clock jump leaves monotonic time alone
    assert clock.now() == 5 * MICROS and clock.monotonic() == 2.5


def test_scaled_clock_runs_n_times_faster_from_its_creation():
    base = ManualClock(1_000 * MICROS)
    clock = ScaledClock(60, base=base)
    assert clock.now() == 1_000 * MICROS
    base.advance(1.5)
    assert clock.now() == 1_000 * MICROS + 90 * MICROS
    assert clock.scale == 60


@pytest.mark.parametrize("scale", [0.5, 3601])
def test_scaled_clock_refuses_scales_out_of_range(scale):
    with pytest.raises(BadInput) as caught:
        ScaledClock(scale, base=ManualClock(0))
    assert caught.value.field == "time-scale"
