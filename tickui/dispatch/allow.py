"""What a worker may run (`--allow PROGRAM`): programs are compared as the files they
are, after a lookup on the worker's own PATH and symlinks, so `/tmp/x/sh` is not `sh` and
`/bin/sh` is. A command may then not set the variables that make a program load or run
other code (LD_PRELOAD, BASH_ENV, PYTHONPATH, NODE_OPTIONS...) nor PATH: an allowed
program must stay the only thing it runs of its own accord."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tickui.common.errors import BadInput

# Environment variables that make a program (a dynamic loader, a shell, an interpreter) load
# or run code other than its own: refused under --allow.
UNSAFE_ENV = re.compile(
    r"(LD_|DYLD_|BASH_FUNC_|PYTHON|PERL5|PERLIO|RUBY|NODE_|JAVA_TOOL_OPTIONS|_JAVA_OPTIONS"
    r"|JDK_JAVA_OPTIONS|GCONV_PATH|LOCPATH|NLSPATH|TCLLIBPATH|LUA_).*"
    r"|PATH|BASH_ENV|ENV|PERLLIB|SHELLOPTS|BASHOPTS|PS4|IFS|CDPATH|GIT_EXEC_PATH"
)


def _locate(program: str, path: str | None, cwd: str | None) -> str | None:
    """The file a command's argv[0] runs, as exec would find it; None when none is."""
    if "/" in program:
        found = program if os.path.isabs(program) else os.path.join(cwd or os.getcwd(), program)
        return found if os.path.isfile(found) and os.access(found, os.X_OK) else None
    return shutil.which(program, path=path if path is not None else os.defpath)


@dataclass(frozen=True)
class AllowList:
    """Empty: every program is allowed (the engine's key is the only gate)."""

    names: tuple[str, ...] = ()
    files: frozenset[str] = frozenset()

    @classmethod
    def build(cls, programs: Iterable[str], flag: str = "--allow") -> AllowList:
        names, files = [], set()
        for program in programs:
            found = _locate(program, os.environ.get("PATH"), None)
            if found is None:
                raise BadInput(flag, f"{program}: no such program (on PATH or as a path)")
            names.append(program)
            files.add(os.path.realpath(found))
        return cls(tuple(names), frozenset(files))

    def resolve(
        self, argv: Sequence[str], command_env: Mapping[str, str], cwd: str | None
    ) -> tuple[tuple[str, ...] | None, str]:
        """(the argv to run, argv[0] as the path it was found at, ""), or (None, why not).
        `command_env` is what the command asks to set on top of the worker's own."""
        if not self.files:
            return tuple(argv), ""
        unsafe = sorted(name for name in command_env if UNSAFE_ENV.fullmatch(name))
        if unsafe:
            return None, f"sets {', '.join(unsafe)[:100]}: not allowed on this worker"
        found = _locate(argv[0], os.environ.get("PATH"), cwd)
        if found is None or os.path.realpath(found) not in self.files:
            return None, "not allowed on this worker"
        return (found, *argv[1:]), ""
