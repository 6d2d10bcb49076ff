"""The PostgreSQL server restarted under a running engine: claims resume once it is back,
no slot runs twice, none is lost, and the engine said, in one line each, that its store
was down and that it works again."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from engine_procs import (
    MICROS,
    Engine,
    add_every_second,
    iso_second,
    lease_owner,
    occurrences,
    ran,
    rows,
    wait_for,
)


@pytest.mark.slow
def test_a_server_restart_loses_nothing_and_runs_nothing_twice(tmp_path, private_pg):
    url, out = private_pg.url, tmp_path / "ran.txt"
    add_every_second(url, "beat", out, iso_second(time.time() + 2))
    # its first slot as stored: the anchor, or the next second after the add when the add
    # outlasted the 2 s on a loaded machine
    (first,) = [r["next_run_at"] for r in rows(url, "SELECT next_run_at FROM tasks")]
    engine = Engine(url, tmp_path / "engine.err")
    try:
        wait_for(lambda: lease_owner(url), 20, "the engine to hold the lease")
        wait_for(lambda: len(ran(out)) >= 3, 20, "three runs before the restart")
        private_pg.stop()
        down_at = time.time()
        wait_for(lambda: "failed" in engine.stderr(), 20, "the engine to say its store is down")
        time.sleep(max(0.0, down_at + 3 - time.time()))  # down for 3 s: slots fall due meanwhile
        private_pg.start_with_retries(same_port=True)
        back = len(ran(out))
        wait_for(lambda: len(ran(out)) >= back + 3, 30, "three runs after the restart")
        assert engine.stop() == 0, engine.stderr()[-3000:]
    finally:
        engine.kill()
    said = engine.stderr()
    assert "Traceback" not in said, said[-3000:]
    assert "PostgreSQL store" in said and "works again" in said, said[-3000:]

    lines = ran(out)
    twice = [pair for pair, n in Counter(lines).items() if n > 1]
    assert not twice, f"ran twice: {twice}"
    occs = [o for o in occurrences(url) if o.kind == "scheduled"]
    assert not [o for o in occs if o.state in ("claimed", "accepted", "running")]
    covered = Counter(slot for o in occs for slot in o.slots(MICROS))
    assert sorted(covered) == list(range(first, max(covered) + 1, MICROS)), "a slot was lost"
    assert all(n == 1 for n in covered.values()), "a slot recorded twice"
    in_file = {slot for _, slot in lines}
    for o in occs:
        if o.state == "succeeded":
            assert o.scheduled_for in in_file, o
        else:  # the slots that fell due while it was down: skipped or coalesced, said why
            assert o.state == "skipped" or o.covers > 1, o
