"""Two `tickui run` processes on one database: when the holder stops, the standby in the
other process takes over at once and runs the next slots; no slot runs twice or is lost."""

from __future__ import annotations

import time

import pytest
from engine_procs import (
    MICROS,
    Engine,
    add_every_second,
    iso_second,
    lease_owner,
    occurrences,
    ran,
    wait_for,
)

TAKEOVER = 2.0  # s from the holder's exit to the standby holding the lease (ticks: 250 ms)


@pytest.mark.slow
def test_the_standby_takes_over_when_the_holder_stops(store_target, tmp_path):
    db, out = store_target, tmp_path / "slots.txt"
    anchor = iso_second(time.time() + 2)
    add_every_second(db, "beat", out, anchor)
    holder = Engine(db, tmp_path / "holder.err")
    standby = None
    try:
        wait_for(lambda: holder.owns(lease_owner(db)), 15, "the first engine to hold the lease")
        standby = Engine(db, tmp_path / "standby.err")
        wait_for(lambda: "standby: lease held by" in standby.stderr(), 15, "standby")
        wait_for(lambda: len(ran(out)) >= 3, 15, "three runs by the holder")

        assert holder.stop() == 0, holder.stderr()
        exited = time.monotonic()
        exited_us = time.time_ns() // 1000
        wait_for(lambda: standby.owns(lease_owner(db)), 15, "the standby to take the lease")
        took = time.monotonic() - exited
        assert took <= TAKEOVER, f"the standby took {took:.2f} s to take over"

        wait_for(
            lambda: (
                sum(standby.owns(o.owner) for o in occurrences(db) if o.state == "succeeded") >= 3
            ),
            15,
            "three runs by the standby",
        )
        assert standby.stop() == 0, standby.stderr()
    finally:
        holder.kill()
        if standby is not None:
            standby.kill()

    lines = ran(out)
    assert len(lines) == len(set(lines)), "a slot ran twice"
    occs = [o for o in occurrences(db) if o.kind == "scheduled"]
    assert all(o.state == "succeeded" and o.covers == 1 for o in occs), [
        (o.scheduled_for, o.state, o.covers, o.detail) for o in occs
    ]
    slots = [o.scheduled_for for o in occs]
    assert len(slots) == len(set(slots)), "a slot was claimed twice"
    assert sorted(slots) == list(range(min(slots), max(slots) + 1, MICROS)), "a slot was lost"
    assert sorted(slot for _, slot in lines) == sorted(slots)
    by_holder = [o.scheduled_for for o in occs if holder.owns(o.owner)]
    by_standby = [o.scheduled_for for o in occs if standby.owns(o.owner)]
    assert by_holder and by_standby and len(by_holder) + len(by_standby) == len(occs)
    assert max(by_holder) < min(by_standby), "the engines ran slots side by side"
    assert min(by_standby) == max(by_holder) + MICROS, "the standby did not run the next slot"
    first = next(o for o in occs if o.scheduled_for == min(by_standby))
    # late counted from the slot, or from the holder's exit when the slot came while the
    # holder was still stopping (it claims nothing then, and its exit is not the standby's)
    late = first.started_at - max(first.scheduled_for, exited_us)
    assert late < 1.5 * MICROS, f"the next slot ran {late / MICROS:.2f} s late"
