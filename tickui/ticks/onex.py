"""The ticker's ONEX face: ONEX's `ProtocolRuntimeScheduler`, and tickui's settings and
sequence numbers made from ONEX's `ModelRuntimeSchedulerConfig` (or any object with its
field names), for `RuntimeScheduler(config=..., event_bus=...)`."""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import quote

from tickui.common.errors import SchedulerConfigError
from tickui.ticks import topics, wire
from tickui.ticks.config import TickerConfig
from tickui.ticks.metrics import SchedulerMetrics
from tickui.ticks.sequence import SequenceAllocator, ValkeySequenceStore

ONEX_PUBLISH_TIMEOUT_S = 5.0  # ONEX's config has none: its bus times out on its own
ONEX_SEQUENCE_BLOCK_S = 60  # sequence numbers reserved ahead in Valkey, in seconds of ticks


class ProtocolRuntimeScheduler(Protocol):
    """The seed's protocol (omnibase-infra `ProtocolRuntimeScheduler`), exactly."""

    @property
    def scheduler_id(self) -> str: ...

    @property
    def is_running(self) -> bool: ...

    @property
    def current_sequence_number(self) -> int: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def emit_tick(self, now: datetime | None = None) -> None: ...

    async def get_metrics(self) -> SchedulerMetrics: ...


def onex_like(config: Any) -> bool:
    """An ONEX config (or a look-alike), not tickui's TickerConfig."""
    return not isinstance(config, TickerConfig) and hasattr(config, "tick_interval_ms")


def ticker_config_from_onex(config: Any, publish_timeout_s: float | None = None) -> TickerConfig:
    """tickui's settings from ONEX's `ModelRuntimeSchedulerConfig` or any object with its
    field names (missing ones take ONEX's defaults). Raises SchedulerConfigError, also for
    an interval under 100 ms: ONEX's config allows 10 ms, but every tick so published fails
    ONEX's ModelRuntimeTick (ONEX's own scheduler raises on each emit)."""

    def get(name: str, default: Any) -> Any:
        value = getattr(config, name, default)
        return default if value is None else value

    try:
        interval = int(get("tick_interval_ms", 1000))
        jitter = int(get("max_tick_jitter_ms", 100))
        threshold = int(get("circuit_breaker_threshold", 5))
        reset = float(get("circuit_breaker_reset_timeout_seconds", 60.0))
        persist = bool(get("persist_sequence_number", True))
        host = str(get("valkey_host", os.environ.get("VALKEY_HOST", "localhost")))
        port = int(get("valkey_port", 6379))
        password = getattr(config, "valkey_password", None)
        timeout = float(get("valkey_timeout_seconds", 5.0))
        retries = int(get("valkey_connection_retries", 3))
    except (TypeError, ValueError) as exc:
        raise SchedulerConfigError(f"scheduler config: {exc}") from exc
    if not 10 <= interval <= 60_000:
        raise SchedulerConfigError("scheduler config: tick_interval_ms must be from 10 to 60000")
    if interval < topics.MIN_INTERVAL_MS:  # ONEX's config allows it; its tick model does not
        raise SchedulerConfigError(
            f"scheduler config: {interval} ms ticks cannot go to the event bus: ONEX consumers"
            f" reject a tick_interval_ms under {topics.MIN_INTERVAL_MS}"
        )
    if not 1 <= threshold <= 100 or not 1 <= reset <= 3600 or jitter < 0:
        raise SchedulerConfigError("scheduler config: circuit breaker settings out of range")
    password = getattr(password, "get_secret_value", lambda: password)()  # a SecretStr too
    auth = f":{quote(str(password), safe='')}@" if password else ""
    scheduler_id = str(get("scheduler_id", "runtime-scheduler-default")).strip()
    return TickerConfig(
        interval_ms=interval,
        jitter_ms=min(jitter, interval - 1),  # tickui's jitter stays inside the slot
        breaker_threshold=threshold,
        breaker_reset_s=reset,
        publish_timeout_s=publish_timeout_s or ONEX_PUBLISH_TIMEOUT_S,
        scheduler_id=scheduler_id,
        topic=str(get("tick_topic", wire.DEFAULT_TOPIC["envelope"])),
        persist_sequence=persist,
        sequence_key=str(get("sequence_number_key", "runtime_scheduler_sequence")),
        valkey_url=f"redis://{auth}{host}:{port}/0" if persist else None,
        valkey_timeout_s=min(60.0, max(0.1, timeout)),
        valkey_retries=min(10, max(0, retries)),
    )


def onex_sequence(config: TickerConfig) -> SequenceAllocator:
    """Sequence numbers as ONEX keeps them: in Valkey under sequence_number_key when
    persist_sequence_number, else in memory."""
    store = None
    if config.persist_sequence and config.valkey_url:
        store = ValkeySequenceStore(
            config.valkey_url, config.valkey_timeout_s, config.valkey_retries
        )
    block = max(10, ONEX_SEQUENCE_BLOCK_S * 1000 // config.interval_ms)
    return SequenceAllocator(store, config.sequence_key, block)
