"""A worker cut off from the broker while its process goes on, on a real broker: every
client reaches a broker of the test's own through a TCP proxy (the broker advertises the
proxy's address), and the proxy cuts off the one worker process alone, its connections
closed (`drop`) or silently held (`hold`, a network partition). The worker's heartbeats
are no longer acknowledged, so its runs' supervisors fence them before the engine gives
up on it and retries their slots on the other worker; the commands write their own start
and end times, and no two attempts of a slot overlap. Once the network is back the worker
carries on and nothing is run twice."""

from __future__ import annotations

import itertools
import math
import time
from collections import Counter, defaultdict

import pytest
from kafka_support import (
    ACTIVE,
    KafkaEngine,
    Tap,
    Worker,
    iso_second,
    micros,
    occurrences,
    stop_all,
    unique,
    wait_for,
    write_config,
)
from tcp_proxy import DROP, HOLD, TcpProxy

from helpers import cli
from services import free_port, private_tansu
from tickui.dispatch.messages import WORKER_LOST
from tickui.model.occurrence import RUN_TRANSITION

pytestmark = pytest.mark.slow

RUN_S = 6.0  # how long each run takes when nothing ends it
FENCED = "fenced: its lease ran out"  # what a worker says of a run its supervisor fenced
WORKER_TIMEOUT = 8.0  # s: the runs' fence is 8 - (3 s grace + 0.2 s + 1 s) = 3.8 s


