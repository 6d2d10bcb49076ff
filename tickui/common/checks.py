"""One checker for every value a user gives: flags, environment variables and tickui.toml.

Each function takes the raw value and the name to blame, and returns the parsed value or
raises BadInput with one line. Regexes are ASCII-only and matched whole (`fullmatch`):
`\\d` would take full-width digits and `$` would let a trailing newline through.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from urllib.parse import urlsplit

from tickui.common.errors import BadInput
from tickui.common.redact import redact

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    from typing import Any

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
MAX_TEXT = 64 * KIB  # notes and other free text
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
# Plain ASCII decimals, long enough to say "out of range" rather than "not a number".
_NUMBER = re.compile(r"[+-]?(?:[0-9]{1,100}(?:\.[0-9]{0,20})?|\.[0-9]{1,20})", re.ASCII)
_INTEGER = re.compile(r"[+-]?[0-9]{1,100}", re.ASCII)
_SIZE = re.compile(r"([0-9]{1,15}(?:\.[0-9]{1,6})?) *(B|KiB|MiB|GiB)?", re.ASCII | re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kib": KIB, "mib": MIB, "gib": GIB}
# A host name is dot-separated labels of 1 to 63 characters (an empty or longer one is
# refused by the resolver's encoder with an error of its own), or a bracketed IPv6 address.
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOST = re.compile(
    rf"(?=[^\[]{{1,253}}$){_LABEL}(?:\.{_LABEL})*\.?|\[[0-9A-Fa-f:.]{{2,45}}\]", re.ASCII
)


def number(value: Any, name: str, low: float, high: float, integer: bool = False) -> float | int:
    """A finite number within [low, high]; text must be plain ASCII digits (no nan, inf,
    exponent or full-width digits)."""
    if isinstance(value, str):
        text = value.strip(" ")  # spaces only: a newline or a tab is not part of a number
        if not (_INTEGER if integer else _NUMBER).fullmatch(text):
            kind = "a whole number" if integer else "a number"
            raise BadInput(name, f"{shown(value)} is not {kind}")
        value = int(text) if integer else float(text)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadInput(name, f"{shown(value)} is not a number")
    if integer and not isinstance(value, int):
        raise BadInput(name, f"{shown(value)} is not a whole number")
    if not math.isfinite(value) or not low <= value <= high:
        raise BadInput(name, f"{shown(value)} is out of range ({low:g} to {high:g})")
    return value


def size(value: Any, name: str, low: int, high: int) -> int:
    """Bytes from a size text (`512B`, `64KiB`, `1MiB`, `2GiB`) or a whole number of bytes."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise BadInput(name, f"{shown(value)} is not a size such as '64KiB'")
    if isinstance(value, str):
        match = _SIZE.fullmatch(value.strip(" "))
        if not match:
            raise BadInput(name, f"{shown(value)} is not a size (use e.g. 512B, 64KiB, 1MiB)")
        value = round(float(match[1]) * _SIZE_UNITS[(match[2] or "b").lower()])
    if not low <= value <= high:
        raise BadInput(
            name, f"{value} bytes is out of range ({_size_text(low)} to {_size_text(high)})"
        )
    return value


def _size_text(n: int) -> str:
    for unit, factor in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n and n % factor == 0:
            return f"{n // factor}{unit}"
    return f"{n}B"


def duration(value: Any, name: str, low: int, high: int) -> int:
    """Microseconds from a duration text, within [low, high] microseconds."""
    from tickui.common.timeutil import format_duration, parse_duration

    if isinstance(value, bool) or not isinstance(value, str):
        raise BadInput(name, f"{shown(value)} is not a duration text such as '30s'")
    micros = parse_duration(value, name)
    if not low <= micros <= high:
        span = f"{format_duration(low) if low else '0'} to {format_duration(high)}"
        raise BadInput(name, f"{shown(value)} is out of range ({span})")
    return micros


