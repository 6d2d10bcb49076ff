"""tickui: a terminal dashboard that hosts a local job scheduler.

`from tickui import RuntimeScheduler` gives the ticker, a drop-in for ONEX's
(`RuntimeScheduler(config=..., event_bus=...)`, see tickui.ticks.ticker); it is loaded on first
use, so importing any other part of tickui does not load the ticker.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs milliseconds to import; the run supervisor starts fast
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"
__all__ = ["RuntimeScheduler", "SchedulerMetrics", "SchedulerStatus", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "RuntimeScheduler":
        from tickui.ticks.ticker import RuntimeScheduler

        return RuntimeScheduler
    if name in ("SchedulerMetrics", "SchedulerStatus"):
        from tickui.ticks import metrics

        return getattr(metrics, name)
    raise AttributeError(f"module 'tickui' has no attribute {name!r}")
