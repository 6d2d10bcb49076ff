"""`tickui run`: the engine driven by ticks, headless, until a signal or `--for` ends it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from tickui.clock import Clock, ScaledClock, SystemClock
from tickui.config import Settings
from tickui.dispatcher import SubprocessDispatcher
from tickui.engine import EngineConfig, SchedulerEngine
from tickui.errors import BadInput
from tickui.redact import RedactingFilter
from tickui.store import Store
from tickui.timeutil import MICROS, parse_duration

MIN_REAL_PERIOD = 0.01
TICK_OFFSET = 0.002


@dataclass(frozen=True)
class RunOptions:
    duration: float | None
    scale: float
    tick_interval: int
    stop_grace: int


def options(args: argparse.Namespace, settings: Settings) -> RunOptions:
    if args.duration is not None and args.duration <= 0:
        raise BadInput("for", f"{args.duration:g} is not a positive number of seconds")
    if not 1 <= args.time_scale <= 3600:
        raise BadInput("time-scale", f"{args.time_scale:g} is out of range (1 to 3600)")
    tick = parse_duration(args.tick_interval, "tick-interval") if args.tick_interval else MICROS
    if not 10_000 <= tick <= 60 * MICROS:
        raise BadInput("tick-interval", "must be between 10ms and 60s")
    grace = settings.engine.stop_grace
    if args.stop_grace:
        grace = parse_duration(args.stop_grace, "stop-grace")
    return RunOptions(args.duration, args.time_scale, tick, grace)


def setup_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tickui: %(asctime)s %(message)s", "%H:%M:%S"))
    handler.addFilter(RedactingFilter())
    root = logging.getLogger("tickui")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False


def build_engine(store: Store, clock: Clock, settings: Settings, tick: int) -> SchedulerEngine:
    engine = settings.engine
    config = EngineConfig(
        misfire_grace=engine.misfire_grace,
        lease_ttl=engine.lease_ttl,
        stop_grace=engine.stop_grace / MICROS,
        keep=engine.keep,
        tick_period=tick,
    )
    return SchedulerEngine(store, SubprocessDispatcher(store, clock), clock, config)


async def drive(engine: SchedulerEngine, clock: Clock, period: float, stop: asyncio.Event) -> None:
    """Tick at fixed deadlines on the monotonic clock (no drift); a busy engine coalesces."""
    loop = asyncio.get_running_loop()
    start = loop.time() + _to_boundary(clock, period)
    beat = -1
    scan: asyncio.Task[None] | None = None
    while not stop.is_set():
        beat = max(beat + 1, int((loop.time() - start) / period))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.0, start + beat * period - loop.time()))
        if stop.is_set():
            break
        if scan is None or scan.done():
            scan = asyncio.create_task(engine.tick(clock.now()))
        else:
            await engine.tick(clock.now())  # counted as coalesced by the engine
    if scan is not None:
        await scan


def _to_boundary(clock: Clock, period: float) -> float:
    """Seconds from now to just past the next wall-clock multiple of the tick period, so
    ticks land right after whole-second slots instead of up to a tick before them."""
    step = period * clock.scale
    return ((-clock.now() / MICROS) % step) / clock.scale + TICK_OFFSET


async def run_headless(args: argparse.Namespace, settings: Settings, db: Path) -> int:
    opts = options(args, settings)
    setup_logging()
    log = logging.getLogger("tickui.run")
    store = await Store.open(db)
    try:
        if settings.tasks is not None:
            report = await store.sync_tasks(settings.tasks, SystemClock().now())
            if report.added or report.updated or report.removed:
                log.info(
                    "config synced: added %s, updated %s, removed %s",
                    report.added,
                    report.updated,
                    report.removed,
                )
        clock: Clock = ScaledClock(opts.scale) if opts.scale != 1 else SystemClock()
        period = max(MIN_REAL_PERIOD, opts.tick_interval / MICROS / opts.scale)
        # Between two ticks this much engine time passes: at high scales, more than asked.
        engine = build_engine(store, clock, settings, round(period * opts.scale * MICROS))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if opts.duration:
            loop.call_later(opts.duration, stop.set)
        await engine.start()
        status = engine.status()
        if status.lease_state == "standby":
            log.info("standby: lease held by %s", status.holder)
        else:
            log.info("running on %s as %s", db, engine.owner)
        await drive(engine, clock, period, stop)
        log.info("stopping")
        await engine.stop(opts.stop_grace / MICROS)
        print(json.dumps({"engine": engine.status().to_json()}), file=sys.stderr)
    finally:
        await store.close()
    return 0