def text(value: Any, name: str, limit: int = MAX_TEXT, empty: bool = True) -> str:
    """A string without NUL bytes, at most `limit` characters (control characters are
    allowed: every output path makes them visible)."""
    if not isinstance(value, str):
        raise BadInput(name, f"{shown(value)} is not a text")
    if "\x00" in value:
        raise BadInput(name, "contains a NUL byte")
    if len(value) > limit:
        raise BadInput(name, f"is longer than {limit} characters")
    if not empty and not value.strip():
        raise BadInput(name, "is empty")
    return value


def path_text(value: Any, name: str) -> str:
    """A file system path: a non-empty text without NUL, of a length the OS accepts."""
    return text(value, name, limit=4096, empty=False)


STORE_SCHEMES = ("postgresql", "postgres")


def is_store_url(value: str) -> bool:
    """A PostgreSQL store's URL (anything else names a SQLite file)."""
    return value.split("://", 1)[0].lower() in STORE_SCHEMES and "://" in value


def store_text(value: Any, name: str) -> str:
    """A store: a `postgresql://` URL or a SQLite file's path. Another scheme is refused
    rather than taken for a file named like a URL."""
    given = text(value, name, limit=4096, empty=False)
    scheme, sep, _ = given.partition("://")
    if sep and scheme.isidentifier() and not is_store_url(given):
        raise BadInput(
            name, f"{shown(scheme)}:// is not a store; give postgresql://... or a file's path"
        )
    if is_store_url(given):
        _store_url_port(given, name)
    return given


def _store_url_port(url: str, name: str) -> None:
    """A store's URL names one host, and its port, if any, is a number from 1 to 65535.
    The URL itself is never repeated: it may hold a password."""
    host = urlsplit(url).netloc.rpartition("@")[2]
    if "," in host:
        raise BadInput(name, "the URL must name one host (a list of hosts is not taken)")
    _, colon, port = host.rpartition(":") if not host.endswith("]") else ("", "", "")
    if colon and (not port.isdigit() or not 1 <= int(port) <= 65535):
        raise BadInput(name, "the URL's port must be a number from 1 to 65535")


def directory(value: Any, name: str) -> str:
    """A path to a directory that exists now."""
    path = path_text(value, name)
    if not os.path.isdir(path):
        raise BadInput(name, f"{shown(path)} is not an existing directory")
    return path


