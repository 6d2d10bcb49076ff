"""Settings from `tickui.toml`, environment variables and flags, in that order of strength.

A bad file is refused as a whole, with its line and field named; nothing is written.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from tickui.common import checks, options
from tickui.common.checks import MIB
from tickui.common.errors import BadInput
from tickui.common.options import Option, default
from tickui.common.timeutil import MICROS
from tickui.ticks.config import TickerConfig
from tickui.ticks.config import build as build_ticker

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    import tomllib
    from typing import Any

    from tickui.hooks.config import HookConfig
    from tickui.model.spec import TaskSpec

DEFAULT_CONFIG = Path("tickui.toml")
TABLES = (
    "engine",
    "store",
    "ticker",
    "kafka",
    "valkey",
    "task",
    "ui",
    "hook",
    "dispatch",
    "worker",
    "metrics",
    "serve",
)
DISPATCH_MODES = options.option("dispatch", "mode").choices
MAX_CONFIG_BYTES = 4 * MIB  # a config larger than this is a mistake, not a config
SECOND = MICROS
HOUR = 3600 * MICROS
DAY = 86400 * MICROS


class ConfigError(BadInput):
    """A problem in the config file, located by line where it can be."""


@dataclass(frozen=True)
class EngineSettings:
    """[engine]: durations in microseconds, sizes in bytes; defaults from the options."""

    misfire_grace: int = default("engine", "misfire_grace")
    lease_ttl: int = default("engine", "lease_ttl")
    stop_grace: int = default("engine", "stop_grace")
    keep: int = default("engine", "keep")
    log_head: int = default("engine", "log_head")  # bytes of a run's output kept from its start
    log_tail: int = default("engine", "log_tail")  # bytes kept from its end


@dataclass(frozen=True)
class UiSettings:
    """[ui]: how the dashboard tells the user things (its view choices are per user, in the
    config folder, not here)."""

    bell: bool = default("ui", "bell")  # ring the terminal bell when a run fails


@dataclass(frozen=True)
class DispatchSettings:
    """[dispatch]: where runs execute. `local`: child processes of the engine; `kafka`:
    `tickui worker` processes, through Kafka (the bootstrap is [kafka] bootstrap)."""

    mode: str = default("dispatch", "mode")
    # of tickui.runs.v1: how many workers can share the work
    partitions: int = default("dispatch", "partitions")
    # a command no worker started by then: DISPATCH_TIMEOUT
    start_timeout: int = default("dispatch", "start_timeout")
    # a worker silent for longer: lost, its runs failed
    worker_timeout: int = default("dispatch", "worker_timeout")
    group: str | None = None  # only heartbeats of this worker group count (None: any)
    key_file: Path | None = None  # signs and checks every dispatch message
    key_origin: str = "key_file"  # where key_file came from, for messages
    insecure: bool = default("dispatch", "insecure")  # no key: nothing signed, nothing checked

    def with_flags(self, key_file: str | None, insecure: bool) -> DispatchSettings:
        """--key-file and --insecure over the file's and the environment's."""
        changed = self
        if key_file:
            path = Path(key_file).expanduser()
            changed = dataclasses.replace(changed, key_file=path, key_origin="--key-file")
        if insecure:
            changed = dataclasses.replace(changed, insecure=True)
        return changed


@dataclass(frozen=True)
class WorkerSettings:
    """[worker]: what a `tickui worker` may run (empty: any program the engine sends), and
    how long its fetches wait at rest."""

    allow: tuple[str, ...] = default("worker", "allow")
    idle_poll: int = default("worker", "idle_poll")  # micros


@dataclass(frozen=True)
class MetricsSettings:
    """[metrics]: where Prometheus metrics are served (None: nowhere)."""

    listen: str | None = default("metrics", "listen")  # host:port


@dataclass(frozen=True)
class ServeSettings:
    """[serve]: where `tickui serve` shows the dashboard to browsers."""

    host: str = default("serve", "host")
    port: int = default("serve", "port")


def _checked(opt: Option, value: Any, name: str) -> Any:
    """One value of a table read through `opt`'s kind and bounds; BadInput names `name`."""
    if opt.kind == "duration":
        low, high = options.micros(opt.low), options.micros(opt.high)
        return checks.duration(value, name, low, high)
    if opt.kind == "size":
        return checks.size(value, name, options.size(opt.low), options.size(opt.high))
    if opt.kind == "int":
        return int(checks.number(value, name, opt.low, opt.high, integer=True))
    if opt.kind == "bool":
        if not isinstance(value, bool):
            raise BadInput(name, f"{checks.shown(value)} is not true or false")
        return value
    if opt.kind == "choice":
        if value not in opt.choices:
            raise BadInput(name, f"{checks.shown(value)} is not {' or '.join(opt.choices)}")
        return value
    if opt.kind == "path":
        return checks.path_text(value, name)
    if opt.kind == "address":
        return checks.listen_address(value, name)
    if opt.kind == "programs":
        if not isinstance(value, list) or not all(isinstance(a, str) and a.strip() for a in value):
            raise BadInput(name, "must be a list of program names or paths")
        return tuple(checks.path_text(a, name) for a in value)
    if not isinstance(value, str) or not value.strip():  # text: a name ([dispatch] group)
        raise BadInput(name, f"{checks.shown(value)} is not a {opt.key} name")
    return value