def add(db, name: str, out, anchor: str) -> None:
    """Every 3 s, 6 s long, retried when interrupted; writes `start <task> <slot>
    <occurrence> <worker> <time>` and `end <task> <slot> <occurrence> <worker> <time>
    <status>` (SIGTERM included)."""
    mark = (
        '"$TICKUI_TASK $TICKUI_SCHEDULED_FOR $TICKUI_OCCURRENCE_ID $TICKUI_WORKER $(date +%s.%N)"'
    )
    script = (
        f'trap \'trap "" TERM; echo "end "{mark}" term" >> {out}; exit 143\' TERM; '
        f'echo "start "{mark} >> {out}; sleep {RUN_S:g}; echo "end "{mark}" 0" >> {out}'
    )
    added = cli(
        "task", "add", name, "--every", "3s", "--concurrency", "allow", "--anchor", anchor,
        "--retries", "2", "--retry-delay", "1s", "--retry-on", "interrupted",
        "--", "sh", "-c", script, db=db,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr


def runs(out) -> dict[tuple[str, int, int], dict]:
    """(task, slot, occurrence) -> {"worker", "start", "end", "status"} from the commands'
    lines; "starts" counts the start lines (more than one: a run executed twice)."""
    found: dict[tuple[str, int, int], dict] = defaultdict(lambda: {"starts": 0})
    for line in out.read_text().splitlines() if out.exists() else ():
        kind, task, slot, occ, worker, at, *status = line.split()
        run = found[(task, micros(slot), int(occ))]
        run["worker"] = worker
        run[kind] = float(at)
        if kind == "start":
            run["starts"] += 1
        else:
            run["status"] = status[0]
    return dict(found)


@pytest.mark.slow
@pytest.mark.parametrize("how", [HOLD, DROP])
def test_a_cut_off_workers_runs_end_before_their_slots_run_again(tmp_path, procs, how):
    db, out = tmp_path / "t.db", tmp_path / "marks.txt"
    config = write_config(
        tmp_path / "tickui.toml", start_timeout="30s", worker_timeout=f"{WORKER_TIMEOUT:g}s"
    )
    group = unique("g-cutoff")
    broker_port = free_port()
    with TcpProxy(broker_port) as proxy, private_tansu(broker_port, proxy.port):
        bootstrap = f"127.0.0.1:{proxy.port}"
        with Tap(bootstrap) as tap:
            workers = [Worker(bootstrap, group, unique(f"c{i}"), tmp_path, 3) for i in range(2)]
            procs.extend(workers)
            engine = KafkaEngine(db, config, bootstrap, tmp_path / "engine.log")
            procs.append(engine)
            ids = {w.id for w in workers}
            wait_for(
                lambda: all(w.ready for w in workers) and set(tap.heartbeats(ids)) == ids,
                30,
                "a heartbeat from every worker",
            )
            # The tasks once the workers hold their partitions (a command sent before is
            # never run): the running engine reads them on its next scan.
            anchor = iso_second(math.ceil(time.time()) + 2)
            for name in ("a", "b"):
                add(db, name, out, anchor)

            def busy() -> str | None:
                running = [o for o in occurrences(db) if o["state"] == "running" and o["worker"]]
                counts = Counter(o["worker"] for o in running)
                return counts.most_common(1)[0][0] if counts else None

            victim_id = wait_for(busy, 30, "a worker running something")
            victim = next(w for w in workers if w.id == victim_id)
            cut_at = time.time()
            assert proxy.cut(victim.pid, how) > 0, "the victim had no connection to cut"
            lost = {
                o["id"]: o for o in occurrences(db)
                if o["worker"] == victim_id and o["state"] in ACTIVE
            }  # fmt: skip
            assert lost, "the victim ran nothing when it was cut off"

            def retried() -> bool:
                rows = {o["id"]: o for o in occurrences(db)}
                if any(o["worker"] == victim_id and o["state"] in ACTIVE for o in rows.values()):
                    return False
                slots = {(rows[i]["task"], rows[i]["scheduled_for"]) for i in lost}
                again = Counter((task, slot) for task, slot, _ in runs(out))
                return any(again[slot] >= 2 for slot in slots)

            try:
                wait_for(retried, WORKER_TIMEOUT + 60, "a slot of the victim run again elsewhere")
            except AssertionError as exc:  # say what became of the victim's slots
                victims = {(o["task"], o["scheduled_for"]) for o in lost.values()}
                seen = [
                    {k: o[k] for k in ("id", "task", "scheduled_for", "state", "error_code",
                                       "worker", "attempt", "detail")}
                    for o in occurrences(db) if (o["task"], o["scheduled_for"]) in victims
                ]  # fmt: skip
                raise AssertionError(f"{exc}; their occurrences: {seen}") from None
            ended = {o["id"]: o for o in occurrences(db) if o["worker"] == victim_id}
            assert victim.alive, "the victim did not outlive the cut"

            # the network is back: the victim is heard again and tells what became of its
            # runs (fenced); the engine, which settled them already, keeps its word
            last_beat = tap.heartbeats({victim_id})[victim_id]["seq"]
            proxy.heal()
            wait_for(
                lambda: tap.heartbeats({victim_id})[victim_id]["seq"] > last_beat,
                30,
                "a heartbeat from the victim once the network is back",
            )
            started = {o["command_id"] for o in lost.values() if o["state"] == "running"}

            def told() -> dict[str, dict] | None:
                said = {
                    e["command_id"]: e for e in tap.events(started)
                    if e["worker"] == victim_id and e["type"] != RUN_TRANSITION
                }  # fmt: skip
                return said if set(said) == started else None

            word = wait_for(told, 30, "the victim's word on each run it lost")
            after = {o["id"]: o for o in occurrences(db) if o["id"] in ended}
            engine.stop(15)
            stopped = dict(zip([w.id for w in workers], stop_all(workers), strict=True))

    assert stopped == dict.fromkeys(stopped, 0), "a worker did not drain and exit cleanly"
    assert all(ended[i]["error_code"] == WORKER_LOST for i in lost), ended
    seen = runs(out)
    by_command = {o["command_id"]: o["id"] for o in lost.values()}
    ran_out = {  # ran its whole 6 s and ended by itself just after the cut, before the fence
        occ for (_t, _s, occ), run in seen.items()
        if run.get("status") == "0" and run["end"] - run["start"] >= RUN_S - 0.1
    }  # fmt: skip
    assert all(
        e["payload"].get("detail") == FENCED or by_command[cid] in ran_out
        for cid, e in word.items()
    ), word
    settled = ("state", "error_code", "finished_at", "detail")
    assert [[o[k] for k in settled] for o in after.values()] == [
        [o[k] for k in settled] for o in ended.values()
    ], "the engine changed a settled occurrence on the victim's late word"
    assert not [key for key, run in seen.items() if run["starts"] > 1], "a run executed twice"
    # every run the victim had going when it was cut off (some may have started as it was
    # cut, before the engine heard of them) was fenced by its own supervisor (SIGTERM)
    # before the engine declared the worker lost
    cut_off = {
        key[2]: run for key, run in seen.items()
        if run["worker"] == victim_id and run.get("end", math.inf) > cut_at
    }  # fmt: skip
    assert set(cut_off) >= {i for i in lost if lost[i]["state"] == "running"}, (cut_off, lost)
    for occ, run in cut_off.items():
        assert run.get("status") == "term" or occ in ran_out, (occ, run)
        if occ not in ended:  # started as it was cut: the engine never heard it start
            continue
        assert ended[occ]["error_code"] == WORKER_LOST, ended[occ]
        assert run["end"] * 1_000_000 < ended[occ]["finished_at"], (occ, run, ended[occ])
    attempts: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for (task, slot, _occ), run in seen.items():
        attempts[(task, slot)].append(run)
    for slot, tries in attempts.items():
        tries.sort(key=lambda run: run["start"])
        for before, later in itertools.pairwise(tries):
            assert "end" in before, f"an attempt of {slot} never ended before the next began"
            assert later["start"] >= before["end"], f"two attempts of slot {slot} overlapped"


def test_a_worker_told_to_stop_while_cut_off_drains_and_exits_cleanly(tmp_path, procs):
    """Its consumers' fetches keep failing while the broker refuses it: stopping them
    must not end the worker before its runs got the stop grace and it said it drained."""
    broker_port = free_port()
    with TcpProxy(broker_port) as proxy, private_tansu(broker_port, proxy.port):
        bootstrap = f"127.0.0.1:{proxy.port}"
        worker = Worker(bootstrap, unique("g-cutoff"), unique("c"), tmp_path, 2)
        procs.append(worker)
        wait_for(lambda: worker.ready, 30, "the worker holding partitions")
        proxy.cut(worker.pid, DROP)
        wait_for(lambda: proxy.refused >= 5, 30, "the worker trying to reconnect, refused")
        code = worker.stop(30)
    assert code == 0, worker.output()[-3000:]
    assert f"worker {worker.id} drained" in worker.output()
