"""`tickui hooks [--json] [--limit N]`: recent hook deliveries with their outcome, newest
first. Read-only, as `task list` is: the database is opened `mode=ro`, nothing written."""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

from tickui.cli.output import print_json, say, shown_time, table, with_store
from tickui.common.redact import safe_text
from tickui.store import Store

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000


async def cmd_hooks(args: argparse.Namespace, path: Path | str) -> int:
    async def action(store: Store) -> int:
        deliveries = await store.recent_deliveries(args.limit)
        if args.json:
            print_json([d.to_json() for d in deliveries])
            return 0
        rows = [
            [
                str(d.id),
                d.hook,
                d.event,
                d.task or "-",
                str(d.occurrence_id) if d.occurrence_id is not None else "-",
                shown_time(d.created_at),
                d.outcome,
                str(d.attempts),
                safe_text(d.detail or "")[:60],
            ]
            for d in deliveries
        ]
        headers = ["ID", "HOOK", "EVENT", "TASK", "RUN", "CREATED", "OUTCOME", "TRIES", "DETAIL"]
        say(table(rows, headers) if rows else "no hook deliveries")
        return 0

    empty = (
        functools.partial(print_json, [])
        if args.json
        else functools.partial(say, "no hook deliveries")
    )
    return await with_store(path, action, readonly=True, empty=empty)
