"""The ticker's settings, from [ticker], [kafka] and [valkey], TICKUI_* variables and flags.

Each value is checked against its range; a bad one, from whichever source, is an
error naming where it came from, never a silent default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from urllib.parse import unquote, urlsplit

from tickui.common import checks, options
from tickui.common.errors import BadInput
from tickui.common.options import MECHANISMS, PROTOCOLS, Option
from tickui.common.redact import hide
from tickui.common.timeutil import MICROS, parse_duration
from tickui.ticks.topics import DEFAULT_TOPIC, MIN_INTERVAL_MS, WIRES

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    from typing import Any

    from tickui.common.kafka import KafkaAccess

ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}", re.ASCII)  # always fullmatch
TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}", re.ASCII)


def _kind(opt: Option) -> str:
    """How build converts the setting: a duration to its field's unit (ms or s), else
    int, bool, secret or str."""
    if opt.kind == "duration":
        return "ms" if str(opt.field).endswith("_ms") else "s"
    return opt.kind if opt.kind in ("int", "bool", "secret") else "str"


def _in_unit(opt: Option, text: str) -> float:
    """A duration default or bound in its field's unit."""
    return options.micros(text) / (1000 if _kind(opt) == "ms" else MICROS)


def _default(table: str, key: str) -> Any:
    """A setting's declared default as its TickerConfig field holds it."""
    opt = options.option(table, key)
    if opt.kind != "duration":
        return opt.default
    return int(_in_unit(opt, opt.default)) if _kind(opt) == "ms" else _in_unit(opt, opt.default)


@dataclass(slots=True)
class TickerConfig:
    """The merged ticker settings; defaults from tickui.common.options, and the three
    left empty here derived from others (topic from the wire, the ids from the host)."""

    interval_ms: int = _default("ticker", "interval")
    jitter_ms: int = _default("ticker", "jitter")
    breaker_threshold: int = _default("ticker", "breaker_threshold")
    breaker_reset_s: float = _default("ticker", "breaker_reset")
    publish_timeout_s: float = _default("ticker", "publish_timeout")
    scheduler_id: str = ""
    topic: str = ""  # empty: the wire's default topic
    wire: str = _default("kafka", "wire")
    persist_sequence: bool = _default("ticker", "persist_sequence")
    sequence_key: str = ""
    kafka_bootstrap: str | None = None
    valkey_url: str | None = None
    valkey_timeout_s: float = _default("valkey", "timeout")
    valkey_retries: int = _default("valkey", "retries")
    valkey_ssl_cafile: str | None = None
    valkey_password_file: str | None = None
    valkey_password: str | None = field(default=None, repr=False)  # TICKUI_VALKEY_PASSWORD
    origin: dict[str, str] = field(default_factory=dict, repr=False)  # field -> its source
    kafka_security_protocol: str = _default("kafka", "security_protocol")
    kafka_sasl_mechanism: str | None = None
    kafka_sasl_username: str | None = None
    kafka_sasl_password_file: str | None = None
    kafka_password: str | None = field(default=None, repr=False)  # TICKUI_KAFKA_PASSWORD
    kafka_ssl_cafile: str | None = None
    kafka_ssl_certfile: str | None = None
    kafka_ssl_keyfile: str | None = None

    def __post_init__(self) -> None:
        if not self.topic:
            self.topic = DEFAULT_TOPIC.get(self.wire, DEFAULT_TOPIC["bare"])
        if not self.scheduler_id:
            import os  # procs.host()'s name, without procs (signal, socket)

            host = os.environ.get("TICKUI_HOST") or os.uname().nodename
            self.scheduler_id = f"tickui-{host}"
        if not self.sequence_key:
            self.sequence_key = f"tickui:sequence:{self.scheduler_id}"


TABLES = ("ticker", "kafka", "valkey")
_READ = tuple(o for o in options.OPTIONS if o.table in TABLES and o.field)
# source key -> (field, kind); kinds: ms (duration in ms), s (duration in s), int, bool, str
FILE_KEYS: dict[str, dict[str, tuple[str, str]]] = {
    table: {str(o.key): (str(o.field), _kind(o)) for o in _READ if o.table == table and o.key}
    for table in TABLES
}
ENV_KEYS: dict[str, tuple[str, str]] = {
    o.env: (str(o.field), _kind(o)) for o in _READ if o.env is not None
}
# Kafka's connection settings (TLS, SASL) as flags of every command that talks to Kafka.
KAFKA_CONNECTION = tuple(o for o in options.kafka_connection() if o.flag)
KAFKA_FLAGS: dict[str, str] = {str(o.field): str(o.flag) for o in KAFKA_CONNECTION}


