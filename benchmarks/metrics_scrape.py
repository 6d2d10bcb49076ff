"""What serving and scraping /metrics costs a busy engine's event loop.

The engine (assembled as the dashboard's host is, with its ticker at 1 s) runs `--tasks`
tasks due every second on a real SQLite file; an instant dispatcher records each run's end
at once, so every second brings that many claims, settlements and metric updates. A 5 ms
sleep loop measures the event loop's lag for `--seconds`. Three modes, each in its own
child process, alternating over `--rounds` rounds:

- off: no metrics (the baseline);
- served: the endpoint up, nothing scraping it;
- scraped: this process scrapes it over HTTP back to back (one request at a time) for
  the whole window, far more often than any Prometheus would.

    .venv/bin/python benchmarks/metrics_scrape.py [--tasks 200] [--seconds 8] [--rounds 3]

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine_throughput import InstantDispatcher, LagProbe

from tickui.common.clock import SystemClock
from tickui.model.spec import build_spec
from tickui.runtime.host import build_host
from tickui.runtime.settings import EngineSettings, MetricsSettings, Settings
from tickui.store import Store

MODES = ("off", "served", "scraped")
WARM_UP = 2.0  # seconds before the lag is measured


async def engine_side(tasks: int, seconds: float, port: int | None) -> dict:
    clock = SystemClock()
    with tempfile.TemporaryDirectory() as tmp:
        store = await Store.open(Path(tmp) / "bench.db")
        now = clock.now()
        for n in range(tasks):
            spec = build_spec({"name": f"t{n:04d}", "every": "1s", "command": ["true"]}, now)
            await store.add_task(spec, now)
        listen = f"127.0.0.1:{port}" if port else None
        settings = Settings(engine=EngineSettings(stop_grace=0), metrics=MetricsSettings(listen))
        host = build_host(store, clock, settings, dispatcher=InstantDispatcher(store, clock))
        await host.start()
        print("ready", flush=True)
        await asyncio.sleep(WARM_UP)
        probe = LagProbe()
        probe.start()
        await asyncio.sleep(seconds)
        await probe.stop()
        runs = (await store.state_counts()).get("succeeded", 0)
        await host.close(grace=0)
    lags = sorted(probe.lags)
    return {
        "loop_lag_p50_ms": statistics.median(lags),
        "loop_lag_p99_ms": probe.p99(),
        "loop_lag_max_ms": probe.worst(),
        "runs": runs,
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def child(mode: str, tasks: int, seconds: float) -> dict:
    port = free_port() if mode != "off" else 0
    proc = subprocess.Popen(
        [sys.executable, __file__, "--side", str(port), "--tasks", str(tasks),
         "--seconds", str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    scrapes: list[float] = []
    size = 0
    if mode == "scraped":
        url = f"http://127.0.0.1:{port}/metrics"
        end = time.monotonic() + WARM_UP + seconds
        while time.monotonic() < end and len(scrapes) < 200_000:
            started = time.perf_counter()
            with urllib.request.urlopen(url, timeout=10) as reply:
                size = len(reply.read())
            scrapes.append((time.perf_counter() - started) * 1000)
    figures = json.loads(proc.stdout.read().strip().splitlines()[-1])
    assert proc.wait(60) == 0
    figures["scrapes_per_s"] = len(scrapes) / (WARM_UP + seconds) if scrapes else 0.0
    figures["scrape_ms_p50"] = statistics.median(scrapes) if scrapes else None
    figures["body_bytes"] = size
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--side", type=int, help=argparse.SUPPRESS)  # the engine's port (0: off)
    args = parser.parse_args()
    if args.side is not None:
        figures = asyncio.run(engine_side(args.tasks, args.seconds, args.side or None))
        print(json.dumps(figures))
        return
    results: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for round_no in range(args.rounds):
        for mode in MODES:
            got = child(mode, args.tasks, args.seconds)
            results[mode].append(got)
            scraped = f"  {got['scrapes_per_s']:6.0f} scrapes/s" if got["scrapes_per_s"] else ""
            print(
                f"round {round_no + 1} {mode:>7}: loop lag p50 {got['loop_lag_p50_ms']:5.2f} ms"
                f"  p99 {got['loop_lag_p99_ms']:6.2f} ms  max {got['loop_lag_max_ms']:6.1f} ms"
                f"  runs {got['runs']}{scraped}",
                flush=True,
            )

    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in results[mode])

    summary: dict[str, object] = {"tasks": args.tasks, "seconds": args.seconds,
                                  "rounds": args.rounds}  # fmt: skip
    for mode in MODES:
        for key in ("loop_lag_p50_ms", "loop_lag_p99_ms", "loop_lag_max_ms", "runs"):
            summary[f"{mode}_{key}"] = round(med(mode, key), 2)
    summary["scrapes_per_s"] = round(med("scraped", "scrapes_per_s"))
    summary["scrape_ms_p50"] = round(med("scraped", "scrape_ms_p50"), 2)
    summary["body_bytes"] = results["scraped"][-1]["body_bytes"]
    for mode in ("served", "scraped"):
        base = med("off", "loop_lag_p99_ms") or 1e-9
        summary[f"{mode}_p99_ratio"] = round(med(mode, "loop_lag_p99_ms") / base, 2)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
