"""`tickui run`: the engine driven by the ticker, headless, until a signal or `--for`."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from tickui.bus import KafkaBus
from tickui.clock import Clock, ScaledClock, SystemClock
from tickui.config import Settings
from tickui.dispatch import SubprocessDispatcher
from tickui.engine import EngineConfig, SchedulerEngine
from tickui.errors import BadInput
from tickui.redact import RedactingFilter
from tickui.sequence import SequenceAllocator, SqliteSequenceStore, ValkeySequenceStore
from tickui.store import Store
from tickui.ticker import RuntimeScheduler, Tick
from tickui.ticker_config import TickerConfig
from tickui.ticker_config import build as build_ticker
from tickui.timeutil import MICROS, parse_duration

MIN_INTERVAL_MS = 10
SEQUENCE_BLOCK_SECONDS = 10  # reserve about this much ticking ahead


@dataclass(frozen=True)
class RunOptions:
    duration: float | None
    scale: float
    stop_grace: int
    ticker: TickerConfig


def options(args: argparse.Namespace, settings: Settings) -> RunOptions:
    if args.duration is not None and args.duration <= 0:
        raise BadInput("for", f"{args.duration:g} is not a positive number of seconds")
    if not 1 <= args.time_scale <= 3600:
        raise BadInput("time-scale", f"{args.time_scale:g} is out of range (1 to 3600)")
    interval = None
    if args.tick_interval:
        interval = parse_duration(args.tick_interval, "tick-interval") / 1000
    flags = {
        "interval_ms": (interval, "--tick-interval"),
        "kafka_bootstrap": (args.kafka, "--kafka"),
        "topic": (args.topic, "--topic"),
        "valkey_url": (args.valkey, "--valkey"),
    }
    ticker = build_ticker(settings.raw, settings.env, flags)
    grace = settings.engine.stop_grace
    if args.stop_grace:
        grace = parse_duration(args.stop_grace, "stop-grace")
    return RunOptions(args.duration, args.time_scale, grace, ticker)


def setup_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tickui: %(asctime)s %(message)s", "%H:%M:%S"))
    handler.addFilter(RedactingFilter())
    root = logging.getLogger("tickui")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False


def real_ticker_config(config: TickerConfig, scale: float) -> TickerConfig:
    """Under time-lapse the ticker ticks `scale` times as often, down to 10 ms."""
    if scale == 1:
        return config
    interval = max(MIN_INTERVAL_MS, round(config.interval_ms / scale))
    jitter = min(config.jitter_ms, interval - 1) if config.jitter_ms else 0
    return dataclasses.replace(config, interval_ms=interval, jitter_ms=jitter)


def build_engine(store: Store, clock: Clock, settings: Settings, tick: int) -> SchedulerEngine:
    engine = settings.engine
    config = EngineConfig(
        misfire_grace=engine.misfire_grace,
        lease_ttl=engine.lease_ttl,
        stop_grace=engine.stop_grace / MICROS,
        keep=engine.keep,
        tick_period=tick,
    )
    dispatcher = SubprocessDispatcher(
        store,
        clock,
        head_bytes=getattr(engine, "log_head", 64 * 1024),
        tail_bytes=getattr(engine, "log_tail", 1024 * 1024),
    )
    return SchedulerEngine(store, dispatcher, clock, config)


def build_ticker_for(store: Store, clock: Clock, config: TickerConfig) -> RuntimeScheduler:
    """The ticker with its sequence store (Valkey if configured, else the database) and bus."""
    sequence_store = None
    if config.persist_sequence:
        if config.valkey_url:
            sequence_store = ValkeySequenceStore(
                config.valkey_url, config.valkey_timeout_s, config.valkey_retries
            )
        else:
            sequence_store = SqliteSequenceStore(store)
    block = max(10, SEQUENCE_BLOCK_SECONDS * 1000 // config.interval_ms)
    sequence = SequenceAllocator(sequence_store, config.sequence_key, block)
    bus = None
    if config.kafka_bootstrap:
        bus = KafkaBus(config.kafka_bootstrap, request_timeout=config.publish_timeout_s)
    return RuntimeScheduler(config, clock, bus, sequence)


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
        tick_config = real_ticker_config(opts.ticker, opts.scale)
        # Between two ticks this much engine time passes: at high scales, more than asked.
        engine = build_engine(
            store, clock, settings, round(tick_config.interval_ms * 1000 * opts.scale)
        )
        ticker = build_ticker_for(store, clock, tick_config)

        async def scan(tick: Tick) -> None:
            await engine.tick(tick.now)

        ticker.subscribe(scan)
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
        try:
            await ticker.start()
            await stop.wait()
            log.info("stopping")
        finally:
            await ticker.stop()
            await engine.stop(opts.stop_grace / MICROS)
        metrics = ticker.metrics().to_json()
        print(json.dumps({"engine": engine.status().to_json(), "ticker": metrics}), file=sys.stderr)
    finally:
        await store.close()
    return 0
