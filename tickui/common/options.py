"""Every setting of tickui, declared once: its tickui.toml table and key, its environment
variable, its flag, its kind, default, bounds and help.

The readers of tickui.toml and of the environment (tickui.runtime.settings,
tickui.ticks.config), the command line's flags and README's table of settings are all made
from this list, so a setting cannot be documented with one default and read with another.
It is data, with the few functions that turn it into defaults, flags and README's table,
and sits in `common` so that every layer (ticks and hooks too) may read it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from tickui.common import checks
from tickui.common.timeutil import MICROS, parse_duration

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    from typing import Any

# Kafka's security protocols and SASL mechanisms: the choices of two settings below, and
# what tickui.common.kafka checks a connection against.
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
ENTRIES = ("hook",)  # tables written as [[table]], one per entry
# Kinds: duration and size are texts in tickui.toml ("30s", "64KiB"); int, bool; text and
# path are non-empty texts; choice is one of `choices`; secret is never shown; programs is
# a list of program names or paths; address is where a server listens (host:port).
KINDS = (
    "duration",
    "size",
    "int",
    "bool",
    "text",
    "path",
    "choice",
    "secret",
    "programs",
    "address",
)


@dataclass(frozen=True)
class Option:
    """One setting. `default`, `low` and `high` are as written in tickui.toml (None: no
    default, or one that depends on something else, said by `shown_default`)."""

    table: str  # the tickui.toml table
    key: str | None  # its key there; None: set only by the environment
    kind: str
    help: str
    default: Any = None
    low: Any = None
    high: Any = None
    env: str | None = None
    flag: str | None = None
    choices: tuple[str, ...] = ()
    field: str | None = None  # the TickerConfig field of a [ticker], [kafka], [valkey] one
    metavar: str | None = None
    flag_check: Callable[[Any, str], Any] | None = None  # the flag's value checked on parse
    blank_env_unset: bool = False  # an empty variable counts as not set
    shown_default: str | None = None  # README's default when `default` cannot say it

    @property
    def dest(self) -> str:
        """The flag's attribute in a parsed command line."""
        assert self.flag
        return self.flag.lstrip("-").replace("-", "_")


def _duration(table: str, key: str, help: str, default: str, low: str, high: str, **more: Any):
    return Option(table, key, "duration", help, default, low, high, **more)


