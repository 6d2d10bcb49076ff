"""Whole processes for the Kafka-dispatch tests: `tickui worker`s, an engine
running `tickui run --dispatch kafka`, tasks whose command appends one line per run to a
file, and readers of what they left (the file, `tickui history --json`, the SQLite file,
the topics). Exactly-once is checked from the file AND the history, never from one alone.

A test that kills or restarts the broker uses `services.private_tansu()` (a restarted
Tansu is EMPTY: topics and group offsets gone); the others share the `kafka_bootstrap`
fixture's broker and keep apart by a unique consumer group and their own command ids.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import signing_support
from helpers import cli
from tickui.dispatch.messages import (
    CONTROL_TOPIC,
    EVENTS_TOPIC,
    RUNS_TOPIC,
    TOPICS,
    WORKERS_TOPIC,
)

MICROS = 1_000_000
TICK = "250ms"
PARTITIONS = 12


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_for(predicate, timeout: float, what: str, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(step)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TICKUI_DB", "TICKUI_DISPATCH")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Proc:
    """One child process; stdout and stderr go to a file (read it any time)."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.argv, self.log = argv, log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=_env()
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def term(self) -> None:
        self.signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL by its own pid (its children, if any, live on: a machine that died)."""
        self.signal(signal.SIGKILL)
        self.proc.wait(10)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 15) -> int | None:
        """SIGTERM and wait; SIGKILL when it does not end in `timeout`."""
        if self.proc.poll() is None:
            self.term()
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                return None
        return self.proc.returncode


def stop_all(procs: list[Proc], timeout: float = 15) -> list[int | None]:
    """Each told to stop (SIGTERM) at once, so that they drain side by side, then each
    waited for as `Proc.stop` does: their exit codes, in order."""
    for proc in procs:
        proc.term()
    return [proc.stop(timeout) for proc in procs]


class Worker(Proc):
    """`python -m tickui worker --kafka B --group G --slots S --id ID`."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        worker_id: str,
        tmp: Path,
        slots: int = 4,
        *extra: str,
    ) -> None:
        self.id, self.group = worker_id, group
        self.log_dir = tmp / f"logs-{worker_id}"
        argv = [
            sys.executable, "-m", "tickui", "worker", "--kafka", bootstrap, "--group", group,
            "--slots", str(slots), "--id", worker_id, "--log-dir", str(self.log_dir), *extra,
        ]  # fmt: skip
        super().__init__(argv, tmp / f"worker-{worker_id}.log")

    @property
    def ready(self) -> bool:
        """It said it holds partitions of the runs topic (a new group starts at the end of
        the topic: commands sent before any member is assigned are never run)."""
        return f"worker {self.id} ready" in self.output()


def write_config(path: Path, start_timeout: str = "5s", worker_timeout: str = "4s") -> Path:
    path.write_text(
        "[dispatch]\n"
        'mode = "kafka"\n'
        f"partitions = {PARTITIONS}\n"
        f'start_timeout = "{start_timeout}"\n'
        f'worker_timeout = "{worker_timeout}"\n'
    )
    return path


class KafkaEngine(Proc):
    """`python -m tickui --db X --config C run --dispatch kafka --kafka B`."""

    def __init__(self, db: Path, config: Path, bootstrap: str, log: Path, *extra: str) -> None:
        self.db = db
        argv = [
            sys.executable, "-m", "tickui", "--db", str(db), "--config", str(config), "run",
            "--dispatch", "kafka", "--kafka", bootstrap, "--tick-interval", TICK, *extra,
        ]  # fmt: skip
        super().__init__(argv, log)


# ---- tasks and what their commands wrote -------------------------------------------------


def iso_second(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micros(text: str) -> int:
    return round(datetime.fromisoformat(text).timestamp() * MICROS)


def line_script(name: str, out: Path, then: str = "") -> str:
    """Shell text that appends `task slot occurrence worker` to `out` first thing."""
    script = (
        f'echo "{name} ${{TICKUI_SCHEDULED_FOR:-none}} ${{TICKUI_OCCURRENCE_ID:-none}}'
        f' ${{TICKUI_WORKER:-none}}" >> {out}'
    )
    return script + (f"; {then}" if then else "")


def add_task(
    db: Path,
    name: str,
    out: Path,
    *options: str,
    then: str = "",
    every: str = "1s",
    anchor: str | None = None,
) -> None:
    """A task (`--every`, overlap allowed unless `options` say otherwise) whose command
    writes its line to `out` first, then runs the shell text `then`."""
    opts = list(options)
    if "--concurrency" not in opts:
        opts += ["--concurrency", "allow"]
    if anchor is not None:
        opts += ["--anchor", anchor]
    when = [] if "--at" in opts or "--cron" in opts else ["--every", every]
    added = cli(
        "task", "add", name, *when, *opts, "--", "sh", "-c", line_script(name, out, then), db=db
    )
    assert added.returncode == 0, added.stderr


@dataclass(frozen=True)
class Line:
    task: str
    slot: str  # ISO text as the command saw it ("none" when the env lacked it)
    occurrence: str
    worker: str


def lines(out: Path) -> list[Line]:
    if not out.exists():
        return []
    found = []
    for text in out.read_text().splitlines():
        parts = text.split()
        if len(parts) == 4:
            found.append(Line(*parts))
    return found


def twice(found: list[Line]) -> list[tuple[str, str]]:
    """(task, occurrence) written more than once: a run executed twice."""
    counts = Counter((line.task, line.occurrence) for line in found)
    return [key for key, n in counts.items() if n > 1]


# ---- what the engine recorded ---------------------------------------------------------------


def history(db: Path, limit: int = 100_000) -> list[dict]:
    result = cli("history", "--json", "--limit", str(limit), db=db)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def rows(db: Path, sql: str, params: tuple = ()) -> list[dict]:
    """Read-only query of the engine's SQLite file (WAL: concurrent with the engine)."""
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, params).fetchall()]
    except sqlite3.OperationalError:  # not created yet
        return []
    finally:
        conn.close()


