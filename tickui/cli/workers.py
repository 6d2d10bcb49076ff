"""`tickui workers`: the workers the engine has heard from (Kafka dispatch), read from the
database read-only as `tickui history` does: host, slots, running, last heartbeat, state."""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

from tickui.cli.output import print_json, say, table, with_store
from tickui.common.clock import SystemClock
from tickui.common.redact import safe_text
from tickui.common.timeutil import MICROS, format_duration

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    from tickui.store import Store

NONE = "no workers heard from (runs go to workers with tickui run --dispatch kafka)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON array")


def ago(then: int, now: int) -> str:
    """'3s ago'; a time ahead of now (another host's clock) reads 'just now'."""
    seconds = (now - then) // MICROS
    if seconds <= 0:
        return "just now"
    return f"{format_duration(seconds * MICROS)} ago"


async def main(args: argparse.Namespace, path: Path | str) -> int:
    from tickui.dispatch.refusals import said, security_lines  # the dispatch package

    async def action(store: Store) -> int:
        workers = await store.list_workers()
        engines = await store.dispatch_security()
        if args.json:
            print_json([w.to_json() for w in workers])
            return 0
        lines = security_lines(workers, engines)
        if not workers:
            say("\n".join([NONE, *(text for text, _ in lines)]), redacted=True)
            return 0
        now = SystemClock().now()
        rows = [
            [
                safe_text(w.id),
                safe_text(w.host),
                str(w.slots),
                f"{len(w.running)}/{w.slots}",
                ago(w.last_seen, now),
                w.state,
                "INSECURE" if w.insecure else "signed",
                said(w.refused) or "-",
                safe_text(w.version or "-"),
            ]
            for w in workers
        ]
        headers = ["WORKER", "HOST", "SLOTS", "RUNNING", "LAST HEARTBEAT", "STATE", "KEY",
                   "REFUSED", "VERSION"]  # fmt: skip
        say(table(rows, headers), redacted=True)
        if lines:
            say("\n".join(text for text, _ in lines), redacted=True)
        return 0

    empty = functools.partial(print_json, []) if args.json else functools.partial(say, NONE)
    return await with_store(path, action, readonly=True, empty=empty)