OPTIONS: tuple[Option, ...] = (
    Option(
        "engine", "db", "path", "database file (env TICKUI_DB)",
        env="TICKUI_DB", flag="--db", flag_check=checks.path_text,
        shown_default="`$XDG_DATA_HOME/tickui/tickui.db`; in tickui.toml relative to the file",
    ),
    Option(
        "store", "url", "text",
        "the store: a postgresql:// URL (its password from the URL, PGPASSWORD or ~/.pgpass,"
        " never shown) or a SQLite file's path; over --db and [engine] db (env TICKUI_STORE)",
        env="TICKUI_STORE", flag="--store", flag_check=checks.store_text, metavar="URL",
        shown_default="none: the SQLite file --db names",
    ),
    Option(
        "store", None, "int",
        "a PostgreSQL store's connections for reads at once (besides its writer's and its"
        " listener's), opened as reads need them",
        2, 1, 16, env="TICKUI_PG_POOL",
    ),
    Option(
        "engine", None, "text",
        "the host an engine or worker says it runs on, in the lease, its runs and the"
        " workers table (tests play several hosts on one machine with it)",
        env="TICKUI_HOST", shown_default="the machine's host name",
    ),
    _duration(
        "engine", "misfire_grace", "how late a slot may start and still run", "5s", "0", "1d",
        env="TICKUI_MISFIRE_GRACE",
    ),
    _duration("engine", "lease_ttl", "how long the engine's lease lasts unrenewed", "30s",
              "1s", "1h"),
    _duration(
        "engine", "stop_grace",
        "at stop, how long running jobs get before they are cancelled (default 10s)",
        "10s", "0", "1h", flag="--stop-grace", metavar="DURATION",
    ),
    Option("engine", "keep", "int", "occurrences kept per task", 1000, 1, 1_000_000),
    Option("engine", "log_head", "size", "of each run's output, the first part kept",
           "64KiB", "0", "64MiB"),
    Option("engine", "log_tail", "size", "and the newest part kept", "1MiB", "1KiB", "1GiB"),
    _duration(
        "ticker", "interval", "time between ticks (default 1s; 100ms or more with Kafka)",
        "1s", "10ms", "60s", env="TICKUI_TICK_INTERVAL", flag="--tick-interval",
        field="interval_ms", metavar="DURATION",
    ),
    _duration("ticker", "jitter", "ticks up to this late, below the interval", "0ms", "0",
              "10s", env="TICKUI_TICK_JITTER", field="jitter_ms"),
    Option(
        "ticker", "breaker_threshold", "int", "failed publishes in a row that open the breaker",
        5, 1, 100, env="TICKUI_BREAKER_THRESHOLD", field="breaker_threshold",
    ),
    _duration("ticker", "breaker_reset", "how long an open breaker fails fast", "60s", "1s",
              "1h", env="TICKUI_BREAKER_RESET", field="breaker_reset_s"),
    _duration("ticker", "publish_timeout", "per publish", "1s", "10ms", "60s",
              env="TICKUI_PUBLISH_TIMEOUT", field="publish_timeout_s"),
    Option(
        "ticker", "scheduler_id", "text", "the ticks' scheduler id (their Kafka key)",
        env="TICKUI_SCHEDULER_ID", field="scheduler_id", shown_default="`tickui-<hostname>`",
    ),
    Option(
        "ticker", "topic", "text", "tick topic (default: the wire's)",
        env="TICKUI_TOPIC", flag="--topic", field="topic", metavar="NAME",
        shown_default="the wire's",
    ),
    Option(
        "ticker", "persist_sequence", "bool", "keep tick sequence numbers across restarts",
        True, env="TICKUI_PERSIST_SEQUENCE", field="persist_sequence",
    ),
    Option(
        "ticker", "sequence_key", "text", "where the sequence numbers are kept",
        env="TICKUI_SEQUENCE_KEY", field="sequence_key",
        shown_default="`tickui:sequence:<scheduler id>`",
    ),
    Option(
        "kafka", "bootstrap", "text", "publish ticks (and runs) to Kafka",
        env="TICKUI_KAFKA_BOOTSTRAP", flag="--kafka", field="kafka_bootstrap",
        metavar="BOOTSTRAP", flag_check=checks.bootstrap, shown_default="none: no Kafka",
    ),
    Option("kafka", "topic", "text", "as [ticker] topic", field="topic",
           shown_default="the wire's"),
    Option(
        "kafka", "wire", "choice", "tick format on Kafka (bare: the seed's)", "bare",
        env="TICKUI_KAFKA_WIRE", flag="--wire", field="wire", choices=("bare", "envelope"),
    ),
    Option(
        "valkey", "url", "text", "keep tick sequence numbers in Valkey",
        env="TICKUI_VALKEY_URL", flag="--valkey", field="valkey_url", metavar="URL",
        flag_check=checks.valkey_url, shown_default="none: the database",
    ),
    _duration("valkey", "timeout", "per Valkey call", "1s", "100ms", "60s",
              env="TICKUI_VALKEY_TIMEOUT", field="valkey_timeout_s"),
    Option("valkey", "retries", "int", "retries of a failed Valkey call", 0, 0, 10,
           env="TICKUI_VALKEY_RETRIES", field="valkey_retries"),
    Option("valkey", "ssl_cafile", "path", "CA certificates for rediss:// URLs",
           env="TICKUI_VALKEY_SSL_CAFILE", field="valkey_ssl_cafile"),
    Option("valkey", "password_file", "path", "an ACL user's password (first line)",
           env="TICKUI_VALKEY_PASSWORD_FILE", field="valkey_password_file"),
    Option("valkey", None, "secret", "the password itself, without a file",
           env="TICKUI_VALKEY_PASSWORD", field="valkey_password"),
    Option(
        "kafka", "security_protocol", "text", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
        "PLAINTEXT", env="TICKUI_KAFKA_SECURITY_PROTOCOL", flag="--kafka-security-protocol",
        field="kafka_security_protocol", choices=PROTOCOLS, metavar="PROTOCOL",
    ),
    Option(
        "kafka", "sasl_mechanism", "text", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
        env="TICKUI_KAFKA_SASL_MECHANISM", flag="--kafka-sasl-mechanism",
        field="kafka_sasl_mechanism", choices=MECHANISMS, metavar="MECHANISM",
    ),
    Option(
        "kafka", "sasl_username", "text", "the SASL user name",
        env="TICKUI_KAFKA_SASL_USERNAME", flag="--kafka-sasl-username",
        field="kafka_sasl_username", metavar="USER",
    ),
    Option(
        "kafka", "sasl_password_file", "path", "the SASL password (or TICKUI_KAFKA_PASSWORD)",
        env="TICKUI_KAFKA_SASL_PASSWORD_FILE", flag="--kafka-sasl-password-file",
        field="kafka_sasl_password_file", metavar="FILE",
    ),
    Option("kafka", None, "secret", "the SASL password itself, without a file",
           env="TICKUI_KAFKA_PASSWORD", field="kafka_password"),
    Option(
        "kafka", "ssl_cafile", "path", "CA certificates to trust (default: the system's)",
        env="TICKUI_KAFKA_SSL_CAFILE", flag="--kafka-ssl-cafile", field="kafka_ssl_cafile",
        metavar="FILE",
    ),
    Option(
        "kafka", "ssl_certfile", "path", "the client's certificate (mutual TLS)",
        env="TICKUI_KAFKA_SSL_CERTFILE", flag="--kafka-ssl-certfile",
        field="kafka_ssl_certfile", metavar="FILE",
    ),
    Option(
        "kafka", "ssl_keyfile", "path", "the client certificate's key",
        env="TICKUI_KAFKA_SSL_KEYFILE", flag="--kafka-ssl-keyfile", field="kafka_ssl_keyfile",
        metavar="FILE",
    ),
    Option("ui", "bell", "bool", "ring the terminal bell when a run fails (the dashboard)",
           False),
    Option(
        "dispatch", "mode", "choice",
        "where runs execute: here (local) or on tickui workers (kafka)", "local",
        env="TICKUI_DISPATCH", flag="--dispatch", choices=("local", "kafka"),
        blank_env_unset=True,
    ),
    Option("dispatch", "group", "text", "only this worker group's heartbeats count",
           shown_default="any group"),
    Option(
        "dispatch", "key_file", "path",
        "sign dispatch messages with this key ([dispatch] key_file, TICKUI_KEY_FILE)",
        env="TICKUI_KEY_FILE", flag="--key-file", metavar="PATH", flag_check=checks.path_text,
        blank_env_unset=True, shown_default="none; in tickui.toml relative to the file",
    ),
    Option(
        "dispatch", "insecure", "bool",
        "dispatch to workers unsigned (anyone who can write to the topics runs commands)",
        False, flag="--insecure",
    ),
    Option("dispatch", "partitions", "int",
           "of tickui.runs.v1 when the engine creates it", 12, 1, 1000),
    _duration("dispatch", "start_timeout",
              "a run no worker started by then fails DISPATCH_TIMEOUT", "30s", "1s", "1h"),
    _duration("dispatch", "worker_timeout",
              "a worker silent this long is lost: its runs fail WORKER_LOST", "10s", "1s", "1h"),
    Option("hook", "format", "choice", "what a url hook posts: its JSON, or a Slack message",
           "json", choices=("json", "slack")),
    _duration("hook", "timeout", "per delivery attempt", "5s", "100ms", "60s"),
    Option(
        "metrics", "listen", "address",
        "serve Prometheus metrics at http://HOST:PORT/metrics (no auth: keep it on loopback)",
        env="TICKUI_METRICS", flag="--metrics", metavar="HOST:PORT",
        flag_check=checks.listen_address, blank_env_unset=True, shown_default="none: off",
    ),
    Option(
        "serve", "host", "text",
        "where tickui serve shows the dashboard to browsers; an address not on loopback"
        " needs --public (there is no login)",
        "127.0.0.1", flag="--host", metavar="HOST", flag_check=checks.listen_host,
    ),
    Option("serve", "port", "int", "and its port", 8000, 1, 65535, flag="--port",
           metavar="PORT"),
    Option(
        "worker", "allow", "programs",
        "run only these programs (repeatable; [worker] allow); others fail DISPATCH_FAILED",
        (), flag="--allow", metavar="PROGRAM", flag_check=checks.path_text,
        shown_default="any program",
    ),
    _duration(
        "worker", "idle_poll",
        "how long a resting worker's fetches wait; it polls every 10ms from shortly before a"
        " run the engine said is due, while it runs and just after (a run-now waits up to this)",
        "250ms", "10ms", "1s", flag="--idle-poll", metavar="DURATION",
    ),
)  # fmt: skip


