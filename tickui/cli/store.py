"""`tickui store copy`: move a setup between stores (a SQLite file, a PostgreSQL URL)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tickui.common import checks
from tickui.common.errors import BadInput, NotSetUp, Unavailable
from tickui.common.redact import redact

TABLE_NAMES = {
    "hook_deliveries": "hook deliveries",
    "dispatch_security": "dispatch security",
    "audit": "audit entries",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="store_action", required=True, metavar="ACTION")
    copy = actions.add_parser(
        "copy",
        help="copy tasks, history, events, hook deliveries and the audit to another store",
        description="Copy every table but the lease from one store to another, in one"
        " transaction on the target; the source is only read.",
    )
    copy.add_argument(
        "--from", dest="source", required=True, metavar="PATH_OR_URL",
        type=_target("--from"), help="the store to copy: a SQLite file or a postgresql:// URL",
    )  # fmt: skip
    copy.add_argument(
        "--to", dest="target", required=True, metavar="PATH_OR_URL",
        type=_target("--to"), help="the store to fill (a new file is created)",
    )  # fmt: skip
    copy.add_argument(
        "--dry-run", action="store_true", help="say what would be copied; write nothing"
    )
    copy.add_argument(
        "--replace", action="store_true", help="empty a target that holds tasks or runs first"
    )
    copy.add_argument("--json", action="store_true", help="the counts as JSON")


def _identity(store: Path | str) -> tuple[object, ...]:
    """What names one store however it is spelled: a file's real path; a server's host,
    port, database and user (not the password)."""
    if isinstance(store, Path):
        return ("file", store.resolve())
    from urllib.parse import urlsplit

    parts = urlsplit(store)
    return ("server", parts.hostname, parts.port or 5432, parts.path.strip("/"), parts.username)


def _target(name: str):
    def check(value: str, flag: str) -> Path | str:
        given = checks.store_text(value, flag)
        return given if checks.is_store_url(given) else Path(given).expanduser()

    return checks.arg(check, name)


async def main(args: argparse.Namespace) -> int:
    from tickui.store import Store, lookup

    source, target = args.source, args.target
    if _identity(source) == _identity(target):
        raise BadInput("--to", "is the same store as --from")
    if isinstance(source, Path) and lookup(source) is None:
        raise Unavailable(f"no database at {source}")
    src = await Store.open(source, readonly=True)
    try:
        dst = await _open_target(target, args.dry_run)
        try:
            report = await _copy(src, dst, args)
        finally:
            if dst is not None:
                await dst.close()
    finally:
        await src.close()
    if args.json:
        json.dump({"dry_run": report.dry_run, "copied": report.counts,
                   "replaced": report.replaced}, sys.stdout, indent=2)  # fmt: skip
        sys.stdout.write("\n")
        return 0
    verb = "would copy" if report.dry_run else "copied"
    said = ", ".join(f"{n} {TABLE_NAMES.get(t, t)}" for t, n in report.counts.items())
    print(redact(f"{verb} {said}"))
    if report.replaced:
        gone = ", ".join(f"{n} {TABLE_NAMES.get(t, t)}" for t, n in report.replaced.items())
        print(redact(f"{'would replace' if report.dry_run else 'replaced'} {gone}"))
    return 0


async def _open_target(target: Path | str, dry_run: bool):
    """The target, opened to be written; for a dry run only read, and None when it does not
    exist yet (a new file, a database tickui never set up): then it is empty."""
    from tickui.store import Store, lookup

    if not dry_run:
        return await Store.open(target)
    if isinstance(target, Path) and lookup(target) is None:
        return None
    try:
        return await Store.open(target, readonly=True)
    except NotSetUp:
        return None


async def _copy(src, dst, args: argparse.Namespace):
    from tickui.store import copy_store

    return await copy_store(src, dst, dry_run=args.dry_run, replace=args.replace)
