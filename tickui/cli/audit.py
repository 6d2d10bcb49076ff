"""`tickui audit [--task NAME] [--limit N] [--json]`: who did what to which task, newest
first. A SQLite file is read as `history` reads it (tickui.store.reader: no event loop);
another store through the `Store`, read-only."""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

from tickui.cli.output import JSON_FLAG, print_json, say, shown_time, table, with_reader, with_store
from tickui.common.checks import arg, arg_number
from tickui.common.redact import safe_text
from tickui.model.spec import check_name

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    from typing import Any

DEFAULT_LIMIT = 50
MAX_LIMIT = 10_000  # as many as the store keeps


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--task", type=arg(check_name, "--task"), metavar="NAME", help="one task's only"
    )
    parser.add_argument(
        "--limit",
        type=arg_number("--limit", 1, MAX_LIMIT, integer=True),
        default=DEFAULT_LIMIT,
        help=f"at most this many (default {DEFAULT_LIMIT}, up to {MAX_LIMIT})",
    )
    parser.add_argument("--json", action="store_true", help=JSON_FLAG)


def audit_table(entries: list[Any]) -> str:
    """The listing's table, newest first."""
    rows = [
        [
            shown_time(e.at),
            f"{e.user}@{e.host}",
            e.origin,
            e.action,
            e.task or "-",
            safe_text(e.detail or "")[:80],
        ]
        for e in entries
    ]
    headers = ["TIME", "USER@HOST", "ORIGIN", "ACTION", "TASK", "DETAIL"]
    return table(rows, headers) if rows else "no audit entries"


def _print(entries: list[Any], as_json: bool) -> int:
    if as_json:
        print_json([e.to_json() for e in entries])
    else:
        say(audit_table(entries))
    return 0


def _empty(as_json: bool):
    if as_json:
        return functools.partial(print_json, [])
    return functools.partial(say, "no audit entries")


def audit_now(args: argparse.Namespace, path: Path) -> int:
    """`audit` of a SQLite file, read without an event loop."""
    return with_reader(
        path, lambda reader: _print(reader.audit(args.task, args.limit), args.json),
        empty=_empty(args.json),
    )  # fmt: skip


async def cmd_audit(args: argparse.Namespace, path: Path | str) -> int:
    async def action(store: Any) -> int:
        return _print(await store.audit_entries(args.task, args.limit), args.json)

    return await with_store(path, action, readonly=True, empty=_empty(args.json))
