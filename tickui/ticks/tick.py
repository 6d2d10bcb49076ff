"""A tick: the one record of "now" the ticker hands the engine and publishes to a bus."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tickui.common.timeutil import iso


@dataclass(slots=True)
class Tick:
    now: int
    tick_id: str
    sequence_number: int
    scheduled_at: int
    correlation_id: str
    scheduler_id: str
    tick_interval_ms: int

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["now"], data["scheduled_at"] = iso(self.now), iso(self.scheduled_at)
        return data
