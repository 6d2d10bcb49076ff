"""Chaos, short enough for CI: three `tickui run` engines on one database, one of them killed
with SIGKILL at random every 1-2 s and restarted, for 30 s on a SQLite file and 60 s on a
PostgreSQL database, where the engines play two hosts (TICKUI_HOST: one on host-a, two on
host-b), so that a takeover across hosts must wait out the lease. Then, from the commands' own
output file and from the history:

- no slot ran twice (the file) and no slot is recorded twice (the history, coalesced runs
  counted for every slot they cover);
- none lost: every slot from the anchor to the end is covered by exactly one occurrence,
  and each says honestly what happened to it:
    succeeded            -> its command ran (its slot is in the file, once);
    failed / INTERRUPTED -> its engine was killed around it: it may or may not have run;
    cancelled            -> stopped with a reason (its command may have started);
    skipped              -> not run, with a reason (misfire, overlap): not in the file,
                            nor are the older slots a coalesced run covers;
    skipped / not_started -> claimed by an engine that lost its lease before starting it:
                            its command never wrote (the file names the occurrence
                            that wrote each line), and the slot handed back is
                            covered by another record;
  anything else (DISPATCH_FAILED, a run in the file whose record says it never started)
  fails the test;
- nothing is left active after a clean stop (SIGTERM) of the survivors.

The random seed is printed and named in every failure; TICKUI_CHAOS_SEED replays one.
"""

from __future__ import annotations

import os
import random
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
    ran_ids,
    rows,
    wait_for,
)

SEED = int(os.environ.get("TICKUI_CHAOS_SEED", "9031"))
DURATION = {"sqlite": 30.0, "postgresql": 60.0}  # seconds of killing, by store
TASKS = ("chaos-a", "chaos-b", "chaos-c")
ENGINES = 3


@pytest.mark.slow
def test_three_engines_one_killed_at_random_every_second_or_two(tmp_path, store_target):
    rng = random.Random(SEED)
    print(f"chaos seed {SEED} (replay: TICKUI_CHAOS_SEED={SEED})")
    db, out = store_target, tmp_path / "ran.txt"
    kind = "postgresql" if isinstance(db, str) else "sqlite"
    hosts = ("host-a", "host-b", "host-b") if kind == "postgresql" else (None,) * ENGINES
    anchor_at = int(time.time()) + 6  # after the three `task add`s, even on a loaded machine
    for name in TASKS:
        # Runs last 0.4 s: a kill often finds one in flight, which recovery must settle.
        add_every_second(db, name, out, iso_second(anchor_at), then="sleep 0.4")
    # Each task's first slot as stored: the anchor, or the next second after its add when
    # the adds outlasted the 6 s on a loaded machine.
    first_slot = {
        r["name"]: r["next_run_at"] for r in rows(db, "SELECT name, next_run_at FROM tasks")
    }
    starts = Counter()

    def start(index: int) -> Engine:
        starts[index] += 1
        return Engine(db, tmp_path / f"engine{index}.{starts[index]}.err", host=hosts[index])

    engines = [start(i) for i in range(ENGINES)]
    kills: list[str] = []
    try:
        wait_for(lambda: lease_owner(db), 20, "an engine to hold the lease")
        end = time.monotonic() + DURATION[kind]
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, rng.uniform(1.0, 2.0)))
            if time.monotonic() >= end:
                break
            victim = rng.randrange(ENGINES)
            held = engines[victim].owns(lease_owner(db))
            engines[victim].kill()
            kills.append(f"{victim}{'*' if held else ''}")
            engines[victim] = start(victim)
        time.sleep(2.0)  # let the last takeover recover what the last kill left behind
        # A SIGTERM before a restarted engine set up its handlers would kill it, not stop it.
        wait_for(lambda: all(_up(e) for e in engines), 20, "every engine to be up")
        stopped_at = time.time()
        for engine in engines:
            engine.proc.terminate()
        codes = [engine.stop() for engine in engines]
    finally:
        for engine in engines:
            engine.kill()
    tag = f"seed {SEED}, kills (engine, * = lease holder): {' '.join(kills)}"
    print(tag)
    assert codes == [0] * ENGINES, (tag, codes, [e.stderr()[-2000:] for e in engines])
    assert len(kills) >= DURATION[kind] / 2 - 1, tag

    lines = ran(out)
    twice = [pair for pair, n in Counter(lines).items() if n > 1]
    assert not twice, f"{tag}: ran twice: {twice}"
    in_file = set(lines)
    ran_as = ran_ids(out)  # the occurrences whose commands wrote: who ran a slot

    occs = [o for o in occurrences(db) if o.kind == "scheduled"]
    states = Counter((o.state, o.error_code or o.detail) for o in occs)
    print(f"occurrences: {dict(states)}")
    active = [o for o in occs if o.state in ("claimed", "accepted", "running")]
    assert not active, f"{tag}: left active after a clean stop: {active}"

    wrong = []
    for task in TASKS:
        mine = [o for o in occs if o.task == task]
        # A claim its engine could not start (lease lost) is recorded skipped/not_started and
        # its slot handed back: another record must then say what became of that slot.
        handed_back = [o for o in mine if o.state == "skipped" and _not_started(o)]
        covered = Counter(slot for o in mine if o not in handed_back for slot in o.slots(MICROS))
        recorded_twice = sorted(slot for slot, n in covered.items() if n > 1)
        assert not recorded_twice, f"{tag}: {task} slots recorded twice: {recorded_twice}"
        last = max(covered)
        expected = range(first_slot[task], last + 1, MICROS)
        lost = sorted(set(expected) - set(covered))
        assert not lost, f"{tag}: {task} lost slots: {lost}"
        assert set(covered) == set(expected), f"{tag}: {task} covers slots off the grid"
        assert last >= (stopped_at - 3) * MICROS, f"{tag}: {task} stopped being scheduled"
        for o in mine:
            # its own command wrote (a slot handed back may run under the record that
            # took it over: that one wrote, not this one)
            slot_ran = o.id in ran_as
            older_ran = [s for s in o.slots(MICROS)[:-1] if (task, s) in in_file]
            if older_ran:
                wrong.append((o, "a slot it says was coalesced or skipped ran"))
            elif o.state == "succeeded":
                if not slot_ran:
                    wrong.append((o, "succeeded but its command never wrote"))
            elif o.state == "failed" and o.error_code == "INTERRUPTED":
                pass  # its engine was killed: it may or may not have run
            elif o.state == "cancelled" and o.detail:
                pass
            elif o.state == "skipped" and o.detail:
                if slot_ran:
                    wrong.append((o, "recorded skipped but it ran"))
            else:
                wrong.append((o, "no honest record"))
        for _, slot in sorted(p for p in in_file if p[0] == task):
            if slot not in {o.scheduled_for for o in mine}:
                wrong.append((slot, f"{task} ran a slot with no record of its own"))
    assert not wrong, f"{tag}: {wrong}"


def _not_started(occ) -> bool:
    return (occ.detail or "").startswith("not_started")


def _up(engine) -> bool:
    text = engine.stderr()
    return "running on" in text or "standby: lease held by" in text