def env_name(value: Any, name: str = "env") -> str:
    if not isinstance(value, str) or not ENV_NAME.fullmatch(value):
        raise BadInput(name, f"{shown(value)} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
    return value


def host_port(item: str, name: str) -> tuple[str, int]:
    """`host:port` with a real host and a port from 1 to 65535 (no user or password)."""
    if "@" in item:
        raise BadInput(
            name, f"{shown(item)}: give host:port only (credentials do not go in the bootstrap)"
        )
    host, sep, port = item.rpartition(":")
    if not sep or not _HOST.fullmatch(host) or not re.fullmatch(r"[0-9]{1,5}", port, re.ASCII):
        raise BadInput(name, f"{shown(item)} is not host:port")
    if not 1 <= int(port) <= 65535:
        raise BadInput(name, f"{shown(item)}: port {port} is out of range (1 to 65535)")
    return host, int(port)


def listen_address(value: Any, name: str) -> str:
    """Where a server listens: `host:port`, the host a name or an address (IPv6 in
    brackets: `[::1]:9464`), the port from 1 to 65535."""
    if not isinstance(value, str) or not value.strip():
        raise BadInput(name, f"{shown(value)} is not host:port")
    host, sep, port = value.strip().rpartition(":")
    if not sep or not _HOST.fullmatch(host) or not re.fullmatch(r"[0-9]{1,5}", port, re.ASCII):
        raise BadInput(name, f"{shown(value)} is not host:port (e.g. 127.0.0.1:9464)")
    if not 1 <= int(port) <= 65535:
        raise BadInput(name, f"{shown(value)}: port {port} is out of range (1 to 65535)")
    return value.strip()


def listen_host(value: Any, name: str) -> str:
    """The host a server listens on: a name or an address (IPv6 with or without its
    brackets), returned without brackets."""
    given = value.strip() if isinstance(value, str) else ""
    bare = given.removeprefix("[").removesuffix("]")
    if not bare or not (_HOST.fullmatch(given) or _HOST.fullmatch(f"[{bare}]")):
        raise BadInput(name, f"{shown(value)} is not a host name or address (e.g. 127.0.0.1)")
    return bare


def bootstrap(value: Any, name: str) -> str:
    """A Kafka bootstrap list: host:port[,host:port...]."""
    if not isinstance(value, str) or not value.strip():
        raise BadInput(name, f"{shown(value)} is not host:port[,host:port]")
    for item in value.split(","):
        host_port(item, name)
    return value.strip()


def valkey_url(value: Any, name: str) -> str:
    """A Redis/Valkey URL that the client library will accept, checked here so that a bad
    one is one line naming `name` (the URL itself is shown redacted). Returned as the
    client reads it: `valkey://` becomes `redis://`."""
    if not isinstance(value, str) or not re.match(r"(redis|rediss|valkey|unix)://", value):
        raise BadInput(name, "must start with redis://, rediss://, valkey:// or unix://")
    text(value, name, limit=4096)
    if any(c.isspace() for c in value):
        raise BadInput(name, "must not contain spaces")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        raise BadInput(
            name,
            f"{shown(value)} is not a valid URL: the port must be a number from 1 to 65535"
            " (write @ / : # ? in a password as %40 %2F %3A %23 %3F)",
        ) from None
    if parts.scheme == "unix":
        if not parts.path:
            raise BadInput(name, f"{shown(value)} names no socket path")
    else:
        if not parts.hostname:
            raise BadInput(
                name,
                f"{shown(value)} names no host (write / @ : in a password as %2F %40 %3A)",
            )
        if port is not None and not 1 <= port <= 65535:
            raise BadInput(name, f"{shown(value)}: port {port} is out of range (1 to 65535)")
        db = parts.path.lstrip("/")
        if db and not re.fullmatch(r"[0-9]{1,5}", db, re.ASCII):
            raise BadInput(
                name,
                f"{shown(value)}: the database after / must be a number"
                " (write / in a password as %2F)",
            )
    # The redis client understands redis://, rediss:// and unix:// only: valkey:// is
    # redis:// to it. Build the connection the sequence store would (without connecting),
    # so that whatever the client refuses (a query option it does not know or cannot
    # read, for every scheme) is refused here, in one line, not later as a crash.
    if value.startswith("valkey://"):
        value = "redis://" + value[len("valkey://") :]
    try:
        from redis.asyncio import ConnectionPool
    except ImportError:
        return value
    try:
        pool = ConnectionPool.from_url(
            value, socket_timeout=1.0, socket_connect_timeout=1.0, retry_on_timeout=False
        )
        pool.make_connection()
    except Exception as exc:  # the client's own refusal: TypeError, ValueError, RedisError
        raise BadInput(name, f"{shown(value)}: {redact(str(exc))}") from None
    return value


def shown(value: Any) -> str:
    """A value as an error message quotes it: redacted, escaped, cut to a sensible length."""
    from tickui.common.redact import safe_text

    out = safe_text(repr(value))
    return out if len(out) <= 120 else out[:117] + "..."


def arg(check: Callable[[str, str], Any], flag: str) -> Callable[[str], Any]:
    """An argparse `type=` that runs a checker and reports in argparse's one-line way."""

    def convert(value: str) -> Any:
        try:
            return check(value, flag)
        except BadInput as exc:
            raise argparse.ArgumentTypeError(exc.message) from None

    convert.__name__ = flag.lstrip("-")
    return convert


def arg_number(flag: str, low: float, high: float, integer: bool = False) -> Callable[[str], Any]:
    return arg(lambda v, n: number(v, n, low, high, integer), flag)


def arg_duration(flag: str, low: int, high: int) -> Callable[[str], str]:
    """Checks a duration flag but returns its text (the consumer parses it again)."""

    def check(value: str, name: str) -> str:
        duration(value, name, low, high)
        return value

    return arg(check, flag)