def option(table: str, key: str) -> Option:
    """The setting `key` of [table]."""
    for found in OPTIONS:
        if found.table == table and found.key == key:
            return found
    raise KeyError(f"{table}.{key}")


def by_env(name: str) -> Option:
    """The setting read from the environment variable `name`."""
    for found in OPTIONS:
        if found.env == name:
            return found
    raise KeyError(name)


def in_table(table: str) -> tuple[Option, ...]:
    """[table]'s settings that tickui.toml may hold, in declaration order."""
    return tuple(o for o in OPTIONS if o.table == table and o.key is not None)


def kafka_connection() -> tuple[Option, ...]:
    """How every Kafka client connects (TLS, SASL): [kafka] but its bootstrap, topic, wire."""
    return tuple(
        o for o in OPTIONS if o.table == "kafka" and o.key not in ("bootstrap", "topic", "wire")
    )


def add_kafka_arguments(parser: Any) -> None:
    """--kafka-security-protocol and the rest, on every command that talks to Kafka."""
    for opt in kafka_connection():
        if opt.flag:
            add_argument(parser, opt)


def micros(text: str) -> int:
    """A duration bound or default as microseconds ("0" is zero)."""
    return 0 if text == "0" else parse_duration(text, "duration")


def size(text: str) -> int:
    """A size bound or default as bytes."""
    return checks.size(text, "size", 0, 2**62)


