"""Runs on workers, proven whole: `tickui run --dispatch kafka` engines and `tickui worker`
processes on a real Tansu broker, tasks whose command appends one line per run to a file.
Exactly-once is read from that file AND from `tickui history --json`; settlement from the
engine's event log. Each test has its own consumer group (the shared broker's topics are
shared: other tests' commands and events are there too, and filtered out by command id).
The broker test starts a private Tansu, because a restarted one is empty.

Timeouts are short here ([dispatch] start_timeout / worker_timeout in a test config) so that
the file stays near 100 s; the 20 s run of 24 tasks is the long one.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter

import pytest
from kafka_support import (
    ACTIVE,
    MICROS,
    KafkaEngine,
    Tap,
    Worker,
    add_task,
    events_by_command,
    history,
    iso_second,
    line_script,
    lines,
    micros,
    occurrences,
    stop_all,
    twice,
    unique,
    wait_for,
    write_config,
)

from helpers import cli
from services import private_tansu
from tickui.dispatch.messages import WORKER_LOST
from tickui.model.spec import build_spec
from tickui.store import Store

pytestmark = pytest.mark.slow


def _add_many(db, names, out, anchor: str, every: str = "1s", then: str = "") -> None:
    """The tasks add_task makes, added through the store in one process (40 `task add`
    processes at once cost seconds of CPU and race for the new file's write lock)."""

    async def seed() -> None:
        store = await Store.open(db)
        try:
            now = int(time.time() * MICROS)
            for name in names:
                raw = {"name": name, "every": every, "anchor": anchor, "concurrency": "allow"}
                raw["command"] = ["sh", "-c", line_script(name, out, then)]
                await store.add_task(build_spec(raw, now), now)
        finally:
            await store.close()

    asyncio.run(seed())


def _ready(tap: Tap, workers: list[Worker], timeout: float = 30) -> None:
    """Each worker alive, holding partitions and heard from on the workers topic."""
    ids = {w.id for w in workers}

    def heard():
        for w in workers:
            assert w.alive, f"worker {w.id} exited {w.proc.returncode}:\n{w.output()[-2000:]}"
        return all(w.ready for w in workers) and set(tap.heartbeats(ids)) == ids

    wait_for(heard, timeout, "a heartbeat from every worker")


def _settled(db, until: int, tasks: set[str]) -> bool:
    """Every slot of `tasks` up to `until` claimed and ended: each task has a row after
    `until` (slots are claimed in order), and none up to it is still active."""
    rows = [o for o in occurrences(db) if o["task"] in tasks]
    claimed_past = {o["task"] for o in rows if o["scheduled_for"] > until}
    active = [o for o in rows if o["scheduled_for"] <= until and o["state"] in ACTIVE]
    return claimed_past == tasks and not active


def _debug(engine: KafkaEngine, workers: list[Worker]) -> str:
    parts = [f"--- engine ---\n{engine.output()[-3000:]}"]
    parts += [f"--- {w.id} ---\n{w.output()[-1500:]}" for w in workers]
    return "\n".join(parts)


# ---- 1. three workers, 24 tasks every second, 20 s ---------------------------------------------


TASKS = 24  # each due every second


def test_three_workers_run_every_slot_exactly_once_spread_over_all(
    tmp_path, kafka_bootstrap, procs
):
    db, out = tmp_path / "t.db", tmp_path / "ran.txt"
    # 24 runs a second for 20 s. Each worker reads every run's events to its end before a
    # start (at most once): beside the rest of the suite on 2 cores, 40 a second fell 10 s
    # behind at times. A run the worker gets past its deadline fails DEADLINE (honest, but
    # not what this test is about): 15 s leaves room.
    config = write_config(tmp_path / "tickui.toml", start_timeout="15s", worker_timeout="5s")
    group = unique("g-three")
    tasks = [f"every-{i:02d}" for i in range(TASKS)]
    with Tap(kafka_bootstrap) as tap:
        workers = [Worker(kafka_bootstrap, group, unique(f"w{i}"), tmp_path, 4) for i in range(3)]
        procs.extend(workers)
        engine = KafkaEngine(db, config, kafka_bootstrap, tmp_path / "engine.log")
        procs.append(engine)
        _ready(tap, workers)
        # The tasks once the workers hold their partitions (a command sent before is never
        # run), falling due a few seconds on: the running engine reads them on its next scan.
        anchor_at = math.ceil(time.time()) + 2
        _add_many(db, tasks, out, iso_second(anchor_at))
        # A task added after its anchor starts at the next slot: on a loaded machine adding
        # the 24 can take longer than the 2 s, so the window starts once all exist.
        start = max(anchor_at, math.ceil(time.time()) + 1)
        window = range(start, start + 20)
        first, last = window[0] * MICROS, window[-1] * MICROS

        # A redelivery, as after a consumer restart before its commit: commands that already
        # started are put on the runs topic again, on every partition (so to every worker).
        wait_for(lambda: time.time() > start + 6, 30, "six seconds of runs", 0.2)
        ours = {o["command_id"] for o in occurrences(db) if o["command_id"]}
        started = [
            e["command_id"] for e in tap.events(ours) if e.get("type") == "control.run_transition"
        ][-12:]
        assert len(started) == 12, f"{len(started)} transitions seen\n{_debug(engine, workers)}"
        commands = wait_for(
            lambda: (found := tap.commands()) and set(started) <= set(found) and found,
            10, "the tap to see the started commands",
        )  # fmt: skip
        for partition, command_id in enumerate(started):
            original, key, value = commands[command_id]
            tap.resend(key, value, partition, original)

        wait_for(lambda: time.time() > window[-1] + 1, 40, "the 20 s window", 0.2)
        wait_for(lambda: _settled(db, last, set(tasks)), 20, "every run to settle")
        engine.stop(15)
        stop_all(workers)
        redelivered = {e["command_id"]: e for e in tap.events(set(started))}

    occs = [o for o in history(db) if first <= micros(o["scheduled_for"]) <= last]
    problems = [o for o in occs if o["state"] != "succeeded" or not o.get("worker")]
    assert not problems, f"{len(problems)} not succeeded on a worker: {problems[:3]}"
    slots = Counter((o["task"], micros(o["scheduled_for"])) for o in occs)
    missing = sorted({(t, s * MICROS) for t in tasks for s in window} - set(slots))
    near = [
        o
        for o in history(db)
        if missing and o["task"] == missing[0][0]
        and abs(micros(o["scheduled_for"]) - missing[0][1]) <= 2 * MICROS
    ]  # fmt: skip
    assert not missing, f"{len(missing)} slots not recorded: {missing[:5]}; around: {near}"
    assert len(slots) == TASKS * 20, f"{len(slots)} slots recorded, not {TASKS * 20}"
    assert set(slots.values()) == {1}, "a slot recorded twice"

    found = lines(out)
    assert not twice(found), f"runs executed twice: {twice(found)[:5]}"
    written = Counter((x.task, micros(x.slot)) for x in found if x.slot != "none")
    assert {k: n for k, n in written.items() if n > 1} == {}
    in_window = {k for k in written if first <= k[1] <= last}
    assert in_window == set(slots), f"{len(in_window)} slots in the file vs {len(slots)} runs"

    # Spread: all three workers ran some, by the file (TICKUI_WORKER) and by the history.
    ids = {w.id for w in workers}
    by_file = Counter(x.worker for x in found if first <= micros(x.slot) <= last)
    by_history = Counter(o["worker"] for o in occs)
    assert set(by_file) == ids, by_file
    assert set(by_history) == ids, by_history

    # Settled from events: each one has its transition and one completion in the event log.
    logged = events_by_command(db)
    command_of = {r["id"]: r["command_id"] for r in occurrences(db)}
    for o in occs:
        kinds = logged.get(command_of[o["id"]], [])
        assert kinds.count("control.run_transition") == 1, (o, kinds)
        assert kinds.count("run.completed") == 1, (o, kinds)
    # The redelivered commands did not run again (the file above) and stayed succeeded.
    assert len(redelivered) == 12
    print(f"spread by file {dict(by_file)}")


# ---- 2. kill -9 of a worker mid-run ------------------------------------------------------------


def test_killed_worker_runs_end_worker_lost_and_the_others_carry_on(
    tmp_path, kafka_bootstrap, procs
):
    db, out = tmp_path / "t.db", tmp_path / "ran.txt"
    worker_timeout = 3.0
    config = write_config(tmp_path / "tickui.toml", start_timeout="6s", worker_timeout="3s")
    group = unique("g-kill")
    tasks = [f"slow-{i}" for i in range(6)]
    with Tap(kafka_bootstrap) as tap:
        workers = [
            Worker(kafka_bootstrap, group, unique(f"k{i}"), tmp_path, 3, "--stop-grace", "1s")
            for i in range(3)
        ]
        procs.extend(workers)
        engine = KafkaEngine(db, config, kafka_bootstrap, tmp_path / "engine.log")
        procs.append(engine)
        _ready(tap, workers)
        anchor_at = math.ceil(time.time()) + 2  # once the workers hold their partitions
        _add_many(db, tasks, out, iso_second(anchor_at), every="2s", then="sleep 2.5")

        def busy_worker():
            # one the engine has heard a heartbeat from (so it can be declared lost, not only
            # never heard of), running something
            heard = {w["id"] for w in _workers(db)}
            running = [o for o in occurrences(db) if o["state"] == "running" and o["worker"]]
            counts = Counter(o["worker"] for o in running if o["worker"] in heard)
            return counts.most_common(1)[0][0] if counts else None

        victim_id = wait_for(busy_worker, 30, "a worker heard from and running something")
        victim = next(w for w in workers if w.id == victim_id)
        victim.kill()
        killed_at = time.time()
        lost = [
            o
            for o in occurrences(db)
            if o["worker"] == victim_id and o["state"] in ("accepted", "running")
        ]
        assert lost, "the victim ran nothing when it was killed"
        lost_ids = {o["id"] for o in lost}

        def all_lost():
            rows = {o["id"]: o for o in occurrences(db) if o["id"] in lost_ids}
            return all(o["state"] not in ACTIVE for o in rows.values()) and rows

        ended = wait_for(all_lost, worker_timeout + 15, "the victim's runs to end")
        # A run that finished just before the kill may still have read "running" here (its
        # outcome on the way to the engine): it settles as it ended. Every other one is lost.
        finished = {
            i for i, o in ended.items()
            if o["state"] == "succeeded" and o["finished_at"] <= killed_at * MICROS
        }  # fmt: skip
        assert finished != set(ended), f"the victim ran nothing when it was killed: {ended}"
        for o in (o for i, o in ended.items() if i not in finished):
            assert (o["state"], o["error_code"]) == ("failed", WORKER_LOST), o
            took = o["finished_at"] / MICROS - killed_at
            assert took <= worker_timeout + 5, f"WORKER_LOST {took:.1f}s after the kill: {o}"

        # The others carry on: every task (the victim's partitions too, after the group moves
        # them) has a run started after the kill that succeeds on a surviving worker.
        after = killed_at * MICROS

        def carried_on():
            done = {
                o["task"]
                for o in occurrences(db)
                if o["state"] == "succeeded" and o["started_at"] and o["started_at"] > after
            }
            return done >= set(tasks)

        wait_for(carried_on, 30, "every task to succeed again after the kill")
        survivors = [w for w in workers if w is not victim]
        assert all(w.alive for w in survivors)
        states = {w["id"]: w["state"] for w in _workers(db)}
        assert states.get(victim_id) == "lost", states
        engine.stop(15)
        stop_all(survivors)

    found = lines(out)
    assert not twice(found), f"runs executed twice: {twice(found)[:5]}"
    slots = Counter((x.task, x.slot) for x in found)
    assert max(slots.values()) == 1, "a slot ran twice"
    succeeded_after = [
        o for o in occurrences(db) if o["state"] == "succeeded" and (o["started_at"] or 0) > after
    ]
    assert {o["worker"] for o in succeeded_after} <= {w.id for w in survivors}


def _workers(db) -> list[dict]:
    import json

    result = cli("workers", "--json", db=db)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# ---- 3. drain on SIGTERM, cancel, replace, a redelivered running command -------------------


def test_drain_cancel_and_replace_reach_the_right_worker(tmp_path, kafka_bootstrap, procs):
    db, out = tmp_path / "t.db", tmp_path / "ran.txt"
    # start_timeout: the command A fetched but never started must reach B, started after A's
    # stop, through a rebalance, before its deadline; 30 s leaves room on a loaded machine
    config = write_config(tmp_path / "tickui.toml", start_timeout="30s", worker_timeout="4s")
    group = unique("g-drain")
    a_id, b_id = unique("wa"), unique("wb")
    with Tap(kafka_bootstrap) as tap:
        # A alone first, one slot, so that both one-shot runs go to it: one runs, one waits
        # (fetched, never committed) until A is told to stop.
        a = Worker(kafka_bootstrap, group, a_id, tmp_path, 1, "--stop-grace", "1s")
        procs.append(a)
        at = math.ceil(time.time()) + 6
        hold = f'if [ "$TICKUI_WORKER" = {a_id} ]; then sleep 30; fi'
        for name in ("first", "second"):
            add_task(db, name, out, "--at", iso_second(at), then=hold)
        engine = KafkaEngine(db, config, kafka_bootstrap, tmp_path / "engine.log")
        procs.append(engine)
        _ready(tap, [a])

        def on_a():
            occs = {o["task"]: o for o in occurrences(db) if o["task"] in ("first", "second")}
            running = [o for o in occs.values() if o["state"] == "running"]
            return len(occs) == 2 and running and running[0]

        held = wait_for(on_a, 30, "one run on worker A", 0.1)
        assert held["worker"] == a_id
        waiting = "second" if held["task"] == "first" else "first"

        # SIGTERM: A drains (1 s of grace, then its run is cancelled "worker stopped"), exits
        # 0; B, started now, gets the command A fetched but never started, and runs it once.
        a.term()
        b = Worker(kafka_bootstrap, group, b_id, tmp_path, 2, "--stop-grace", "1s")
        procs.append(b)
        assert a.wait(15) == 0, a.output()[-2000:]
        wait_for(
            lambda: tap.heartbeats({a_id})[a_id]["state"] == "drained",
            15, "A's last heartbeat to say drained",
        )  # fmt: skip
        row = wait_for(
            lambda: [o for o in occurrences(db) if o["id"] == held["id"] and o["state"]
                     not in ACTIVE],
            10, "A's run to end",
        )[0]  # fmt: skip
        assert row["state"] == "cancelled" and "worker stopped" in (row["detail"] or ""), row

        def moved():
            occ = [o for o in occurrences(db) if o["task"] == waiting]
            return occ and occ[0]["state"] == "succeeded" and occ[0]

        moved_occ = wait_for(moved, 40, f"{waiting} to run on worker B")
        assert moved_occ["worker"] == b_id

        # Cancel: a backfill's runs on B, then `task backfill --cancel`: the cancel reaches B.
        now = int(time.time())
        add_task(db, "bf", out, then="sleep 30", every="10m", anchor=iso_second(now - 3600))
        filled = cli(
            "task", "backfill", "bf", "--from", iso_second(now - 1500), "--to",
            iso_second(now - 1), db=db,
        )  # fmt: skip
        assert filled.returncode == 0, filled.stderr

        def bf_running():
            occ = [o for o in occurrences(db) if o["task"] == "bf" and o["kind"] == "backfill"]
            return len(occ) >= 2 and all(o["state"] == "running" for o in occ) and occ

        bf = wait_for(bf_running, 20, "the backfill's runs on B")
        assert {o["worker"] for o in bf} == {b_id}
        cancelled = cli("task", "backfill", "bf", "--cancel", db=db)
        assert cancelled.returncode == 0, cancelled.stderr
        bf_ids = {o["id"] for o in bf}
        ended = wait_for(
            lambda: [o for o in occurrences(db) if o["id"] in bf_ids and o["state"] not in ACTIVE]
            if all(o["state"] not in ACTIVE for o in occurrences(db) if o["id"] in bf_ids)
            else None,
            10, "the cancelled backfill to end",
        )  # fmt: skip
        assert {o["state"] for o in ended} == {"cancelled"}, ended
        told = tap.ended({o["command_id"] for o in bf})
        assert {(e["type"], e["worker"]) for e in told if e["type"] != "control.run_transition"} \
            == {("run.canceled", b_id)}, told  # fmt: skip

        # Replace: every 2 s with replace, each run 30 s long: the next slot cancels the one
        # running on B, through B, and then runs.
        add_task(db, "rep", out, "--concurrency", "replace", then="sleep 30", every="2s")

        def replaced():
            occ = [o for o in occurrences(db) if o["task"] == "rep"]
            return len(occ) >= 2 and occ[0]["state"] == "cancelled" and occ[1]["started_at"] \
                and occ  # fmt: skip

        rep = wait_for(replaced, 20, "the second rep run to replace the first")
        assert rep[0]["worker"] == b_id
        told = tap.ended({rep[0]["command_id"]})
        assert [e["worker"] for e in told if e["type"] == "run.canceled"] == [b_id], told

        # The running rep command, delivered again on every partition: nobody starts it twice.
        running = rep[1]
        original, key, value = wait_for(
            lambda: tap.commands().get(running["command_id"]), 10, "the tap to see rep's command"
        )
        for partition in range(12):
            tap.resend(key, value, partition, original)
        disabled = cli("task", "disable", "rep", db=db)
        assert disabled.returncode == 0, disabled.stderr
        time.sleep(2)  # room for a wrong second start to show in the file (not an assertion)
        engine.stop(15)
        b.stop(15)

    found = lines(out)
    assert not twice(found), f"runs executed twice: {twice(found)[:5]}"
    assert sum(1 for x in found if x.occurrence == str(running["id"])) == 1


# ---- 4. the broker killed and restarted ----------------------------------------------------


def test_broker_restart_claims_go_on_runs_resume_nothing_twice(tmp_path, procs):
    db, out = tmp_path / "t.db", tmp_path / "ran.txt"
    start_timeout = 3.0
    # worker_timeout bounds how long the engine waits, after the broker came back, for a
    # worker to send again what the restart lost: 4 s was too short on a loaded machine (a
    # run that had started was failed DISPATCH_TIMEOUT before its report came again).
    config = write_config(tmp_path / "tickui.toml", start_timeout="3s", worker_timeout="8s")
    group = unique("g-broker")
    tasks = [f"tick-{i}" for i in range(4)]
    with private_tansu() as broker:
        bootstrap = broker.bootstrap
        with Tap(bootstrap) as tap:
            workers = [Worker(bootstrap, group, unique(f"r{i}"), tmp_path, 4) for i in range(2)]
            procs.extend(workers)
            engine = KafkaEngine(db, config, bootstrap, tmp_path / "engine.log")
            procs.append(engine)
            _ready(tap, workers)
            anchor_at = math.ceil(time.time()) + 2  # once the workers hold their partitions
            _add_many(db, tasks, out, iso_second(anchor_at))
        wait_for(lambda: time.time() > anchor_at + 3, 30, "three seconds of runs", 0.2)
        try:  # the workers may have joined after the anchor on a loaded machine
            wait_for(
                lambda: len([o for o in occurrences(db) if o["state"] == "succeeded"]) >= 8,
                30, "eight runs before the outage", 0.2,
            )  # fmt: skip
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_debug(engine, workers)}") from None
        broker.kill()
        down_at = time.time()
        time.sleep(4)  # the outage: the engine must keep claiming meanwhile
        broker.restart()  # same port, empty
        up_at = time.time()
        during = [
            o
            for o in occurrences(db)
            if down_at * MICROS < o["scheduled_for"] < (up_at - 1) * MICROS
        ]
        assert {o["task"] for o in during} == set(tasks), "the engine stopped claiming"

        def resumed(since: float):
            done = {
                o["task"]
                for o in occurrences(db)
                if o["state"] == "succeeded" and (o["started_at"] or 0) > since * MICROS
            }
            return done >= set(tasks)

        wait_for(lambda: resumed(up_at), 40, "runs to resume after the broker restart")
        # Again, two seconds down, while what the first restart lost is still being mended.
        broker.kill()
        time.sleep(2)
        broker.restart()
        again_at = time.time()
        try:
            wait_for(lambda: resumed(again_at), 40, "runs to resume after a second restart")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_debug(engine, workers)}") from None
        # Nothing stays accepted past its deadline: all claimed up to now settle within it.
        settle_until = int(time.time() * MICROS)
        wait_for(
            lambda: _settled(db, settle_until, set(tasks)),
            start_timeout + 10, "every run claimed so far to settle",
        )  # fmt: skip
        engine.stop(15)
        stop_all(workers)
        assert all(w.proc.returncode is not None for w in workers)

    occs = [o for o in occurrences(db) if o["scheduled_for"] <= settle_until]
    found = lines(out)
    assert not twice(found), f"runs executed twice: {twice(found)[:5]}"
    ran = Counter(x.occurrence for x in found)
    states = Counter((o["state"], o["error_code"]) for o in occs)
    for o in occs:
        if o["state"] == "succeeded":
            assert ran[str(o["id"])] == 1, o
        elif o["error_code"] in ("DISPATCH_TIMEOUT", "DEADLINE", "INTERRUPTED"):
            # Not started: no worker had it in time, or the worker that got it could not commit
            # its offset across the restart (a rebalance gave it to another) and did not run it.
            assert ran[str(o["id"])] == 0, f"failed {o['error_code']} yet it ran: {o}"
    assert set(states) <= {
        ("succeeded", None),
        ("failed", "INTERRUPTED"),
        ("failed", "DISPATCH_TIMEOUT"),
        ("failed", "WORKER_LOST"),
        ("failed", "DEADLINE"),
    }, states
    print(f"outcomes across the restart: {dict(states)}")
