"""`tickui worker`: run commands the engine sends over Kafka (see worker.py)."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
from pathlib import Path

from tickui import checks
from tickui.checks import arg, arg_duration, arg_number
from tickui.config import Settings
from tickui.errors import BadInput

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,99}")
GROUP = re.compile(r"[A-Za-z0-9._-]{1,249}")


def _name(value: str, flag: str) -> str:
    if not NAME.fullmatch(value):
        raise BadInput(
            flag, f"{checks.shown(value)}: use 1 to 100 letters, digits, '.', '_', ':' or '-'"
        )
    return value


def _group(value: str, flag: str) -> str:
    if not GROUP.fullmatch(value):
        raise BadInput(flag, f"{checks.shown(value)}: use letters, digits, '.', '_' or '-'")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The worker's options; kept light: nothing heavy is imported to build the parser."""
    parser.add_argument("--kafka", type=arg(checks.bootstrap, "--kafka"), metavar="BOOTSTRAP")
    parser.add_argument("--group", type=arg(_group, "--group"), metavar="NAME")
    parser.add_argument("--slots", type=arg_number("--slots", 1, 256, integer=True), default=4)
    parser.add_argument("--id", dest="worker_id", type=arg(_name, "--id"), metavar="NAME")
    parser.add_argument(
        "--for", dest="duration", type=arg_number("--for", 0.001, 366 * 86400.0), metavar="SECONDS"
    )
    parser.add_argument(
        "--stop-grace", type=arg_duration("--stop-grace", 0, 3600 * 1_000_000), metavar="DURATION"
    )
    parser.add_argument("--log-dir", type=arg(checks.path_text, "--log-dir"), metavar="DIR")
    parser.add_argument(
        "--session-timeout",
        type=arg_duration("--session-timeout", 1_000_000, 60_000_000),
        metavar="DURATION",
        help="consumer group session timeout (default 4s): a dead worker's share moves after it",
    )


def main(args: argparse.Namespace, settings: Settings) -> int:
    import platformdirs

    from tickui.dispatch.messages import DEFAULT_GROUP
    from tickui.dispatch.worker import WorkerOptions
    from tickui.runner import setup_logging
    from tickui.timeutil import MICROS, parse_duration

    bootstrap = args.kafka or settings.ticker.kafka_bootstrap
    if not bootstrap:
        raise BadInput("--kafka", "give --kafka BOOTSTRAP (or TICKUI_KAFKA_BOOTSTRAP)")
    worker_id = args.worker_id or f"{socket.gethostname()}-{os.getpid()}"
    worker_id = _name(worker_id[:100], "--id")
    if args.log_dir:
        log_dir = Path(args.log_dir).expanduser()
    else:
        log_dir = Path(platformdirs.user_state_dir("tickui")) / "worker-logs"
    grace = parse_duration(args.stop_grace, "--stop-grace") / MICROS if args.stop_grace else 10.0
    session = parse_duration(args.session_timeout) // 1000 if args.session_timeout else 4000
    opts = WorkerOptions(
        bootstrap=bootstrap,
        group=args.group or DEFAULT_GROUP,
        slots=int(args.slots),
        worker_id=worker_id,
        duration=args.duration,
        stop_grace=grace,
        log_dir=log_dir,
        session_timeout_ms=session,
    )
    setup_logging()
    return asyncio.run(_run(opts))


async def _run(opts: object) -> int:
    from tickui.dispatch.worker import Worker

    return await Worker(opts).run()  # type: ignore[arg-type]
