"""`tickui run`: the engine driven by the ticker, headless, until a signal or `--for`."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tickui.common.clock import Clock, ScaledClock, SystemClock
from tickui.common.errors import BadInput
from tickui.common.kafka import KafkaAccess, preflight
from tickui.common.procs import stop_on_signals
from tickui.common.redact import RedactingFilter
from tickui.common.timeutil import MICROS, parse_duration
from tickui.dispatch import Dispatcher, SubprocessDispatcher
from tickui.dispatch.kafka import KafkaDispatcher
from tickui.dispatch.keyfile import keyring_for
from tickui.dispatch.signing import Keyring
from tickui.engine import EngineConfig, SchedulerEngine
from tickui.hooks import HookService
from tickui.hooks import attach as attach_hooks
from tickui.runtime.settings import DispatchSettings, Settings
from tickui.runtime.simulate import SimulatedDispatcher, TimeLapse
from tickui.store import Store
from tickui.ticks.bus import KafkaBus, MemoryBus
from tickui.ticks.config import TickerConfig, kafka_access, ticker_flags, valkey_password
from tickui.ticks.config import build as build_ticker
from tickui.ticks.sequence import SequenceAllocator, SqliteSequenceStore, ValkeySequenceStore
from tickui.ticks.ticker import RuntimeScheduler, Tick

MIN_INTERVAL_MS = 10
MEMORY_BUS_KEEP = 100
SEQUENCE_BLOCK_SECONDS = 10  # reserve about this much ticking ahead


@dataclass(frozen=True)
class RunOptions:
    duration: float | None
    scale: float
    stop_grace: int
    ticker: TickerConfig
    real_commands: bool = False
    dispatch: DispatchSettings = field(default_factory=DispatchSettings)


def check_dispatch(dispatch: DispatchSettings, kafka: KafkaAccess | None) -> Keyring | None:
    """Kafka dispatch needs a broker to name and a key to sign with (or --insecure): bad
    input, exit 2, before anything starts. The keys, for kafka dispatch."""
    if dispatch.mode != "kafka":
        return None
    if kafka is None:
        raise BadInput(
            "dispatch",
            "kafka dispatch needs a broker: --kafka BOOTSTRAP, [kafka] bootstrap"
            " or TICKUI_KAFKA_BOOTSTRAP",
        )
    return keyring_for(dispatch.key_file, dispatch.key_origin, dispatch.insecure, "kafka dispatch")


def options(args: argparse.Namespace, settings: Settings) -> RunOptions:
    if args.duration is not None and args.duration <= 0:
        raise BadInput("for", f"{args.duration:g} is not a positive number of seconds")
    if not 1 <= args.time_scale <= 3600:
        raise BadInput("time-scale", f"{args.time_scale:g} is out of range (1 to 3600)")
    ticker = build_ticker(settings.raw, settings.env, ticker_flags(args))
    grace = settings.engine.stop_grace
    if args.stop_grace:
        grace = parse_duration(args.stop_grace, "stop-grace")
    real = bool(getattr(args, "real_commands", False))
    dispatch = settings.dispatch
    if getattr(args, "dispatch", None):
        dispatch = dataclasses.replace(dispatch, mode=args.dispatch)
    check_dispatch(dispatch, kafka_access(ticker))
    return RunOptions(args.duration, args.time_scale, grace, ticker, real, dispatch)


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


def build_engine(
    store: Store,
    clock: Clock,
    settings: Settings,
    tick: int,
    dispatcher: Dispatcher | None = None,
    *,
    dispatch: DispatchSettings | None = None,
    ticker: TickerConfig | None = None,
) -> SchedulerEngine:
    """The engine with its dispatcher: the one given, else workers over Kafka when
    dispatch says so (never under time-lapse: its clock is not the workers'), else
    child processes."""
    engine = settings.engine
    dispatch = dispatch or getattr(settings, "dispatch", None) or DispatchSettings()
    kafka = kafka_access(ticker or settings.ticker)
    if dispatcher is None and dispatch.mode == "kafka" and clock.scale != 1:
        logging.getLogger("tickui.run").info("time-lapse: runs are local, not on workers")
    elif dispatcher is None and dispatch.mode == "kafka":
        keyring = check_dispatch(dispatch, kafka)
        assert kafka is not None and keyring is not None
        if keyring.insecure:
            logging.getLogger("tickui.run").warning(
                "INSECURE: dispatch messages are not signed; anyone who can write to the"
                " topics can run commands on the workers"
            )
        dispatcher = KafkaDispatcher(
            store,
            clock,
            kafka,
            keyring=keyring,
            partitions=dispatch.partitions,
            start_timeout=dispatch.start_timeout / MICROS,
            worker_timeout=dispatch.worker_timeout / MICROS,
            group=dispatch.group,
        )
    config = EngineConfig(
        misfire_grace=engine.misfire_grace,
        lease_ttl=engine.lease_ttl,
        stop_grace=engine.stop_grace / MICROS,
        keep=engine.keep,
        tick_period=tick,
        scan_on_end=True,  # E: a queued run starts as the run before it ends
    )
    dispatcher = dispatcher or SubprocessDispatcher(
        store,
        clock,
        head_bytes=getattr(engine, "log_head", 64 * 1024),
        tail_bytes=getattr(engine, "log_tail", 1024 * 1024),
    )
    return SchedulerEngine(store, dispatcher, clock, config)


def hear_refusals(engine: SchedulerEngine, hooks: HookService | None) -> None:
    """The hooks hear what a Kafka dispatcher (and its workers) refused."""
    if hooks is not None and isinstance(engine.dispatcher, KafkaDispatcher):
        engine.dispatcher.refusal_listeners.append(hooks.on_refused)


def build_ticker_for(store: Store, clock: Clock, config: TickerConfig) -> RuntimeScheduler:
    """The ticker with its sequence store (Valkey if configured, else the database) and bus.

    Under time-lapse (a scale other than 1) nothing leaves the process: ticks go to an
    in-process bus instead of Kafka, and sequence numbers are kept in the (copied) database
    instead of Valkey, whose key belongs to the real timeline."""
    lapse = clock.scale != 1
    if lapse and (config.kafka_bootstrap or (config.persist_sequence and config.valkey_url)):
        logging.getLogger("tickui.run").info(
            "time-lapse: ticks go to an in-process bus, not Kafka; "
            "tick sequence numbers stay in the copy, not in Valkey"
        )
    sequence_store = None
    if config.persist_sequence:
        if config.valkey_url and not lapse:
            sequence_store = ValkeySequenceStore(
                config.valkey_url,
                config.valkey_timeout_s,
                config.valkey_retries,
                ssl_cafile=config.valkey_ssl_cafile,
                password=valkey_password(config),
            )
        else:
            sequence_store = SqliteSequenceStore(store)
    block = max(10, SEQUENCE_BLOCK_SECONDS * 1000 // config.interval_ms)
    sequence = SequenceAllocator(sequence_store, config.sequence_key, block)
    bus = None
    if lapse:
        bus = MemoryBus(keep=MEMORY_BUS_KEEP)
    elif config.kafka_bootstrap:
        access = kafka_access(config)
        assert access is not None
        bus = KafkaBus(access, request_timeout=config.publish_timeout_s)
    return RuntimeScheduler(config, clock, bus, sequence)


async def run_headless(args: argparse.Namespace, settings: Settings, db: Path) -> int:
    opts = options(args, settings)
    setup_logging()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = [signal.SIGINT, signal.SIGTERM]
    if opts.scale != 1 and signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        signals.append(signal.SIGHUP)  # a closed terminal must not leave the copy behind
    # from here on, a signal ends the run through the cleanup below
    with stop_on_signals(loop, stop.set, signals):
        if opts.scale == 1:
            return await _run(settings, opts, db, stop, None)
        lapse = TimeLapse(db, opts.scale, opts.real_commands)
        try:
            await asyncio.to_thread(lapse.__enter__)
            print(lapse.banner(), file=sys.stderr, flush=True)
            return await _run(settings, opts, lapse.copy, stop, lapse)
        finally:
            lapse.close()


async def _run(
    settings: Settings, opts: RunOptions, db: Path, stop: asyncio.Event, lapse: TimeLapse | None
) -> int:
    log = logging.getLogger("tickui.run")
    access = kafka_access(opts.ticker)
    if access is not None and lapse is None:
        await preflight(access)  # a refused login or certificate: one line, exit 1
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
        dispatcher = None
        if lapse is not None and not lapse.real_commands:
            dispatcher = SimulatedDispatcher(store, clock, lapse.profiles)
        # Between two ticks this much engine time passes: at high scales, more than asked.
        engine = build_engine(
            store,
            clock,
            settings,
            round(tick_config.interval_ms * 1000 * opts.scale),
            dispatcher,
            dispatch=opts.dispatch,
            ticker=opts.ticker,
        )
        ticker = build_ticker_for(store, clock, tick_config)

        async def scan(tick: Tick) -> None:
            await engine.tick(tick.now)

        ticker.subscribe(scan)
        # H: alert hooks ([[hook]]), beside the engine and the ticker; None without any.
        hooks = attach_hooks(getattr(settings, "hooks", ()), store, clock, engine, ticker)
        hear_refusals(engine, hooks)
        loop = asyncio.get_running_loop()
        if opts.duration:
            loop.call_later(opts.duration, stop.set)
        await engine.start()
        status = engine.status()
        if status.lease_state == "standby":
            log.info("standby: lease held by %s", status.holder)
        else:
            where = f"a copy of {lapse.source}" if lapse else db
            log.info("running on %s as %s", where, engine.owner)
        if isinstance(engine.dispatcher, KafkaDispatcher):
            log.info("runs go to workers through kafka %s", engine.dispatcher.bootstrap)
        try:
            await ticker.start()
            await stop.wait()
            log.info("stopping")
        finally:
            await ticker.stop()
            await engine.stop(opts.stop_grace / MICROS)
            if hooks is not None:  # H: the last changes' alerts, bounded
                await hooks.close()
        final = {"engine": engine.status().to_json(), "ticker": ticker.metrics().to_json()}
        if hooks is not None:  # H: deliveries by outcome, and events dropped
            final["hooks"] = hooks.status()
    finally:
        await store.close()
    if lapse is not None:
        final["time_lapse"] = await asyncio.to_thread(lapse.summary)
    print(json.dumps(final), file=sys.stderr)
    return 0