def occurrences(db: Path) -> list[dict]:
    return rows(db, "SELECT * FROM occurrences ORDER BY id")


def events_by_command(db: Path) -> dict[str, list[str]]:
    """Event types recorded per command id, in order."""
    found: dict[str, list[str]] = {}
    for row in rows(db, "SELECT command_id, type FROM events ORDER BY seq"):
        found.setdefault(row["command_id"], []).append(row["type"])
    return found


def workers_json(db: Path) -> list[dict]:
    result = cli("workers", "--json", db=db)
    if result.returncode != 0:
        return []
    try:
        return json.loads(result.stdout)
    except ValueError:
        return []


ACTIVE = ("claimed", "accepted", "running")


# ---- a tap on the topics: what went over the wire -------------------------------------------


class Tap:
    """A group-less consumer of the runs and events topics in a thread of its own, from the
    beginning: every record kept raw (key, value, partition, timestamp), and a producer to put
    a command back on the runs topic (a redelivery, as after a consumer restart)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.records: list[tuple[str, int, bytes | None, bytes | None, int]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._producer = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="kafka-tap", daemon=True)

    def __enter__(self) -> Tap:
        self._thread.start()
        if not self._ready.wait(30):
            raise AssertionError("the topic tap did not start in 30 s")
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(15)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _run(self) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

        self._loop = asyncio.get_running_loop()
        await create_topics(self.bootstrap)
        consumer = AIOKafkaConsumer(
            RUNS_TOPIC,
            EVENTS_TOPIC,
            WORKERS_TOPIC,
            CONTROL_TOPIC,
            bootstrap_servers=self.bootstrap,
            group_id=None,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            request_timeout_ms=5000,
        )
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, enable_idempotence=False, acks="all"
        )
        await consumer.start()
        await self._producer.start()
        self._ready.set()
        try:
            while not self._stop.is_set():
                batch = await consumer.getmany(timeout_ms=200)
                with self._lock:
                    for tp, messages in batch.items():
                        for m in messages:
                            self.records.append(
                                (tp.topic, tp.partition, m.key, m.value, m.timestamp)
                            )
        finally:
            await asyncio.wait_for(consumer.stop(), 5)
            await asyncio.wait_for(self._producer.stop(), 5)

    def decoded(self, topic: str) -> list[tuple[int, dict, bytes, int]]:
        """(partition, JSON, raw value, timestamp ms) of each record on `topic`."""
        with self._lock:
            taken = [r for r in self.records if r[0] == topic]
        found = []
        for _, partition, _, value, stamp in taken:
            try:
                found.append((partition, json.loads(value or b""), value, stamp))
            except ValueError:
                continue
        return found

    def commands(self) -> dict[str, tuple[int, bytes, bytes]]:
        """command id -> (partition, key, raw value) of each run command seen."""
        with self._lock:
            taken = [r for r in self.records if r[0] == RUNS_TOPIC]
        found = {}
        for _, partition, key, value, _ in taken:
            try:
                found[json.loads(value or b"")["command_id"]] = (partition, key or b"", value)
            except (ValueError, KeyError, TypeError):
                continue
        return found

    def events(self, command_ids=None) -> list[dict]:
        found = [data for _, data, _, _ in self.decoded(EVENTS_TOPIC)]
        if command_ids is not None:
            found = [e for e in found if e.get("command_id") in command_ids]
        return found

    def ended(self, command_ids, timeout: float = 10.0) -> list[dict]:
        """Every event of `command_ids` once each has its terminal event on the tap. The tap
        reads the topic on its own, so it can be behind the engine: a test that saw an
        occurrence settle in the database waits here for the same events, not a snapshot."""
        wanted = set(command_ids)
        deadline = time.monotonic() + timeout
        while True:
            found = self.events(wanted)
            done = {e["command_id"] for e in found if e.get("type") != "control.run_transition"}
            if done >= wanted or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    def heartbeats(self, worker_ids) -> dict[str, dict]:
        """The last heartbeat of each of `worker_ids` seen so far."""
        last = {}
        for _, data, _, _ in self.decoded(WORKERS_TOPIC):
            if isinstance(data, dict) and data.get("worker") in worker_ids:
                last[data["worker"]] = data
        return last

    def resend(self, key: bytes, value: bytes, partition: int, signed_for: int) -> None:
        """Put a run command on the runs topic again, on `partition`, signed as the engine
        signed it for `signed_for` (its own partition: the same bytes and the same headers,
        a perfect copy)."""
        assert self._loop is not None and self._producer is not None
        headers = signing_support.headers(RUNS_TOPIC, key, value, signed_for)
        send = self._producer.send_and_wait(
            RUNS_TOPIC, value, key=key, partition=partition, headers=headers
        )
        future = asyncio.run_coroutine_threadsafe(send, self._loop)
        future.result(10)


async def create_topics(bootstrap: str, partitions: int = PARTITIONS) -> None:
    """The four topics with `partitions` each (auto-created ones get 4); existing ones stay."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [NewTopic(name, partitions, 1) for name in TOPICS if name not in existing]
        if missing:
            await admin.create_topics(missing)
    finally:
        await admin.close()