def _table(
    table: str, raw: dict[str, Any], env: dict[str, str], file_only: tuple[str, ...] = ()
) -> tuple[dict[str, Any], dict[str, str]]:
    """[table]'s values by key, each from the environment over the file over its default
    (a given one checked), and the name each came from, for messages. `file_only`: keys
    whose variable is read elsewhere; only the file's value is checked here."""
    known = options.in_table(table)
    for key in raw:
        if key not in {opt.key for opt in known}:
            raise BadInput(key, "unknown field")
    values: dict[str, Any] = {}
    names: dict[str, str] = {}
    for opt in known:
        assert opt.key is not None
        name = opt.key
        given = None if opt.key in file_only else options.env_value(opt, env)
        if given is not None:
            value, name = given
            value = _checked(opt, value, name)
        elif opt.key in raw:
            value = _checked(opt, raw[opt.key], name)
        else:
            value = options.value(opt, opt.default)
        values[opt.key], names[opt.key] = value, name
    return values, names


def worker_settings(raw: Any) -> WorkerSettings:
    if not isinstance(raw, dict):
        raise BadInput("worker", "must be a [worker] table")
    values, _ = _table("worker", raw, {})
    return WorkerSettings(**values)


def dispatch_settings(raw: Any, env: dict[str, str]) -> DispatchSettings:
    """[dispatch], then TICKUI_DISPATCH and TICKUI_KEY_FILE; each value within its bounds."""
    if not isinstance(raw, dict):
        raise BadInput("dispatch", "must be a [dispatch] table")
    values, names = _table("dispatch", raw, env)
    if values["key_file"] is not None:
        values["key_file"] = Path(values["key_file"]).expanduser()
    return DispatchSettings(**values, key_origin=names["key_file"])


def metrics_settings(raw: Any, env: dict[str, str]) -> MetricsSettings:
    """[metrics], then TICKUI_METRICS."""
    if not isinstance(raw, dict):
        raise BadInput("metrics", "must be a [metrics] table")
    values, _ = _table("metrics", raw, env)
    return MetricsSettings(**values)


def serve_settings(raw: Any) -> ServeSettings:
    """[serve] (its flags are merged by the command line)."""
    if not isinstance(raw, dict):
        raise BadInput("serve", "must be a [serve] table")
    values, _ = _table("serve", raw, {})
    values["host"] = checks.listen_host(values["host"], "host")
    return ServeSettings(**values)


