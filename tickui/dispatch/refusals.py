"""Messages refused on the dispatch topics: counted by kind, logged without flooding the
log (the first few of each kind, then once a minute with the count), and told to whoever
listens (the engine's hooks). Pure apart from the logger it is given."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tickui.common.redact import safe_text

# kind -> (one, many): what the dashboard and `tickui workers` say.
KINDS: dict[str, tuple[str, str]] = {
    "forged_command": ("forged command", "forged commands"),
    "unverifiable_command": (
        "signed command this worker cannot check (it has no key)",
        "signed commands this worker cannot check (it has no key)",
    ),
    "expired_command": ("expired command", "expired commands"),
    "replayed_command": ("replayed command", "replayed commands"),
    "disallowed_command": ("command not allowed", "commands not allowed"),
    "forged_control": ("forged control message", "forged control messages"),
    "forged_event": ("forged run event", "forged run events"),
    "foreign_event": ("run event from another worker", "run events from another worker"),
    "forged_heartbeat": ("forged heartbeat", "forged heartbeats"),
}
LOG_FIRST = 3  # of each kind, every one is logged; then once a minute
LOG_EVERY_S = 60.0


def said(counts: Mapping[str, int]) -> str:
    """'3 forged commands, 1 replayed command' (kinds in a fixed order); '' for none."""
    parts = []
    for kind, (one, many) in KINDS.items():
        n = int(counts.get(kind, 0) or 0)
        if n > 0:
            parts.append(f"{n} {one if n == 1 else many}")
    return ", ".join(parts)


class Refusals:
    """One process's refused messages. `listener(kind, count, detail)` is called for each
    one refused (in the loop; it must not block)."""

    def __init__(self, log: logging.Logger, clock: Callable[[], float] = time.monotonic) -> None:
        self.log = log
        self.clock = clock
        self.counts: dict[str, int] = {}
        self._logged: dict[str, tuple[float, int]] = {}  # kind -> (when, count then)
        self.listeners: list[Callable[[str, int, str], None]] = []

    def refuse(self, kind: str, detail: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown refusal kind {kind!r}")
        count = self.counts.get(kind, 0) + 1
        self.counts[kind] = count
        detail = safe_text(detail)[:300]
        now = self.clock()
        when, then = self._logged.get(kind, (None, 0))
        if count <= LOG_FIRST or when is None or now - when >= LOG_EVERY_S:
            since = count - then
            more = f" ({since} since the last said, {count} in all)" if since > 1 else ""
            self.log.warning("refused a %s: %s%s", KINDS[kind][0], detail, more)
            self._logged[kind] = (now, count)
        for listener in list(self.listeners):
            try:
                listener(kind, count, detail)
            except Exception:
                self.log.exception("a refusal listener failed")

    def snapshot(self) -> dict[str, int]:
        return dict(self.counts)


def security_lines(workers: Sequence[Any], engines: Sequence[Any]) -> list[tuple[str, bool]]:
    """What `tickui workers` and the Workers pane say of signing: each engine's key (or
    that it runs insecure), then who refused what. (text, alarm) pairs, alarms first."""
    lines: list[tuple[str, bool]] = []
    for engine in engines:
        name = safe_text(engine.name)
        if engine.insecure:
            lines.append((f"{name}: INSECURE, dispatch messages are not signed", True))
        if engine.refused:
            lines.append((f"{name}: {said(engine.refused)} refused", True))
    for worker in workers:
        name = f"worker {safe_text(worker.id)}"
        if worker.insecure:
            lines.append((f"{name}: INSECURE, runs any command (no key)", True))
        if worker.refused:
            lines.append((f"{name}: {said(worker.refused)} refused", True))
    if not lines and engines:
        kid = safe_text(engines[0].key_id or "?")
        lines.append((f"{safe_text(engines[0].name)} signs with key {kid}", False))
    return lines
