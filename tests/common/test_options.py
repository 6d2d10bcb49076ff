"""One declaration per setting: README's table, the readers' defaults and the engine's
agree with tickui.common.options."""

from __future__ import annotations

import re
from pathlib import Path

from tickui.common.options import (
    OPTIONS,
    default,
    kafka_connection,
    option,
    readme_table,
    seconds,
)
from tickui.engine import EngineConfig
from tickui.runtime.settings import DISPATCH_MODES, DispatchSettings, EngineSettings, UiSettings
from tickui.ticks.wire import WIRES

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_block(name: str) -> str:
    text = README.read_text()
    block = re.search(rf"<!-- {name}:start[^\n]*-->\n(.*?)<!-- {name}:end -->", text, re.S)
    assert block is not None, f"README lost its {name} table markers"
    return block.group(1)


def test_readme_settings_table_is_the_options():
    assert _readme_block("settings") == readme_table(), "README's table is stale: readme_table()"


def test_readme_kafka_connection_table_is_the_options():
    said = "README's Kafka table is stale: readme_table(kafka_connection())"
    assert _readme_block("kafka-settings") == readme_table(kafka_connection()), said


def test_each_setting_is_declared_once():
    keys = [(o.table, o.key) for o in OPTIONS if o.key]
    envs = [o.env for o in OPTIONS if o.env]
    flags = [o.flag for o in OPTIONS if o.flag]
    for found in (keys, envs, flags):
        assert len(found) == len(set(found))


def test_engine_defaults_are_the_options():
    engine, settings = EngineConfig(), EngineSettings()
    assert settings.misfire_grace == engine.misfire_grace == default("engine", "misfire_grace")
    assert settings.lease_ttl == engine.lease_ttl == 30_000_000
    assert settings.stop_grace == 10_000_000 and engine.stop_grace == 10.0
    assert engine.stop_grace == seconds("engine", "stop_grace")
    assert settings.keep == engine.keep == 1000
    assert (settings.log_head, settings.log_tail) == (64 * 1024, 1024 * 1024)


def test_dispatch_and_ui_defaults_are_the_options():
    dispatch = DispatchSettings()
    assert (dispatch.mode, dispatch.partitions) == ("local", 12)
    assert (dispatch.start_timeout, dispatch.worker_timeout) == (30_000_000, 10_000_000)
    assert DISPATCH_MODES == ("local", "kafka")
    assert UiSettings().bell is False


def test_choices_are_the_readers():
    assert option("kafka", "wire").choices == WIRES


def test_ticker_defaults_are_the_options():
    from tickui.ticks.config import TickerConfig

    cfg = TickerConfig(scheduler_id="a")
    assert (cfg.interval_ms, cfg.jitter_ms, cfg.breaker_threshold) == (1000, 0, 5)
    assert (cfg.breaker_reset_s, cfg.publish_timeout_s) == (60.0, 1.0)
    assert (cfg.valkey_timeout_s, cfg.valkey_retries) == (1.0, 0)
    assert (cfg.wire, cfg.persist_sequence, cfg.kafka_security_protocol) == (
        "bare",
        True,
        "PLAINTEXT",
    )


def test_every_flag_of_a_setting_is_on_a_command():
    """A setting's flag is declared by the options and reaches the command line."""
    from tickui.cli.main import build_parser

    seen: set[str] = set()

    def walk(parser) -> None:
        for action in parser._actions:
            seen.update(action.option_strings)
            for sub in getattr(action, "choices", None) or {}:
                if isinstance(action.choices, dict):
                    walk(action.choices[sub])

    walk(build_parser())
    assert {o.flag for o in OPTIONS if o.flag} <= seen


def test_every_option_is_of_a_known_kind_with_sound_bounds():
    from tickui.common.options import KINDS, value

    for opt in OPTIONS:
        assert opt.kind in KINDS, opt
        if opt.low is not None:
            assert value(opt, opt.low) <= value(opt, opt.default) <= value(opt, opt.high), opt
        if opt.choices and opt.default is not None:
            assert opt.default in opt.choices, opt


def test_readme_example_config_loads_with_the_defaults(tmp_path):
    """README's tickui.toml example is a valid file whose values are the defaults."""
    from tickui.runtime.settings import load

    text = README.read_text()
    example = text[text.index("An example (the values") :]
    config = tmp_path / "tickui.toml"
    config.write_text(example.split("```toml\n", 1)[1].split("```", 1)[0])
    settings = load(config, 0, {})
    assert settings.engine == EngineSettings() and settings.ui == UiSettings()
    ticker = settings.ticker
    assert (ticker.interval_ms, ticker.jitter_ms, ticker.breaker_reset_s) == (1000, 0, 60.0)
    assert (ticker.valkey_timeout_s, ticker.valkey_retries, ticker.wire) == (1.0, 0, "bare")
