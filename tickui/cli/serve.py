"""`tickui serve`: the dashboard, as `tickui` shows it, for browsers.

Each browser connection runs the dashboard's own command line (this Python, `-m tickui`
and the dashboard options `serve` was given), so every page shows the store `serve` was
pointed at. A store URL that holds a password reaches it through the environment, never
on a command line that `ps` shows.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import shlex
import sys
from pathlib import Path

from tickui.common import checks
from tickui.common.errors import BadInput
from tickui.common.options import add_argument, option
from tickui.common.redact import redact

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    from tickui.runtime.settings import Settings

SAID = "the dashboard in a browser (textual-serve; no login: keep it on loopback)"
_HOST = "the address to listen on (default 127.0.0.1); one off loopback needs --public"
_PUBLIC = (
    "listen on an address other machines reach (there is no login: anyone who gets there"
    " can run and edit tasks)"
)


def add_arguments(serve: argparse.ArgumentParser, watch: str, lapse: str, real: str) -> None:
    """serve's flags, and the dashboard's own ones also taken after `serve`."""
    add_argument(serve, option("serve", "host"), suppress=True, help=_HOST)
    add_argument(serve, option("serve", "port"), suppress=True, help="its port (default 8000)")
    serve.add_argument("--public", action="store_true", help=_PUBLIC)
    scale = checks.arg_number("--time-scale", 1, 3600)
    serve.add_argument("--watch", action="store_true", default=argparse.SUPPRESS, help=watch)
    serve.add_argument(
        "--time-scale", type=scale, default=argparse.SUPPRESS, metavar="N", help=lapse
    )
    serve.add_argument("--real-commands", action="store_true", default=argparse.SUPPRESS, help=real)


def is_loopback(host: str) -> bool:
    """`localhost` or a loopback address (127.0.0.0/8, ::1); any other name or address,
    0.0.0.0 and :: among them, reaches other machines."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def where(args: argparse.Namespace, settings: Settings) -> tuple[str, int]:
    """The host and port: the flags over [serve]; a host off loopback only with --public
    (bad input without it)."""
    host = getattr(args, "host", None) or settings.serve.host
    port = getattr(args, "port", None) or settings.serve.port
    if not is_loopback(host) and not args.public:
        raise BadInput(
            "--host",
            f"{checks.shown(host)} is not a loopback address; the dashboard has no login,"
            " give --public to serve it to other machines anyway",
        )
    return host, port


def dashboard_command(
    args: argparse.Namespace, store: Path | str
) -> tuple[list[str], dict[str, str]]:
    """The dashboard's command line for each browser, and what its environment adds: the
    store as resolved here (a file as --db, absolute), and the dashboard options given."""
    argv = [sys.executable, "-m", "tickui"]
    env: dict[str, str] = {}
    if isinstance(store, Path):
        argv += ["--db", str(store.absolute())]
    elif redact(store) == store:
        argv += ["--store", store]
    else:  # its password stays off the command line: TICKUI_STORE, which no flag overrides
        env["TICKUI_STORE"] = store
    if getattr(args, "config", None):
        argv += ["--config", str(Path(args.config).expanduser().absolute())]
    if getattr(args, "watch", False):
        argv.append("--watch")
    if args.time_scale != 1:
        argv += ["--time-scale", f"{args.time_scale:g}"]
    if getattr(args, "real_commands", False):
        argv.append("--real-commands")
    if getattr(args, "key_file", None):
        argv += ["--key-file", str(Path(args.key_file).expanduser().absolute())]
    if getattr(args, "insecure", False):
        argv.append("--insecure")
    return argv, env


def main(args: argparse.Namespace, settings: Settings, store: Path | str) -> int:
    from tickui.store import inspect_file
    from tickui.ui.launch import check_scale
    from tickui.ui.web import serve, url

    host, port = where(args, settings)
    scale = check_scale(args.time_scale)
    if isinstance(store, Path) and scale == 1:  # as the dashboard would: refused here, once
        inspect_file(store.expanduser())
    argv, env = dashboard_command(args, store)
    os.environ.update(env)  # each session's dashboard inherits this environment
    warning = None
    if not is_loopback(host):
        warning = f"{url(host, port)} has no login: anyone who reaches it runs and edits tasks"
    return serve(shlex.join(argv), host, port, warning)
