"""Tick precision: tickui's deadline loop against the reference's sleep-after-emit loop.

Both tick every 10 ms for 2,000 ticks into an in-memory bus whose publish takes 0.3 ms,
one after the other in the same process. Prints cumulative drift and lateness
percentiles for both; the last line is one JSON object.

    .venv/bin/python benchmarks/tick_precision.py [--ticks 2000] [--interval-ms 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tickui.common.clock import SystemClock
from tickui.ticks.bus import MemoryBus
from tickui.ticks.config import TickerConfig
from tickui.ticks.sequence import SequenceAllocator
from tickui.ticks.ticker import RuntimeScheduler

PUBLISH_SECONDS = 0.0003


def _summary(times: list[float], deadlines: list[float], interval: float) -> dict:
    lateness = sorted((t - d) * 1000 for t, d in zip(times, deadlines, strict=True))
    q = statistics.quantiles(lateness, n=100, method="inclusive")
    return {
        "drift_ms": (times[-1] - deadlines[-1]) * 1000,
        "lateness_p50_ms": q[49],
        "lateness_p99_ms": q[98],
        "lateness_max_ms": lateness[-1],
        "interval_ms": interval * 1000,
    }


async def tickui_loop(ticks: int, interval: float) -> dict:
    loop = asyncio.get_running_loop()
    config = TickerConfig(interval_ms=round(interval * 1000), publish_timeout_s=1.0)
    bus = MemoryBus(delay=PUBLISH_SECONDS)
    ticker = RuntimeScheduler(
        config, SystemClock(), bus, SequenceAllocator(None, "bench", 1), align=False
    )
    times: list[float] = []
    done = asyncio.Event()

    async def record(_tick) -> None:
        times.append(loop.time())
        if len(times) >= ticks:
            done.set()

    ticker.subscribe(record)
    await ticker.start()
    start = ticker._started_mono  # tick k is due at start + k * interval
    await done.wait()
    await ticker.stop()
    metrics = ticker.metrics()
    times = times[:ticks]
    deadlines = [start + k * interval for k in range(len(times))]
    result = _summary(times, deadlines, interval)
    result["missed"] = metrics.ticks_missed
    result["published"] = len(bus.messages)
    return result


async def reference_loop(ticks: int, interval: float) -> dict:
    """The reference's loop, re-created: wait a full interval after each emit."""
    loop = asyncio.get_running_loop()
    bus = MemoryBus(delay=PUBLISH_SECONDS)
    stop = asyncio.Event()
    times: list[float] = []
    start = loop.time()
    while len(times) < ticks:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval)
        times.append(loop.time())
        await bus.publish("runtime.tick.v1", b"ref", b"{}", [])
    deadlines = [start + (k + 1) * interval for k in range(ticks)]
    result = _summary(times, deadlines, interval)
    result["missed"] = 0
    result["published"] = len(bus.messages)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ticks", type=int, default=2000)
    parser.add_argument("--interval-ms", type=float, default=10.0)
    args = parser.parse_args()
    interval = args.interval_ms / 1000
    ours = asyncio.run(tickui_loop(args.ticks, interval))
    ref = asyncio.run(reference_loop(args.ticks, interval))
    for name, r in (("tickui", ours), ("reference", ref)):
        print(
            f"{name:>9}: drift after {args.ticks} ticks {r['drift_ms']:8.1f} ms  lateness p50 "
            f"{r['lateness_p50_ms']:6.2f} p99 {r['lateness_p99_ms']:6.2f} max "
            f"{r['lateness_max_ms']:6.2f} ms  missed {r['missed']}"
        )
    ratio = abs(ref["drift_ms"]) / max(abs(ours["drift_ms"]), 0.001)
    print(f"reference drift / tickui drift: {ratio:.0f}x")
    print(
        json.dumps(
            {
                "ticks": args.ticks,
                "interval_ms": args.interval_ms,
                "publish_ms": PUBLISH_SECONDS * 1000,
                "tickui_drift_ms": round(ours["drift_ms"], 3),
                "reference_drift_ms": round(ref["drift_ms"], 3),
                "tickui_lateness_p50_ms": round(ours["lateness_p50_ms"], 3),
                "tickui_lateness_p99_ms": round(ours["lateness_p99_ms"], 3),
                "tickui_lateness_max_ms": round(ours["lateness_max_ms"], 3),
                "reference_lateness_p99_ms": round(ref["lateness_p99_ms"], 3),
                "tickui_missed": ours["missed"],
                "ratio": round(ratio, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