def _convert(value: Any, kind: str, name: str, from_text: bool) -> Any:
    if kind in ("ms", "s"):
        if isinstance(value, bool) or not isinstance(value, str):
            raise BadInput(name, f"{value!r} is not a duration such as '500ms'")
        micros = parse_duration(value, name)
        return micros / 1000 if kind == "ms" else micros / 1_000_000
    if kind == "int":
        if from_text and isinstance(value, str):
            return checks.number(value, name, -(10**9), 10**9, integer=True)
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadInput(name, f"{value!r} is not a whole number")
        return value
    if kind == "secret":  # never shown, not even in a complaint about it
        if not isinstance(value, str) or not value:
            raise BadInput(name, "is empty")
        hide(value)
        return value
    if kind == "bool":
        if from_text and isinstance(value, str):
            lowered = value.strip(" ").lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
        if not isinstance(value, bool):
            raise BadInput(name, f"{value!r} is not true or false")
        return value
    if not isinstance(value, str) or not value.strip():
        raise BadInput(name, f"{checks.shown(value)} is not a non-empty text")
    if not value.isprintable():
        raise BadInput(name, f"{checks.shown(value)} holds control characters")
    return value.strip()


def _check(cfg: TickerConfig, origin: dict[str, str]) -> None:
    def bad(field: str, message: str) -> BadInput:
        return BadInput(origin.get(field, field), message)

    def within(table: str, key: str, whole_ms: bool = False) -> None:
        """The setting's value within the bounds its option declares."""
        opt = options.option(table, key)
        low, high = opt.low, opt.high
        if opt.kind == "duration":
            low, high = _in_unit(opt, opt.low), _in_unit(opt, opt.high)
        field = str(opt.field)
        value = getattr(cfg, field)
        if (whole_ms and value != int(value)) or not low <= value <= high:
            unit = "a whole number of ms " if whole_ms else ""
            raise bad(field, f"must be {unit}from {opt.low} to {opt.high}")

    within("ticker", "interval", whole_ms=True)
    cfg.interval_ms = int(cfg.interval_ms)
    within("ticker", "jitter")
    if cfg.jitter_ms and cfg.jitter_ms >= cfg.interval_ms:
        raise bad("jitter_ms", "must be shorter than the tick interval")
    within("ticker", "breaker_threshold")
    within("ticker", "breaker_reset")
    within("ticker", "publish_timeout")
    within("valkey", "timeout")
    within("valkey", "retries")
    if not ID.fullmatch(cfg.scheduler_id):
        raise bad("scheduler_id", f"{checks.shown(cfg.scheduler_id)} is not a valid id")
    if cfg.wire not in WIRES:
        raise bad("wire", f"{checks.shown(cfg.wire)} is not a wire format (bare or envelope)")
    if cfg.kafka_bootstrap and cfg.interval_ms < MIN_INTERVAL_MS:
        raise bad(
            "interval_ms",
            f"{cfg.interval_ms} ms ticks cannot go to Kafka: ONEX consumers reject a "
            f"tick_interval_ms under {MIN_INTERVAL_MS} (local ticks without Kafka may be faster)",
        )
    if not TOPIC.fullmatch(cfg.topic):
        raise bad("topic", f"{checks.shown(cfg.topic)} is not a valid Kafka topic name")
    if not cfg.sequence_key or len(cfg.sequence_key) > 512 or not cfg.sequence_key.isprintable():
        raise bad("sequence_key", f"{checks.shown(cfg.sequence_key)} is not a valid key")
    if cfg.valkey_url:
        # valkey:// comes back as redis://, the form the client library reads
        cfg.valkey_url = checks.valkey_url(cfg.valkey_url, origin.get("valkey_url", "valkey_url"))
        password = urlsplit(cfg.valkey_url).password
        if password:
            hide(unquote(password))  # hidden even where no URL shape stands around it
    if cfg.kafka_bootstrap:
        checks.bootstrap(cfg.kafka_bootstrap, origin.get("kafka_bootstrap", "kafka_bootstrap"))
    cfg.kafka_security_protocol = cfg.kafka_security_protocol.upper()
    if cfg.kafka_security_protocol not in PROTOCOLS:
        raise bad("kafka_security_protocol", f"{checks.shown(cfg.kafka_security_protocol)}"
                  " is not one of " + ", ".join(PROTOCOLS))  # fmt: skip
    if cfg.kafka_sasl_mechanism is not None:
        cfg.kafka_sasl_mechanism = cfg.kafka_sasl_mechanism.upper()
        if cfg.kafka_sasl_mechanism not in MECHANISMS:
            raise bad("kafka_sasl_mechanism", f"{checks.shown(cfg.kafka_sasl_mechanism)}"
                      " is not one of " + ", ".join(MECHANISMS))  # fmt: skip
    for name in ("kafka_sasl_password_file", "kafka_ssl_cafile", "kafka_ssl_certfile",
                 "kafka_ssl_keyfile", "valkey_ssl_cafile", "valkey_password_file"):  # fmt: skip
        value = getattr(cfg, name)
        if value is not None:
            checks.path_text(value, origin.get(name, name))
    cfg.origin = origin


