"""What a worker remembers: the command ids it started (a journal file that survives a
restart of the same worker id), and file names made safe."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
from pathlib import Path

from tickui.dispatch.bounded import Bounded

log = logging.getLogger("tickui.worker")
SAFE = re.compile(r"[A-Za-z0-9._-]{1,100}")


def file_name(text: str) -> str:
    """`text` as a file name: itself when plain, else a digest (never a path)."""
    if SAFE.fullmatch(text) and text not in (".", ".."):
        return text
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class Journal:
    """Command ids a worker id started, one a line, appended before the command runs: a
    worker restarted with the same id knows what it started (and must not start again)."""

    def __init__(self, path: Path, keep: int = 10_000) -> None:
        self.path = path
        self.keep = keep
        self.ids: Bounded[str, None] = Bounded(keep)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        lines: list[str] = []
        with contextlib.suppress(FileNotFoundError):
            lines = path.read_text(errors="replace").split()
        for line in lines[-keep:]:
            self.ids.put(line, None)
        self._lines = len(lines)
        if self._lines > 2 * keep:
            self._rewrite(lines[-keep:])
        self._handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 (kept open)

    def _rewrite(self, lines: list[str]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(f"{line}\n" for line in lines))
        os.replace(tmp, self.path)
        self._lines = len(lines)

    def add(self, command_id: str) -> None:
        """Record a start; a failure to write is logged (the events topic still has it)."""
        key = file_name(command_id)  # one plain word a line, whatever the id is
        self.ids.put(key, None)
        try:
            self._handle.write(key + "\n")
            self._handle.flush()
            self._lines += 1
            if self._lines > 2 * self.keep:
                self._handle.close()
                self._rewrite(list(self.ids._items))
                self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            log.warning("cannot write the journal %s: %s", self.path, exc.strerror or exc)

    def __contains__(self, command_id: object) -> bool:
        return isinstance(command_id, str) and file_name(command_id) in self.ids

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._handle.close()
