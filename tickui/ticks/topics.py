"""The wire formats' names, their default topics and the fastest tick ONEX takes: what the
settings check a ticker's config against, without the formats themselves (tickui.ticks.wire,
with json and its header records)."""

WIRES = ("bare", "envelope")
DEFAULT_TOPIC = {"bare": "runtime.tick.v1", "envelope": "onex.intent.platform.runtime-tick.v1"}
MIN_INTERVAL_MS = 100  # ModelRuntimeTick.tick_interval_ms >= 100: ONEX rejects faster ticks