def kafka_access(cfg: TickerConfig) -> KafkaAccess | None:
    """The connection every Kafka client of this process uses; None without a bootstrap.
    The password comes from its file, else TICKUI_KAFKA_PASSWORD; bad input names the
    setting it came from."""
    if not cfg.kafka_bootstrap:
        return None
    from tickui.common.kafka import KafkaAccess, read_password  # not for the settings alone

    origin = cfg.origin

    def named(exc: BadInput) -> BadInput:
        key = f"kafka_{exc.field}"
        return BadInput(origin.get(key, f"kafka.{exc.field}"), exc.message)

    password = cfg.kafka_password
    if cfg.kafka_sasl_password_file:
        name = origin.get("kafka_sasl_password_file", "kafka.sasl_password_file")
        password = read_password(cfg.kafka_sasl_password_file, name)
    access = KafkaAccess(
        cfg.kafka_bootstrap,
        security_protocol=cfg.kafka_security_protocol,
        sasl_mechanism=cfg.kafka_sasl_mechanism,
        sasl_username=cfg.kafka_sasl_username,
        sasl_password=password,
        ssl_cafile=cfg.kafka_ssl_cafile,
        ssl_certfile=cfg.kafka_ssl_certfile,
        ssl_keyfile=cfg.kafka_ssl_keyfile,
    )
    try:
        access.check()
    except BadInput as exc:
        raise named(exc) from None
    return access


def valkey_password(cfg: TickerConfig) -> str | None:
    """The Valkey password: from its file, else TICKUI_VALKEY_PASSWORD (else the URL's)."""
    if cfg.valkey_password_file:
        from tickui.common.kafka import read_password

        name = cfg.origin.get("valkey_password_file", "valkey.password_file")
        return read_password(cfg.valkey_password_file, name)
    return cfg.valkey_password


def kafka_flags(args: Any) -> dict[str, tuple[Any, str]]:
    """The Kafka connection flags a parsed command line gave, for `build`."""
    return {str(o.field): (getattr(args, o.dest, None), str(o.flag)) for o in KAFKA_CONNECTION}


def ticker_flags(args: Any) -> dict[str, tuple[Any, str]]:
    """Every flag of [ticker], [kafka] and [valkey] a parsed command line gave (absent
    ones None), a duration in its field's unit, for `build`."""
    flags: dict[str, tuple[Any, str]] = {}
    for opt in _READ:
        if opt.flag is None:
            continue
        value = getattr(args, opt.dest, None)
        if value is not None and opt.kind == "duration":
            unit = 1000 if _kind(opt) == "ms" else MICROS
            value = parse_duration(value, opt.flag.lstrip("-")) / unit
        flags[str(opt.field)] = (value, opt.flag)
    return flags


def build(
    tables: dict[str, Any], env: dict[str, str], flags: dict[str, tuple[Any, str]] | None = None
) -> TickerConfig:
    """File tables, then environment, then flags, each overriding the one before.

    `flags` maps a field to (converted value or None, the flag's name for messages)."""
    flags = flags or {}
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for table, keys in FILE_KEYS.items():
        raw = tables.get(table, {})
        if not isinstance(raw, dict):
            raise BadInput(table, f"[{table}] must be a table")
        for key, value in raw.items():
            if key not in keys:
                raise BadInput(f"{table}.{key}", "unknown field")
            name, kind = keys[key]
            values[name] = _convert(value, kind, f"{table}.{key}", from_text=False)
            origin[name] = f"{table}.{key}"
    for var, (name, kind) in ENV_KEYS.items():
        if var in env:
            values[name] = _convert(env[var], kind, var, from_text=True)
            origin[name] = var
    for name, (value, flag) in flags.items():
        if value is not None:
            values[name] = value
            origin[name] = flag
    known = {f.name for f in fields(TickerConfig)}
    cfg = TickerConfig(**{k: v for k, v in values.items() if k in known})
    _check(cfg, origin)
    return cfg
