"""The engine with its dispatcher, the ticker that drives it and the alert hooks beside
them, put together the one way both `tickui run` and the dashboard use."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, NamedTuple

from tickui.common.clock import Clock
from tickui.common.errors import BadInput
from tickui.common.kafka import KafkaAccess
from tickui.common.timeutil import MICROS
from tickui.dispatch import Dispatcher, SubprocessDispatcher
from tickui.dispatch.kafka import KafkaDispatcher
from tickui.dispatch.keyfile import keyring_for
from tickui.dispatch.signing import Keyring
from tickui.engine import EngineConfig, SchedulerEngine
from tickui.hooks import HookService
from tickui.hooks import attach as attach_hooks
from tickui.runtime.settings import DispatchSettings, EngineSettings, Settings
from tickui.store import Store
from tickui.ticks.bus import KafkaBus, MemoryBus
from tickui.ticks.config import TickerConfig, kafka_access, valkey_password
from tickui.ticks.sequence import SequenceAllocator, SqliteSequenceStore, ValkeySequenceStore
from tickui.ticks.tick import Tick
from tickui.ticks.ticker import RuntimeScheduler

MIN_INTERVAL_MS = 10
MEMORY_BUS_KEEP = 100  # ticks an in-process bus keeps
SEQUENCE_BLOCK_SECONDS = 10  # reserve about this much ticking ahead

if TYPE_CHECKING:
    from tickui.runtime.metrics import MetricsEndpoint

log = logging.getLogger("tickui.run")


class Assembly(NamedTuple):
    engine: SchedulerEngine
    ticker: RuntimeScheduler
    hooks: HookService | None  # alert hooks ([[hook]]), None when there are none
    metrics: MetricsEndpoint | None = None  # Prometheus metrics ([metrics] listen), or None


def assemble(
    store: Store,
    clock: Clock,
    settings: Settings,
    ticker_config: TickerConfig,
    *,
    dispatch: DispatchSettings,
    kafka: KafkaAccess | None,
    dispatcher: Dispatcher | None = None,
    hooks: bool = True,
    in_process_bus: bool = False,
) -> Assembly:
    """The engine ticked by the ticker, with hooks unless `hooks` is False. The engine
    runs its jobs on `dispatcher` if given, else on the one `dispatch` names (workers
    reached through `kafka`, or child processes). `in_process_bus`: without Kafka, ticks
    still go to a bus in this process, so the breaker (and simulated failures) mean
    something. With [metrics] listen, the metrics are served from here on (a port in
    use: Unavailable, before anything else starts)."""
    endpoint = serve_metrics(settings)
    try:
        parts = _assemble(
            store, clock, settings, ticker_config, dispatch, kafka, dispatcher, hooks,
            in_process_bus,
        )  # fmt: skip
    except BaseException:
        if endpoint is not None:
            endpoint.close_now()
        raise
    if endpoint is not None:
        endpoint.attach(
            store, clock, parts.engine, parts.ticker, parts.hooks, dispatch.worker_timeout
        )
        log.info("metrics at %s", endpoint.url)
    return parts._replace(metrics=endpoint)


def serve_metrics(settings: Settings) -> MetricsEndpoint | None:
    """The metrics endpoint [metrics] listen names, serving; None when it names none."""
    if settings.metrics.listen is None:
        return None
    from tickui.runtime.metrics import MetricsEndpoint  # prometheus-client: only when asked

    return MetricsEndpoint(settings.metrics.listen)


def _assemble(
    store: Store,
    clock: Clock,
    settings: Settings,
    ticker_config: TickerConfig,
    dispatch: DispatchSettings,
    kafka: KafkaAccess | None,
    dispatcher: Dispatcher | None,
    hooks: bool,
    in_process_bus: bool,
) -> Assembly:
    config = real_ticker_config(ticker_config, clock.scale)
    # Between two ticks this much engine time passes: at high scales, more than asked.
    tick = round(config.interval_ms * 1000 * clock.scale)
    if dispatcher is None:
        dispatcher = build_dispatcher(store, clock, settings.engine, dispatch, kafka)
    engine = build_engine(store, clock, settings.engine, tick, dispatcher)
    ticker = build_ticker_for(store, clock, config, in_process_bus=in_process_bus)

    async def scan(tick: Tick) -> None:
        await engine.tick(tick.now)

    ticker.subscribe(scan)
    service = attach_hooks(settings.hooks, store, clock, engine, ticker) if hooks else None
    hear_refusals(engine, service)
    return Assembly(engine, ticker, service)


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


def build_dispatcher(
    store: Store,
    clock: Clock,
    engine: EngineSettings,
    dispatch: DispatchSettings,
    kafka: KafkaAccess | None,
) -> Dispatcher:
    """Workers over Kafka when `dispatch` says so (never under time-lapse: its clock is
    not the workers'), else child processes."""
    if dispatch.mode == "kafka" and clock.scale != 1:
        log.info("time-lapse: runs are local, not on workers")
    elif dispatch.mode == "kafka":
        keyring = check_dispatch(dispatch, kafka)
        assert kafka is not None and keyring is not None
        if keyring.insecure:
            log.warning(
                "INSECURE: dispatch messages are not signed; anyone who can write to the"
                " topics can run commands on the workers"
            )
        return KafkaDispatcher(
            store,
            clock,
            kafka,
            keyring=keyring,
            partitions=dispatch.partitions,
            start_timeout=dispatch.start_timeout / MICROS,
            worker_timeout=dispatch.worker_timeout / MICROS,
            group=dispatch.group,
        )
    return SubprocessDispatcher(
        store, clock, head_bytes=engine.log_head, tail_bytes=engine.log_tail
    )


def build_engine(
    store: Store, clock: Clock, engine: EngineSettings, tick: int, dispatcher: Dispatcher
) -> SchedulerEngine:
    """The engine as [engine] says, scanning every `tick` microseconds of engine time."""
    config = EngineConfig(
        misfire_grace=engine.misfire_grace,
        lease_ttl=engine.lease_ttl,
        stop_grace=engine.stop_grace / MICROS,
        keep=engine.keep,
        tick_period=tick,
        scan_on_end=True,  # E: a queued run starts as the run before it ends
    )
    return SchedulerEngine(store, dispatcher, clock, config)


def hear_refusals(engine: SchedulerEngine, hooks: HookService | None) -> None:
    """The hooks hear what a Kafka dispatcher (and its workers) refused."""
    if hooks is not None:
        engine.dispatcher.on_refusal(hooks.on_refused)


def real_ticker_config(config: TickerConfig, scale: float) -> TickerConfig:
    """Under time-lapse the ticker ticks `scale` times as often, down to 10 ms."""
    if scale == 1:
        return config
    interval = max(MIN_INTERVAL_MS, round(config.interval_ms / scale))
    jitter = min(config.jitter_ms, interval - 1) if config.jitter_ms else 0
    return dataclasses.replace(config, interval_ms=interval, jitter_ms=jitter)


def build_ticker_for(
    store: Store, clock: Clock, config: TickerConfig, *, in_process_bus: bool = False
) -> RuntimeScheduler:
    """The ticker with its sequence store (Valkey if configured, else the database) and bus.

    Under time-lapse (a scale other than 1) nothing leaves the process: ticks go to an
    in-process bus instead of Kafka, and sequence numbers are kept in the (copied) database
    instead of Valkey, whose key belongs to the real timeline."""
    lapse = clock.scale != 1
    if lapse and (config.kafka_bootstrap or (config.persist_sequence and config.valkey_url)):
        log.info(
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
    bus: MemoryBus | KafkaBus | None = None
    if config.kafka_bootstrap and not lapse:
        access = kafka_access(config)
        assert access is not None
        bus = KafkaBus(access, request_timeout=config.publish_timeout_s)
    elif lapse or in_process_bus:
        bus = MemoryBus(keep=MEMORY_BUS_KEEP)
    return RuntimeScheduler(config, clock, bus, sequence)
