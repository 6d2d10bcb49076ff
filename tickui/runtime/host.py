"""What the dashboard hosts: one store, one clock, the engine and the ticker driving it."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tickui.common.clock import Clock
from tickui.dispatch import Dispatcher
from tickui.engine import SchedulerEngine
from tickui.hooks import HookService
from tickui.runtime.assembly import assemble
from tickui.runtime.settings import DispatchSettings, Settings
from tickui.store import Store
from tickui.ticks.config import TickerConfig, kafka_access
from tickui.ticks.ticker import RuntimeScheduler

if TYPE_CHECKING:
    from tickui.runtime.metrics import MetricsEndpoint


@dataclass
class Host:
    db: Path | str  # the SQLite file, or a PostgreSQL store's URL as it may be shown
    store: Store
    clock: Clock
    engine: SchedulerEngine
    ticker: RuntimeScheduler
    demo: bool = False
    start_ticker: bool = True
    start_engine: bool = True
    watch: bool = False  # a dashboard that only watches: no engine, no ticker, ever
    closed: bool = field(default=False, init=False)
    hooks: HookService | None = None  # alert hooks ([[hook]]), None when there are none
    metrics: MetricsEndpoint | None = None  # Prometheus metrics ([metrics] listen)

    async def start(self) -> None:
        if self.watch:
            return
        if self.hooks is not None:
            self.hooks.begin()
        if self.start_engine:
            await self.engine.start()
        if self.start_ticker:
            await self.ticker.start()

    async def stop(self, grace: float | None = None) -> None:
        """Stop ticking, then the engine (waiting up to `grace` s for active runs)."""
        with contextlib.suppress(Exception):
            await self.ticker.stop()
        await self.engine.stop(grace)

    async def close(self, grace: float | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            await self.stop(grace)
        finally:
            if self.hooks is not None:
                with contextlib.suppress(Exception):
                    await self.hooks.close(grace=2.0)
            if self.metrics is not None:
                with contextlib.suppress(Exception):
                    await self.metrics.close()
            await self.store.close()


def build_host(
    store: Store,
    clock: Clock,
    settings: Settings,
    ticker_config: TickerConfig | None = None,
    dispatcher: Dispatcher | None = None,
    **flags: bool,
) -> Host:
    """The engine ticked by the ticker, as `tickui run` has them. Without Kafka, ticks go
    to an in-process bus so the breaker (and `f`, simulated failures) still mean something."""
    demo = bool(flags.get("demo"))
    parts = assemble(
        store,
        clock,
        settings,
        ticker_config or settings.ticker,
        # The demo's sample tasks run here; the dashboard's engine dispatches as settings say.
        dispatch=DispatchSettings() if demo else settings.dispatch,
        kafka=kafka_access(settings.ticker),
        dispatcher=dispatcher,
        hooks=not demo,  # the demo's failures are staged: they page no one
        in_process_bus=True,
    )
    where = store.path if store.where == str(store.path) else store.where  # a file, or a URL
    return Host(
        where,
        store,
        clock,
        parts.engine,
        parts.ticker,
        hooks=parts.hooks,
        metrics=parts.metrics,
        **flags,
    )
