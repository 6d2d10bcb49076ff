"""`tickui worker`: run commands the engine sends over Kafka (see worker.py)."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from tickui.cli.key import add_signing_arguments
from tickui.common import checks
from tickui.common.checks import arg, arg_duration, arg_number
from tickui.common.errors import BadInput
from tickui.common.options import add_argument, add_kafka_arguments, option

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    from tickui.runtime.settings import Settings

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
    add_argument(parser, option("kafka", "bootstrap"),
                 help="host:port[,host:port] (TICKUI_KAFKA_BOOTSTRAP)")  # fmt: skip
    parser.add_argument(
        "--group", type=arg(_group, "--group"), metavar="NAME",
        help="the consumer group the workers share (default tickui-workers)",
    )  # fmt: skip
    parser.add_argument(
        "--slots", type=arg_number("--slots", 1, 256, integer=True), default=4,
        help="commands run at once (1 to 256, default 4)",
    )  # fmt: skip
    parser.add_argument(
        "--id", dest="worker_id", type=arg(_name, "--id"), metavar="NAME",
        help="this worker's name (default HOST-PID; runs see it as TICKUI_WORKER)",
    )  # fmt: skip
    parser.add_argument(
        "--for", dest="duration", type=arg_number("--for", 0.001, 366 * 86400.0),
        metavar="SECONDS", help="drain and stop after this long",
    )  # fmt: skip
    parser.add_argument(
        "--stop-grace", type=arg_duration("--stop-grace", 0, 3600 * 1_000_000),
        metavar="DURATION", help="at stop, how long runs get before they are cancelled (10s)",
    )  # fmt: skip
    parser.add_argument(
        "--log-dir", type=arg(checks.path_text, "--log-dir"), metavar="DIR",
        help="where runs' output goes (default: the user state folder)",
    )  # fmt: skip
    add_signing_arguments(parser, "worker")
    add_argument(parser, option("worker", "allow"))
    add_argument(parser, option("worker", "idle_poll"))
    add_kafka_arguments(parser)
    parser.add_argument(
        "--session-timeout",
        type=arg_duration("--session-timeout", 1_000_000, 60_000_000),
        metavar="DURATION",
        help="consumer group session timeout (default 4s): a dead worker's share moves after it",
    )


def main(args: argparse.Namespace, settings: Settings) -> int:
    import asyncio
    import logging

    import platformdirs

    from tickui.cli.run import setup_logging
    from tickui.common import procs
    from tickui.common.timeutil import MICROS, parse_duration
    from tickui.dispatch import keyfile
    from tickui.dispatch.allow import AllowList
    from tickui.dispatch.messages import DEFAULT_GROUP
    from tickui.ticks.config import build, kafka_access, kafka_flags
    from tickui.worker.options import WorkerOptions

    flags = {"kafka_bootstrap": (args.kafka, "--kafka"), **kafka_flags(args)}
    access = kafka_access(build(settings.raw, settings.env, flags))
    if access is None:
        raise BadInput("--kafka", "give --kafka BOOTSTRAP (or TICKUI_KAFKA_BOOTSTRAP)")
    dispatch = settings.dispatch  # --key-file and --insecure already merged in (cli.run)
    keyring = keyfile.keyring_for(
        dispatch.key_file, dispatch.key_origin, dispatch.insecure, "a worker"
    )
    if args.allow:
        allow = AllowList.build(args.allow, "--allow")
    else:
        allow = AllowList.build(settings.worker.allow, "worker.allow")
    worker_id = args.worker_id or f"{procs.host()}-{os.getpid()}"
    worker_id = _name(worker_id[:100], "--id")
    if args.log_dir:
        log_dir = Path(args.log_dir).expanduser()
    else:
        log_dir = Path(platformdirs.user_state_dir("tickui")) / "worker-logs"
    grace = parse_duration(args.stop_grace, "--stop-grace") / MICROS if args.stop_grace else 10.0
    session = parse_duration(args.session_timeout) // 1000 if args.session_timeout else 4000
    if args.idle_poll:
        idle_poll = parse_duration(args.idle_poll, "--idle-poll")
    else:
        idle_poll = settings.worker.idle_poll
    opts = WorkerOptions(
        bootstrap=access,
        keyring=keyring,
        allow=allow,
        group=args.group or DEFAULT_GROUP,
        slots=int(args.slots),
        worker_id=worker_id,
        duration=args.duration,
        stop_grace=grace,
        log_dir=log_dir,
        session_timeout_ms=session,
        idle_poll_ms=idle_poll // 1000,
    )
    setup_logging()
    if keyring.insecure:
        logging.getLogger("tickui.worker").warning(
            "INSECURE: no key; any command written to the runs topic will run here"
        )
    return asyncio.run(_run(opts))


async def _run(opts: object) -> int:
    from tickui.common.kafka import preflight
    from tickui.worker.core import Worker

    await preflight(opts.bootstrap)  # type: ignore[attr-defined]
    return await Worker(opts).run()  # type: ignore[arg-type]