def value(opt: Option, text: Any) -> Any:
    """A default or bound of `opt` as the reader holds it: microseconds, bytes or itself."""
    if opt.kind == "duration":
        return micros(text)
    if opt.kind == "size":
        return size(text)
    return text


def default(table: str, key: str) -> Any:
    """The default of [table] key, as its reader holds it (durations in microseconds)."""
    opt = option(table, key)
    return value(opt, opt.default)


def seconds(table: str, key: str) -> float:
    """A duration setting's default in seconds."""
    return default(table, key) / MICROS


def env_value(opt: Option, env: dict[str, str]) -> tuple[Any, str] | None:
    """The environment's value of `opt` and the variable's name, or None when unset."""
    if opt.env is None or opt.env not in env:
        return None
    if opt.blank_env_unset and not env[opt.env]:
        return None
    return env[opt.env], opt.env


def add_argument(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    opt: Option,
    *,
    help: str | None = None,
    suppress: bool = False,
) -> None:
    """`opt`'s flag on `parser`, with its help (or a command's own wording of it).

    suppress: absent from the namespace unless given, for a flag that a later merge
    reads with getattr (the top-level parser's and a subcommand's may both declare it)."""
    assert opt.flag
    said: dict[str, Any] = {"dest": opt.dest, "help": help or opt.help}
    if suppress:
        said["default"] = argparse.SUPPRESS
    if opt.kind == "bool":
        parser.add_argument(opt.flag, action="store_true", **said)
        return
    if opt.kind == "choice":
        said.update(choices=opt.choices, metavar="|".join(opt.choices))
    else:
        said["metavar"] = opt.metavar
    if opt.kind == "programs":
        said["action"] = "append"
    if opt.kind == "duration":
        said["type"] = checks.arg_duration(opt.flag, micros(opt.low), micros(opt.high))
    elif opt.kind == "int":
        said["type"] = checks.arg_number(opt.flag, opt.low, opt.high, integer=True)
    elif opt.flag_check is not None:
        said["type"] = checks.arg(opt.flag_check, opt.flag)
    parser.add_argument(opt.flag, **said)


def _shown_default(opt: Option) -> str:
    if opt.shown_default is not None:
        return opt.shown_default
    if opt.default is None:
        return "none"
    if isinstance(opt.default, bool):
        return f"`{str(opt.default).lower()}`"
    if isinstance(opt.default, str):
        return f'`"{opt.default}"`'
    return f"`{opt.default}`"


def _shown_range(opt: Option) -> str:
    if opt.choices:
        return ", ".join(opt.choices)
    if opt.low is None:
        return ""
    return f"{opt.low} to {opt.high}"


def readme_table(shown: tuple[Option, ...] = OPTIONS) -> str:
    """README's table of settings (between its settings markers): one row a setting, the
    settings of a table together."""
    rows = [
        "| setting | default | range | environment | flag | what it is |",
        "|---|---|---|---|---|---|",
    ]
    tables = list(dict.fromkeys(o.table for o in shown))
    for opt in sorted(shown, key=lambda o: tables.index(o.table)):
        table = f"[[{opt.table}]]" if opt.table in ENTRIES else f"[{opt.table}]"
        where = f"`{table}` `{opt.key}`" if opt.key else "(environment only)"
        env = f"`{opt.env}`" if opt.env else ""
        flag = f"`{opt.flag}`" if opt.flag else ""
        said = opt.help.replace("|", "or")
        rows.append(
            f"| {where} | {_shown_default(opt)} | {_shown_range(opt)} | {env} | {flag} | {said} |"
        )
    return "\n".join(rows) + "\n"
