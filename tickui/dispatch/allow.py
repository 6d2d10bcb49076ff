"""What a worker may run (`--allow PROGRAM`): programs are compared as the files they
are, after PATH lookup and symlinks, so `/tmp/x/sh` is not `sh` and `/bin/sh` is."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tickui.errors import BadInput


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
        self, argv: Sequence[str], env: Mapping[str, str], cwd: str | None
    ) -> tuple[str, ...] | None:
        """The argv to run (argv[0] as the path it was found at), or None: not allowed."""
        if not self.files:
            return tuple(argv)
        found = _locate(argv[0], env.get("PATH"), cwd)
        if found is None or os.path.realpath(found) not in self.files:
            return None
        return (found, *argv[1:])
