"""A run's journal: one JSON object in one file, replaced durably (temp file, fsync,
rename, fsync of the directory) at each step of the run, so that anyone can read later
how far the run got, even after the process that started it is gone.

States, in order (each record keeps the fields of the one before):
- `waiting`: the supervisor is up and waits at the gate; the command has not run.
  `supervisor` = {pid, start (clock ticks since boot, /proc/PID/stat), boot_id}; `lease`
  (the lease file it is fenced by, or null) and `grace` (seconds from SIGTERM to SIGKILL).
  Not fsynced (it is on the start path): lost in a crash of the host, it reads as no
  record, which means the same (never started), as the supervisor died with the host.
- `running`: the command is released; `command` = {pid, start, started_us (wall clock)}.
  Written before the command is let go, so a command never runs unrecorded.
- `ended`: `exit_code` or `signal`, `status` (the supervisor's exit status), `ended_us`,
  `fenced` (ended because the lease ran out) and `cancelled` (the supervisor was told to
  stop the run), `output_bytes` (read from the command) and `output_lost` (of those, not
  written: the log's writes failed). Written once the command's whole tree is gone and
  its log closed.
- `not_started`: the gate closed (EOF), or a cancel or the lease's end came first;
  `reason` says which; status 125.
- `start_failed`: the command could not be started (exec failed): `error`; status 122.
"""

from __future__ import annotations

import os
import time

WAITING = "waiting"
RUNNING = "running"
ENDED = "ended"
NOT_STARTED = "not_started"
START_FAILED = "start_failed"
FINAL = (ENDED, NOT_STARTED, START_FAILED)

# What a reader concludes (see `verdict`).
NEVER_STARTED = "never_started"  # the command did not run and never will under this journal
LOST = "lost"  # the command was released, its supervisor is gone and recorded no end


def start_ticks(pid: int) -> int | None:
    """The kernel's start time of `pid` (clock ticks since boot), None if gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return None if fields[0] == b"Z" else int(fields[19])
    except (IndexError, ValueError):
        return None


def boot_id() -> str:
    """This boot's id: pids and start ticks recorded under another boot name nothing."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def encode(value: object) -> str:
    """JSON for the journal's values (dicts, strings, ints, floats, bools, None): json
    loads re and enum, milliseconds the supervisor's start does without."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int | float):
        return repr(value) if value == value and abs(value) != float("inf") else "null"
    if isinstance(value, str):
        return '"' + "".join(_ESCAPES.get(ch) or _surrogate(ch) for ch in value) + '"'
    if isinstance(value, dict):
        return "{" + ",".join(f"{encode(str(k))}:{encode(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot record {type(value).__name__}")


def _surrogate(ch: str) -> str:
    """A lone surrogate (an undecodable byte of a path) as its escape: JSON keeps it."""
    return f"\\u{ord(ch):04x}" if "\ud800" <= ch <= "\udfff" else ch


_ESCAPES = {chr(i): f"\\u{i:04x}" for i in range(32)} | {'"': '\\"', "\\": "\\\\"}


def now_us() -> int:
    return time.time_ns() // 1000


class JournalWriter:
    """Writes one run's journal; the directory stays open so each record costs one rename
    and two fsyncs."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.tmp = f"{path}.tmp"
        self.record: dict[str, object] = {"version": 1}
        self._dir = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_CLOEXEC)

    def write(self, state: str, *, durable: bool = True, **fields: object) -> None:
        """Record `state` (with `fields` added to what was recorded before); raises OSError.
        Not `durable`: replaced atomically but not fsynced, for a record whose loss in a
        crash of the host changes no reader's conclusion."""
        self.record.update(fields, state=state)
        data = encode(self.record).encode() + b"\n"
        fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(self.tmp, self.path)
        if durable:
            os.fsync(self._dir)

    def close(self) -> None:
        try:
            os.close(self._dir)
        except OSError:
            return


def read_journal(path: str) -> dict[str, object] | None:
    """The last record, or None when there is none (no file, or not a record)."""
    import json  # not loaded by the supervisor, which only writes

    try:
        with open(path, "rb") as handle:
            record = json.loads(handle.read())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and "state" in record else None


def supervisor_alive(record: dict[str, object]) -> bool:
    """The supervisor that wrote `record` still runs (same boot, same pid and start)."""
    sup = record.get("supervisor")
    if not isinstance(sup, dict) or sup.get("boot_id") != boot_id():
        return False
    pid, start = sup.get("pid"), sup.get("start")
    return isinstance(pid, int) and pid > 0 and start is not None and start_ticks(pid) == start


def verdict(record: dict[str, object] | None) -> str:
    """What a reader may conclude from a run's journal: `never_started` (no record: the
    command is only released after `running` is durable; or `waiting` with its
    supervisor gone), `waiting` or `running` (its supervisor still runs: it will record
    the end), `lost` (`running` but its supervisor is gone, killed or the host
    rebooted: the end is unknown and what is left of the run runs in the session whose
    id is the supervisor's pid), or a final state (`ended`, `not_started`, `start_failed`)."""
    if record is None:
        return NEVER_STARTED
    state = record.get("state")
    if state in FINAL:
        return str(state)
    if state == WAITING:
        return WAITING if supervisor_alive(record) else NEVER_STARTED
    return RUNNING if supervisor_alive(record) else LOST