@dataclass(frozen=True)
class Settings:
    """Everything tickui.toml, the environment and the defaults say, checked."""

    path: Path | None = None
    db: Path | None = None
    store: str | None = None  # [store] url: a postgresql:// URL, or a file's path (as given)
    engine: EngineSettings = field(default_factory=EngineSettings)
    raw: dict[str, Any] = field(default_factory=dict)
    tasks: list[TaskSpec] | None = None  # None: no file, so no sync
    ticker: TickerConfig = field(default_factory=TickerConfig)
    env: dict[str, str] = field(default_factory=dict)
    ui: UiSettings = field(default_factory=UiSettings)
    hooks: tuple[HookConfig, ...] = ()  # [[hook]] entries
    dispatch: DispatchSettings = field(default_factory=DispatchSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    serve: ServeSettings = field(default_factory=ServeSettings)


def _store(path: Path, text: str, raw: Any) -> str | None:
    """[store] url, checked; a file's path relative to the config file. The environment's
    TICKUI_STORE is read with the flags (tickui.cli), as TICKUI_DB is."""
    if not isinstance(raw, dict):
        raise ConfigError(str(path), "store must be a [store] table")
    try:
        values, _ = _table("store", raw, {}, file_only=("url",))
        url = values["url"] if raw.get("url") is None else checks.store_text(raw["url"], "url")
    except BadInput as exc:
        raise _fail(path, text, "store", 0, exc, "store.") from None
    if url is None or checks.is_store_url(url):
        return url
    return str(path.parent / Path(url).expanduser())


def default_db() -> Path:
    base = os.environ.get("XDG_DATA_HOME", "")
    if not os.path.isabs(base) or "\x00" in base:  # the XDG spec: ignore a relative one
        base = os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "tickui" / "tickui.db"


def _line_of(text: str, table: str, index: int, key: str | None) -> int | None:
    """Best-effort line number of `key` inside the `index`-th `[table]` / `[[table]]`."""
    header = re.compile(rf"^\s*\[\[?\s*{re.escape(table)}\s*\]\]?\s*(#.*)?$")
    any_header = re.compile(r"^\s*\[")
    seen, inside, header_line = -1, False, None
    for number, line in enumerate(text.splitlines(), 1):
        if header.match(line):
            seen += 1
            inside = seen == index
            if inside:
                header_line = number
            continue
        if any_header.match(line):
            inside = False
            continue
        if inside and key and re.match(rf"^\s*{re.escape(key)}\s*=", line):
            return number
    return header_line


def _fail(path: Path, text: str, table: str, index: int, exc: BadInput, prefix: str) -> ConfigError:
    key = exc.field.split(".")[-1] if exc.field else None
    line = _line_of(text, table, index, key)
    where = f"{path} line {line}" if line else str(path)
    return ConfigError(f"{where}: {prefix}{exc.field}", exc.message)


def _engine(raw: dict[str, Any], env: dict[str, str]) -> EngineSettings:
    """[engine], each value through the one checker with its bounds (db: its path is made
    by load, and TICKUI_DB is read by the command line, which alone needs the database)."""
    values, _ = _table("engine", raw, env, file_only=("db",))
    del values["db"]
    return EngineSettings(**values)


def _ui(path: Path, text: str, raw: Any) -> UiSettings:
    if not isinstance(raw, dict):
        raise ConfigError(str(path), "ui must be a [ui] table")
    known = {opt.key: opt for opt in options.in_table("ui")}
    for key, value in raw.items():
        try:
            if key not in known:
                raise BadInput(key, "unknown field")
            _checked(known[key], value, key)
        except BadInput as exc:
            raise _fail(path, text, "ui", 0, exc, "ui.") from None
    return UiSettings(**{key: raw.get(key, opt.default) for key, opt in known.items()})


def load(path: Path | None, now: int, env: dict[str, str] | None = None) -> Settings:
    """Read and validate the config file (or the default one when it exists)."""
    env = dict(os.environ) if env is None else env
    explicit = path is not None
    path = path or DEFAULT_CONFIG
    try:
        exists = path.exists()
    except OSError as exc:
        raise ConfigError("config", f"{path}: {exc.strerror}") from None
    if not exists:
        if explicit:
            raise ConfigError("config", f"{path} does not exist")
        return Settings(
            engine=_engine({}, env),
            ticker=build_ticker({}, env),
            env=env,
            dispatch=dispatch_settings({}, env),
            metrics=metrics_settings({}, env),
        )
    import tomllib  # read only when there is a file to read

    try:
        if not path.is_file():
            raise ConfigError("config", f"{path} is not a regular file")
        with open(path, "rb") as handle:
            data_bytes = handle.read(MAX_CONFIG_BYTES + 1)
        if len(data_bytes) > MAX_CONFIG_BYTES:
            raise ConfigError("config", f"{path} is larger than {MAX_CONFIG_BYTES // MIB} MiB")
        text = data_bytes.decode("utf-8")
        data = tomllib.loads(text)
    except UnicodeDecodeError:
        raise ConfigError("config", f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError("config", f"{path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise _toml_error(path, exc) from None
    except RecursionError:
        raise ConfigError("config", f"{path} is not valid TOML: nested too deeply") from None
    for key in data:
        if key not in TABLES:
            line = _line_of(text, key, 0, None)
            where = f"{path} line {line}" if line else str(path)
            raise ConfigError(where, f"unknown table or key {key!r}")
    engine_raw = data.get("engine", {})
    if not isinstance(engine_raw, dict):
        raise ConfigError(str(path), "engine must be an [engine] table")
    try:
        engine = _engine(engine_raw, env)
    except BadInput as exc:
        if exc.field.startswith("TICKUI_"):  # the environment's value, not the file's
            raise
        raise _fail(path, text, "engine", 0, exc, "engine.") from None
    tasks = _tasks(path, text, data.get("task", []), now)
    ui = _ui(path, text, data.get("ui", {}))
    hooks = _hooks(path, text, data.get("hook", []))
    try:
        dispatch = dispatch_settings(data.get("dispatch", {}), env)
    except BadInput as exc:
        if exc.field.startswith("TICKUI_") or exc.field == "dispatch":
            raise
        raise _fail(path, text, "dispatch", 0, exc, "dispatch.") from None
    if dispatch.key_file is not None and dispatch.key_origin == "key_file":
        dispatch = dataclasses.replace(dispatch, key_file=path.parent / dispatch.key_file)
    try:
        worker = worker_settings(data.get("worker", {}))
    except BadInput as exc:
        if exc.field == "worker":
            raise
        raise _fail(path, text, "worker", 0, exc, "worker.") from None
    try:
        metrics = metrics_settings(data.get("metrics", {}), env)
    except BadInput as exc:
        if exc.field.startswith("TICKUI_") or exc.field == "metrics":
            raise
        raise _fail(path, text, "metrics", 0, exc, "metrics.") from None
    try:
        serve = serve_settings(data.get("serve", {}))
    except BadInput as exc:
        if exc.field == "serve":
            raise
        raise _fail(path, text, "serve", 0, exc, "serve.") from None
    try:
        ticker = build_ticker(data, env)
    except BadInput as exc:
        table, _, key = exc.field.partition(".")
        if table in ("ticker", "kafka", "valkey") and key:
            line = _line_of(text, table, 0, key)
            where = f"{path} line {line}" if line else str(path)
            raise ConfigError(f"{where}: {exc.field}", exc.message) from None
        raise
    db = engine_raw.get("db")
    return Settings(
        path=path,
        db=(path.parent / db) if isinstance(db, str) else None,
        store=_store(path, text, data.get("store", {})),
        engine=engine,
        raw=data,
        tasks=tasks,
        ticker=ticker,
        env=env,
        ui=ui,
        hooks=hooks,
        dispatch=dispatch,
        worker=worker,
        metrics=metrics,
        serve=serve,
    )


def _toml_error(path: Path, exc: tomllib.TOMLDecodeError) -> ConfigError:
    text = str(exc)
    found = re.search(r"\s*\(at line (\d+), column \d+\)", text)
    if found:
        return ConfigError(f"{path} line {found[1]}", f"not valid TOML: {text[: found.start()]}")
    return ConfigError(str(path), f"not valid TOML: {text}")


def _tasks(path: Path, text: str, raw: Any, now: int) -> list[TaskSpec]:
    from tickui.model.spec import build_spec  # only a file with [[task]] entries needs it

    if not isinstance(raw, list):
        raise ConfigError(f"{path}", "task entries must be [[task]] tables")
    specs: list[TaskSpec] = []
    names: set[str] = set()
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise ConfigError(str(path), "task entries must be [[task]] tables")
        try:
            spec = build_spec(entry, now, allow_past=True)
        except BadInput as exc:
            raise _fail(path, text, "task", index, exc, f"task[{index + 1}].") from None
        if spec.name in names:
            dup = BadInput("name", f"task {spec.name!r} is declared twice")
            raise _fail(path, text, "task", index, dup, f"task[{index + 1}].")
        names.add(spec.name)
        specs.append(spec)
    return specs


def _hooks(path: Path, text: str, raw: Any) -> tuple[HookConfig, ...]:
    """[[hook]] entries, each checked whole (tickui.hooks.config); names are unique."""
    from tickui.hooks.config import parse_hook  # the hooks package: only with [[hook]] entries

    if not isinstance(raw, list):
        raise ConfigError(str(path), "hook entries must be [[hook]] tables")
    hooks: list[HookConfig] = []
    for index, entry in enumerate(raw):
        try:
            hook = parse_hook(entry, index)
            if any(h.name == hook.name for h in hooks):
                raise BadInput("name", f"hook {hook.name!r} is declared twice")
        except BadInput as exc:
            raise _fail(path, text, "hook", index, exc, f"hook[{index + 1}].") from None
        hooks.append(hook)
    return tuple(hooks)
