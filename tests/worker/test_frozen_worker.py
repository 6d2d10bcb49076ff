"""A worker frozen (SIGSTOP) with runs in flight, on a real broker: its runs end by
themselves (their supervisors fence them once its heartbeats stop being acknowledged)
before the engine gives up on it and retries their slots on another worker. The
commands write their own start and end times; no two attempts of a slot overlap."""

from __future__ import annotations

import itertools
import math
import os
import signal
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

from helpers import cli
from services import private_tansu
from tickui.dispatch.messages import WORKER_LOST

pytestmark = pytest.mark.slow

WORKER_TIMEOUT = 8.0  # s: the runs' fence is 8 - (3 s grace + 0.2 s + 1 s) = 3.8 s


def add(db, name: str, out, anchor: str) -> None:
    """Every 3 s, 6 s long, retried when interrupted; writes `start <task> <slot>
    <occurrence> <time>` and `end <task> <slot> <occurrence> <time> <status>` (SIGTERM
    included)."""
    mark = '"$TICKUI_TASK $TICKUI_SCHEDULED_FOR $TICKUI_OCCURRENCE_ID $(date +%s.%N)"'
    script = (
        f'trap \'trap "" TERM; echo "end "{mark}" term" >> {out}; exit 143\' TERM; '
        f'echo "start "{mark} >> {out}; sleep 6; echo "end "{mark}" 0" >> {out}'
    )
    added = cli(
        "task", "add", name, "--every", "3s", "--concurrency", "allow", "--anchor", anchor,
        "--retries", "2", "--retry-delay", "1s", "--retry-on", "interrupted",
        "--", "sh", "-c", script, db=db,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr


def marks(out) -> dict[tuple[str, int, int], dict[str, float]]:
    """(task, slot, occurrence) -> {"start": t, "end": t} from the commands' lines."""
    found: dict[tuple[str, int, int], dict] = defaultdict(dict)
    for line in out.read_text().splitlines() if out.exists() else ():
        kind, task, slot, occ, at, *_ = line.split()
        found[(task, micros(slot), int(occ))][kind] = float(at)
    return dict(found)


@pytest.fixture
def kafka_bootstrap():
    """A broker of the test's own: on the shared one, workers of other tests (other groups,
    the same key) would take this engine's commands."""
    with private_tansu() as broker:
        yield broker.bootstrap


@pytest.mark.slow
def test_a_frozen_workers_runs_end_before_their_slots_run_again(tmp_path, kafka_bootstrap, procs):
    db, out = tmp_path / "t.db", tmp_path / "marks.txt"
    config = write_config(
        tmp_path / "tickui.toml", start_timeout="30s", worker_timeout=f"{WORKER_TIMEOUT:g}s"
    )
    group = unique("g-freeze")
    with Tap(kafka_bootstrap) as tap:
        workers = [Worker(kafka_bootstrap, group, unique(f"f{i}"), tmp_path, 3) for i in range(2)]
        procs.extend(workers)
        engine = KafkaEngine(db, config, kafka_bootstrap, tmp_path / "engine.log")
        procs.append(engine)
        ids = {w.id for w in workers}
        wait_for(
            lambda: all(w.ready for w in workers) and set(tap.heartbeats(ids)) == ids,
            30,
            "a heartbeat from every worker",
        )
        # The tasks once the workers hold their partitions (a command sent before is never
        # run): the running engine reads them on its next scan.
        anchor = iso_second(math.ceil(time.time()) + 2)
        for name in ("a", "b"):
            add(db, name, out, anchor)

        def busy() -> str | None:
            running = [o for o in occurrences(db) if o["state"] == "running" and o["worker"]]
            counts = Counter(o["worker"] for o in running)
            return counts.most_common(1)[0][0] if counts else None

        victim_id = wait_for(busy, 30, "a worker running something")
        victim = next(w for w in workers if w.id == victim_id)
        os.kill(victim.proc.pid, signal.SIGSTOP)
        try:
            lost = {
                o["id"] for o in occurrences(db)
                if o["worker"] == victim_id and o["state"] in ACTIVE
            }  # fmt: skip
            assert lost, "the victim ran nothing when it was frozen"

            def retried() -> bool:
                rows = {o["id"]: o for o in occurrences(db)}
                if any(rows[i]["state"] in ACTIVE for i in lost):
                    return False
                slots = {(rows[i]["task"], rows[i]["scheduled_for"]) for i in lost}
                again = Counter((task, slot) for task, slot, _ in marks(out))
                # a retry may also miss its deadline (its command went to the frozen
                # worker's partitions before the group moved them): one run again is enough
                return any(again[slot] >= 2 for slot in slots)

            try:
                wait_for(retried, WORKER_TIMEOUT + 60, "a slot of the victim run again elsewhere")
            except AssertionError as exc:  # say what became of the victim's slots
                rows = occurrences(db)
                victims = {(o["task"], o["scheduled_for"]) for o in rows if o["id"] in lost}
                seen = [
                    {k: o[k] for k in ("id", "task", "scheduled_for", "state", "error_code",
                                       "worker", "attempt", "detail")}
                    for o in rows if (o["task"], o["scheduled_for"]) in victims
                ]  # fmt: skip
                raise AssertionError(f"{exc}; their occurrences: {seen}") from None
            ended = [o for o in occurrences(db) if o["id"] in lost]
        finally:
            os.kill(victim.proc.pid, signal.SIGCONT)
        engine.stop(15)
        stop_all(workers)

    assert all(o["error_code"] == WORKER_LOST for o in ended), ended
    attempts: dict[tuple[str, int], list[dict[str, float]]] = defaultdict(list)
    for (task, slot, _occ), seen in marks(out).items():
        attempts[(task, slot)].append(seen)
    for slot, runs in attempts.items():
        runs.sort(key=lambda seen: seen["start"])
        for before, after in itertools.pairwise(runs):
            assert "end" in before, f"an attempt of {slot} never ended before the next began"
            assert after["start"] >= before["end"], f"two attempts of slot {slot} overlapped"
