"""The dashboard's own remembered choices (theme, time zone, sort, filters, side panes).

They live in the user's config folder (`platformdirs`, so XDG_CONFIG_HOME is honoured),
never in the database: two people sharing one database keep their own views. A missing
file is the defaults; an unreadable or corrupt one is the defaults plus one message for
the user, never a traceback. Writes are atomic (a temp file renamed over) and private.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import platformdirs

FILE_NAME = "settings.json"
ZONES = ("local", "utc", "task")
OCC_STATES = ("all", "failed", "running", "not skipped")
MAX_BYTES = 64 * 1024  # a settings file larger than this is not ours
MAX_TEXT = 200


@dataclass(frozen=True)
class DashboardSettings:
    theme: str | None = None  # None: Textual's default
    zone: str = "local"  # "local" | "utc" | "task"
    sort_column: str = "NEXT"
    sort_descending: bool = False
    occ_text: str = ""  # Occurrences pane: task name contains
    occ_state: str = "all"  # one of OCC_STATES
    side_hidden: bool = False

    def but(self, **changes: object) -> DashboardSettings:
        return replace(self, **changes)


def settings_path() -> Path:
    return Path(platformdirs.user_config_dir("tickui")) / FILE_NAME


def _checked(raw: dict[str, object]) -> tuple[DashboardSettings, list[str]]:
    """Each known field of the right type and value; anything else is left at its default
    and named."""
    defaults = DashboardSettings()
    values: dict[str, object] = {}
    bad: list[str] = []
    for f in fields(DashboardSettings):
        if f.name not in raw:
            continue
        value = raw[f.name]
        default = getattr(defaults, f.name)
        ok = False
        if f.name == "theme":
            ok = value is None or (isinstance(value, str) and 0 < len(value) <= MAX_TEXT)
        elif isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(value, str) and len(value) <= MAX_TEXT:
            ok = {"zone": value in ZONES, "occ_state": value in OCC_STATES}.get(f.name, True)
        if ok:
            values[f.name] = value
        else:
            bad.append(f.name)
    return DashboardSettings(**values), bad


def load(path: Path | None = None) -> tuple[DashboardSettings, str | None]:
    """The saved settings and, when the file could not be used (whole or in part), one
    line saying so."""
    path = path or settings_path()
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return DashboardSettings(), None
    except OSError as exc:
        return DashboardSettings(), f"settings not read ({path}: {exc.strerror}); using defaults"
    try:
        if len(data) > MAX_BYTES:
            raise ValueError("too large")
        raw = json.loads(data.decode("utf-8"))
        if not isinstance(raw, dict):
            raise ValueError("not an object")
    except (ValueError, UnicodeDecodeError, RecursionError):
        return DashboardSettings(), f"settings file {path} is corrupt; using defaults"
    settings, bad = _checked(raw)
    if bad:
        return settings, f"settings file {path}: ignored {', '.join(bad)}"
    return settings, None


def save(settings: DashboardSettings, path: Path | None = None) -> None:
    """Write atomically (temp file in the same folder, then rename), readable by the user
    only. Raises OSError; the caller tells the user."""
    path = path or settings_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    text = json.dumps(asdict(settings), indent=2, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=".settings-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:  # mkstemp: mode 0600
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
