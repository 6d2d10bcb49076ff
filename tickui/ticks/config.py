"""The ticker's settings, from [ticker], [kafka] and [valkey], TICKUI_* variables and flags.

Each value is checked against its range; a bad one, from whichever source, is an
error naming where it came from, never a silent default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import unquote, urlsplit

from tickui.common import checks, procs
from tickui.common.errors import BadInput
from tickui.common.kafka import MECHANISMS, PROTOCOLS, KafkaAccess, read_password
from tickui.common.redact import hide
from tickui.common.timeutil import parse_duration
from tickui.ticks.wire import DEFAULT_TOPIC, MIN_INTERVAL_MS, WIRES

ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}", re.ASCII)  # always fullmatch
TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}", re.ASCII)


@dataclass(slots=True)
class TickerConfig:
    interval_ms: int = 1000
    jitter_ms: int = 0
    breaker_threshold: int = 5
    breaker_reset_s: float = 60.0
    publish_timeout_s: float = 1.0
    scheduler_id: str = ""
    topic: str = ""  # empty: the wire's default topic
    wire: str = "bare"
    persist_sequence: bool = True
    sequence_key: str = ""
    kafka_bootstrap: str | None = None
    valkey_url: str | None = None
    valkey_timeout_s: float = 1.0
    valkey_retries: int = 0
    valkey_ssl_cafile: str | None = None
    valkey_password_file: str | None = None
    valkey_password: str | None = field(default=None, repr=False)  # TICKUI_VALKEY_PASSWORD
    origin: dict[str, str] = field(default_factory=dict, repr=False)  # field -> its source
    kafka_security_protocol: str = "PLAINTEXT"
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
            self.scheduler_id = f"tickui-{procs.host()}"
        if not self.sequence_key:
            self.sequence_key = f"tickui:sequence:{self.scheduler_id}"


# source key -> (field, kind); kinds: ms (duration in ms), s (duration in s), int, bool, str
FILE_KEYS: dict[str, dict[str, tuple[str, str]]] = {
    "ticker": {
        "interval": ("interval_ms", "ms"),
        "jitter": ("jitter_ms", "ms"),
        "breaker_threshold": ("breaker_threshold", "int"),
        "breaker_reset": ("breaker_reset_s", "s"),
        "publish_timeout": ("publish_timeout_s", "s"),
        "scheduler_id": ("scheduler_id", "str"),
        "topic": ("topic", "str"),
        "persist_sequence": ("persist_sequence", "bool"),
        "sequence_key": ("sequence_key", "str"),
    },
    "kafka": {
        "bootstrap": ("kafka_bootstrap", "str"),
        "topic": ("topic", "str"),
        "wire": ("wire", "str"),
        "security_protocol": ("kafka_security_protocol", "str"),
        "sasl_mechanism": ("kafka_sasl_mechanism", "str"),
        "sasl_username": ("kafka_sasl_username", "str"),
        "sasl_password_file": ("kafka_sasl_password_file", "str"),
        "ssl_cafile": ("kafka_ssl_cafile", "str"),
        "ssl_certfile": ("kafka_ssl_certfile", "str"),
        "ssl_keyfile": ("kafka_ssl_keyfile", "str"),
    },
    "valkey": {
        "url": ("valkey_url", "str"),
        "timeout": ("valkey_timeout_s", "s"),
        "retries": ("valkey_retries", "int"),
        "ssl_cafile": ("valkey_ssl_cafile", "str"),
        "password_file": ("valkey_password_file", "str"),
    },
}
# Kafka's connection settings as flags of every command that talks to Kafka.
KAFKA_FLAGS: dict[str, str] = {
    "kafka_security_protocol": "--kafka-security-protocol",
    "kafka_sasl_mechanism": "--kafka-sasl-mechanism",
    "kafka_sasl_username": "--kafka-sasl-username",
    "kafka_sasl_password_file": "--kafka-sasl-password-file",
    "kafka_ssl_cafile": "--kafka-ssl-cafile",
    "kafka_ssl_certfile": "--kafka-ssl-certfile",
    "kafka_ssl_keyfile": "--kafka-ssl-keyfile",
}
ENV_KEYS: dict[str, tuple[str, str]] = {
    "TICKUI_TICK_INTERVAL": ("interval_ms", "ms"),
    "TICKUI_TICK_JITTER": ("jitter_ms", "ms"),
    "TICKUI_BREAKER_THRESHOLD": ("breaker_threshold", "int"),
    "TICKUI_BREAKER_RESET": ("breaker_reset_s", "s"),
    "TICKUI_PUBLISH_TIMEOUT": ("publish_timeout_s", "s"),
    "TICKUI_SCHEDULER_ID": ("scheduler_id", "str"),
    "TICKUI_TOPIC": ("topic", "str"),
    "TICKUI_PERSIST_SEQUENCE": ("persist_sequence", "bool"),
    "TICKUI_SEQUENCE_KEY": ("sequence_key", "str"),
    "TICKUI_KAFKA_BOOTSTRAP": ("kafka_bootstrap", "str"),
    "TICKUI_KAFKA_WIRE": ("wire", "str"),
    "TICKUI_VALKEY_URL": ("valkey_url", "str"),
    "TICKUI_VALKEY_TIMEOUT": ("valkey_timeout_s", "s"),
    "TICKUI_VALKEY_RETRIES": ("valkey_retries", "int"),
    "TICKUI_VALKEY_SSL_CAFILE": ("valkey_ssl_cafile", "str"),
    "TICKUI_VALKEY_PASSWORD_FILE": ("valkey_password_file", "str"),
    "TICKUI_VALKEY_PASSWORD": ("valkey_password", "secret"),
    "TICKUI_KAFKA_SECURITY_PROTOCOL": ("kafka_security_protocol", "str"),
    "TICKUI_KAFKA_SASL_MECHANISM": ("kafka_sasl_mechanism", "str"),
    "TICKUI_KAFKA_SASL_USERNAME": ("kafka_sasl_username", "str"),
    "TICKUI_KAFKA_SASL_PASSWORD_FILE": ("kafka_sasl_password_file", "str"),
    "TICKUI_KAFKA_PASSWORD": ("kafka_password", "secret"),
    "TICKUI_KAFKA_SSL_CAFILE": ("kafka_ssl_cafile", "str"),
    "TICKUI_KAFKA_SSL_CERTFILE": ("kafka_ssl_certfile", "str"),
    "TICKUI_KAFKA_SSL_KEYFILE": ("kafka_ssl_keyfile", "str"),
}


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

    if cfg.interval_ms != int(cfg.interval_ms) or not 10 <= cfg.interval_ms <= 60_000:
        raise bad("interval_ms", "must be a whole number of ms from 10ms to 60s")
    cfg.interval_ms = int(cfg.interval_ms)
    if not 0 <= cfg.jitter_ms <= 10_000:
        raise bad("jitter_ms", "must be from 0 to 10s")
    if cfg.jitter_ms and cfg.jitter_ms >= cfg.interval_ms:
        raise bad("jitter_ms", "must be shorter than the tick interval")
    if not 1 <= cfg.breaker_threshold <= 100:
        raise bad("breaker_threshold", "must be from 1 to 100")
    if not 1 <= cfg.breaker_reset_s <= 3600:
        raise bad("breaker_reset_s", "must be from 1s to 1h")
    if not 0.01 <= cfg.publish_timeout_s <= 60:
        raise bad("publish_timeout_s", "must be from 10ms to 60s")
    if not 0.1 <= cfg.valkey_timeout_s <= 60:
        raise bad("valkey_timeout_s", "must be from 100ms to 60s")
    if not 0 <= cfg.valkey_retries <= 10:
        raise bad("valkey_retries", "must be from 0 to 10")
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
        name = cfg.origin.get("valkey_password_file", "valkey.password_file")
        return read_password(cfg.valkey_password_file, name)
    return cfg.valkey_password


def kafka_flags(args: Any) -> dict[str, tuple[Any, str]]:
    """The Kafka connection flags a parsed command line gave, for `build`."""
    return {name: (getattr(args, name, None), flag) for name, flag in KAFKA_FLAGS.items()}


def add_kafka_arguments(parser: Any) -> None:
    """--kafka-security-protocol and the rest, on every command that talks to Kafka."""
    helps = {
        "kafka_security_protocol": ("PROTOCOL", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
        "kafka_sasl_mechanism": ("MECHANISM", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
        "kafka_sasl_username": ("USER", "the SASL user name"),
        "kafka_sasl_password_file": ("FILE", "the SASL password (or TICKUI_KAFKA_PASSWORD)"),
        "kafka_ssl_cafile": ("FILE", "CA certificates to trust (default: the system's)"),
        "kafka_ssl_certfile": ("FILE", "the client's certificate (mutual TLS)"),
        "kafka_ssl_keyfile": ("FILE", "the client certificate's key"),
    }
    for name, flag in KAFKA_FLAGS.items():
        metavar, text = helps[name]
        parser.add_argument(flag, dest=name, metavar=metavar, help=text)


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
