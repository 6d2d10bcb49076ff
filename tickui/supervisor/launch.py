"""How tickui starts a run's supervisor: the command line, run by this interpreter from
the tickui source this module was loaded from."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import tickui

# -I: no PYTHON* variables of the run's environment, no user site, not the cwd; -S: no
# site-packages (nothing there is needed). The tickui source is put on the path by hand,
# so that the supervisor is the code of the tickui that starts it; after the standard
# library, so that nothing beside tickui there (a site-packages) can shadow a module of it.
BOOT = (
    "import sys; sys.path.append(sys.argv[1]); "
    "from tickui.supervisor.main import main; sys.exit(main(sys.argv[2:]))"
)
SERVE_BOOT = (
    "import sys; sys.path.append(sys.argv[1]); "
    "from tickui.supervisor.server import serve; sys.exit(serve(sys.argv[2:]))"
)
SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(tickui.__file__)))


def supervisor_argv(
    argv: Sequence[str],
    *,
    journal: str | os.PathLike[str],
    log: str | os.PathLike[str],
    lease: str | os.PathLike[str] | None = None,
    lease_deadline: float | None = None,
    grace: float = 3.0,
    head: int | None = None,
    tail: int | None = None,
    python: str = sys.executable,
) -> list[str]:
    """The command line that runs `argv` under a supervisor. Paths are made absolute
    (the supervisor runs in the run's cwd). `lease_deadline` (CLOCK_MONOTONIC seconds)
    stands until the lease file says otherwise."""
    args = supervisor_args(
        argv, journal=journal, log=log, lease=lease, lease_deadline=lease_deadline,
        grace=grace, head=head, tail=tail,
    )  # fmt: skip
    return supervisor_command(args, python)


def supervisor_command(args: Sequence[str], python: str = sys.executable) -> list[str]:
    """The command line of a supervisor given its own arguments (`supervisor_args`)."""
    return [python, "-I", "-S", "-c", BOOT, SOURCE_ROOT, *args]


def supervisor_args(
    argv: Sequence[str],
    *,
    journal: str | os.PathLike[str],
    log: str | os.PathLike[str],
    lease: str | os.PathLike[str] | None = None,
    lease_deadline: float | None = None,
    grace: float = 3.0,
    head: int | None = None,
    tail: int | None = None,
) -> list[str]:
    """The supervisor's own arguments (tickui.supervisor.main's), as `supervisor_argv`
    passes them and a supervisor server is given them."""
    out = ["--journal", os.path.abspath(journal), "--log", os.path.abspath(log)]
    out += ["--grace", repr(float(grace))]
    if lease is not None:
        out += ["--lease", os.path.abspath(lease)]
    if lease_deadline is not None:
        out += ["--lease-deadline", repr(float(lease_deadline))]
    if head is not None:
        out += ["--head", str(head)]
    if tail is not None:
        out += ["--tail", str(tail)]
    return [*out, "--", *argv]


def server_argv(fd: int, python: str = sys.executable) -> list[str]:
    """The command line of a supervisor server (tickui.supervisor.server) serving on the
    socket `fd` (passed to it open)."""
    return [python, "-I", "-S", "-c", SERVE_BOOT, SOURCE_ROOT, str(fd)]
