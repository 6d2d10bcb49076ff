"""tickui against the real ONEX package, in a Python 3.12 venv of scripts/interop.sh.

These tests import `omnibase_infra` (0.38.6 or 0.38.76: one venv each) and use ONEX's own models,
consumer deserializer, header parser and RuntimeScheduler as the judges of what tickui puts on
the wire and returns from its protocol. They need the Tansu broker that scripts/services.sh
starts (TICKUI_TEST_KAFKA): without it they fail, never skip.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ONEX_VERSION = importlib.metadata.version("omnibase-infra")
ROOT = Path(__file__).resolve().parents[1]

# EventBusKafka._model_headers_to_kafka: the ten headers it always sends, in this order.
ONEX_HEADERS = (
    "content_type", "correlation_id", "message_id", "timestamp", "source", "event_type",
    "schema_version", "priority", "retry_count", "max_retries",
)  # fmt: skip

# The body ONEX 0.38.76 publishes (EventBusKafka.publish_envelope of a ModelEventEnvelope).
ENVELOPE_KEYS = {
    "payload", "envelope_id", "envelope_timestamp", "correlation_id", "parent_envelope_id",
    "source_tool", "target_tool", "metadata", "security_context", "event_type", "payload_type",
    "payload_schema_version", "priority", "timeout_seconds", "retry_count", "request_id",
    "trace_id", "span_id", "tenant_id", "producer", "onex_version", "envelope_version",
}  # fmt: skip

# omnibase_infra logs warnings (topic naming, Slack alert attempts) that are noise here.
logging.getLogger("omnibase_infra").setLevel(logging.ERROR)
logging.getLogger("omnibase_core").setLevel(logging.ERROR)


@pytest.fixture
def boot() -> str:
    bootstrap = os.environ.get("TICKUI_TEST_KAFKA")
    if not bootstrap:
        pytest.fail(
            "TICKUI_TEST_KAFKA is not set: run through `make interop` (scripts/services.sh"
            " starts Tansu)",
            pytrace=False,
        )
    return bootstrap


def onex_topic() -> str:
    """A fresh topic named the way EventBusKafka wants (onex.<kind>.<producer>.<event>.vN)."""
    return f"onex.intent.interop{uuid.uuid4().hex[:8]}.runtime-tick.v1"


async def create_topic(bootstrap: str, topic: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()


async def read_all(bootstrap: str, topic: str, timeout: float = 20.0) -> list[Any]:
    """Every record on partition 0 of `topic`, raw (bytes), up to the end offset seen now."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        await consumer.seek_to_beginning(tp)
        records: list[Any] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (not records or records[-1].offset < end - 1) and end > 0:
            assert loop.time() < deadline, f"read {len(records)} of {end} records of {topic}"
            batch = await consumer.getmany(tp, timeout_ms=500)
            records.extend(batch.get(tp, []))
        return records
    finally:
        await consumer.stop()


def deserialize_envelope(raw: bytes, topic: str):
    """What an ONEX subscriber does with the bytes: EventBusSubcontractWiring's deserializer."""
    from omnibase_infra.runtime.event_bus_subcontract_wiring import EventBusSubcontractWiring

    wiring = object.__new__(EventBusSubcontractWiring)
    wiring._logger = logging.getLogger("interop")
    return wiring._deserialize_to_envelope(SimpleNamespace(value=raw), topic)


def onex_bus(bootstrap: str):
    from omnibase_infra.event_bus.event_bus_kafka import EventBusKafka
    from omnibase_infra.event_bus.models.config import ModelKafkaEventBusConfig

    return EventBusKafka(
        ModelKafkaEventBusConfig(
            bootstrap_servers=bootstrap, enable_idempotence=False, timeout_seconds=5
        )
    )


def parse_headers(bootstrap: str, headers: list[tuple[str, bytes]]):
    """ONEX's own consumer-side parser (EventBusKafka._kafka_headers_to_model)."""
    return onex_bus(bootstrap)._kafka_headers_to_model(list(headers))


def onex_time(value: datetime) -> str:
    """A datetime the way pydantic (so ONEX) writes it in JSON."""
    from pydantic import TypeAdapter

    return TypeAdapter(datetime).dump_python(value, mode="json")


def _tickui_argv(*args: str) -> tuple[list[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKUI_")}
    env["PYTHONPATH"] = str(ROOT)
    return [sys.executable, "-m", "tickui", *args], env


# (a) `tickui run --wire W --for 3` for both wires, started together before collection: they
# tick while the test modules import omnibase_infra (5 to 11 s), and the tests collect them.
RUN_INTERVAL_MS = 200
_RUNS: dict[str, tuple[subprocess.Popen[str], Path]] = {}
_RUN_DIR: list[Path] = []


def pytest_sessionstart(session) -> None:
    bootstrap = os.environ.get("TICKUI_TEST_KAFKA")
    if not bootstrap:
        return  # the tests fail on the `boot` fixture
    base = Path(tempfile.mkdtemp(prefix="tickui-interop-"))
    _RUN_DIR.append(base)
    for wire in ("bare", "envelope"):
        workdir = base / wire
        workdir.mkdir()
        argv, env = _tickui_argv(
            "--db", str(workdir / "t.db"), "run", "--kafka", bootstrap, "--wire", wire,
            "--for", "3", "--tick-interval", f"{RUN_INTERVAL_MS}ms",
        )  # fmt: skip
        proc = subprocess.Popen(
            argv, cwd=workdir, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        _RUNS[wire] = (proc, workdir)


def pytest_sessionfinish(session) -> None:
    for proc, _ in _RUNS.values():
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    for base in _RUN_DIR:
        shutil.rmtree(base, ignore_errors=True)


def tickui_run_result(wire: str) -> subprocess.CompletedProcess[str]:
    """The finished `tickui run --wire WIRE --for 3` started at session start."""
    proc, _ = _RUNS[wire]
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def tickui_cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The checkout's tickui CLI (installed editable in this venv), in a clean environment."""
    argv, env = _tickui_argv(*args)
    return subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class FlakyBus:
    """Wraps EventBusKafka: the publishes numbered in `faults` raise the exception given."""

    def __init__(self, bus, faults: dict[int, BaseException]) -> None:
        self.bus, self.faults, self.calls = bus, faults, 0

    def _maybe_fail(self) -> None:
        self.calls += 1
        if self.calls in self.faults:
            raise self.faults[self.calls]

    async def publish(self, *args, **kwargs):  # what 0.38.6's scheduler and tickui's call
        self._maybe_fail()
        return await self.bus.publish(*args, **kwargs)

    async def publish_envelope(self, *args, **kwargs):  # what 0.38.76's scheduler calls
        self._maybe_fail()
        return await self.bus.publish_envelope(*args, **kwargs)
