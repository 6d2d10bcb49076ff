"""Ticker settings: ranges, where a bad value came from, and what overrides what."""

from __future__ import annotations

import pytest

from helpers import cli
from tickui.errors import BadInput
from tickui.ticker_config import build


def test_defaults():
    cfg = build({}, {})
    assert cfg.interval_ms == 1000 and cfg.jitter_ms == 0
    assert cfg.breaker_threshold == 5 and cfg.breaker_reset_s == 60
    assert cfg.topic == "runtime.tick.v1" and cfg.persist_sequence is True
    assert cfg.scheduler_id.startswith("tickui-") and cfg.scheduler_id in cfg.sequence_key


def test_env_overrides_file_and_flags_override_env():
    tables = {"ticker": {"interval": "2s", "topic": "from.file"}}
    env = {"TICKUI_TICK_INTERVAL": "500ms", "TICKUI_TOPIC": "from.env"}
    cfg = build(tables, env, {"topic": ("from.flag", "--topic")})
    assert cfg.interval_ms == 500 and cfg.topic == "from.flag"
    assert build(tables, {}).interval_ms == 2000


@pytest.mark.parametrize(
    ("tables", "env", "field"),
    [
        ({"ticker": {"interval": "5ms"}}, {}, "ticker.interval"),
        ({"ticker": {"interval": "61s"}}, {}, "ticker.interval"),
        ({"ticker": {"interval": "1s", "jitter": "1s"}}, {}, "ticker.jitter"),
        ({"ticker": {"jitter": "11s", "interval": "60s"}}, {}, "ticker.jitter"),
        ({"ticker": {"breaker_threshold": 0}}, {}, "ticker.breaker_threshold"),
        ({"ticker": {"breaker_threshold": 101}}, {}, "ticker.breaker_threshold"),
        ({"ticker": {"breaker_reset": "2h"}}, {}, "ticker.breaker_reset"),
        ({"ticker": {"publish_timeout": "2m"}}, {}, "ticker.publish_timeout"),
        ({"ticker": {"topic": "bad topic"}}, {}, "ticker.topic"),
        ({"ticker": {"scheduler_id": "-x"}}, {}, "ticker.scheduler_id"),
        ({"ticker": {"persist_sequence": "yes"}}, {}, "ticker.persist_sequence"),
        ({"ticker": {"colour": "red"}}, {}, "ticker.colour"),
        ({"valkey": {"url": "http://h:1"}}, {}, "valkey.url"),
        ({"valkey": {"timeout": "50ms"}}, {}, "valkey.timeout"),
        ({"valkey": {"retries": 11}}, {}, "valkey.retries"),
        ({"kafka": {"bootstrap": "not a host"}}, {}, "kafka.bootstrap"),
        ({}, {"TICKUI_TICK_INTERVAL": "soon"}, "TICKUI_TICK_INTERVAL"),
        ({}, {"TICKUI_BREAKER_THRESHOLD": "0"}, "TICKUI_BREAKER_THRESHOLD"),
        ({}, {"TICKUI_BREAKER_THRESHOLD": "five"}, "TICKUI_BREAKER_THRESHOLD"),
        ({}, {"TICKUI_PERSIST_SEQUENCE": "maybe"}, "TICKUI_PERSIST_SEQUENCE"),
        ({}, {"TICKUI_VALKEY_RETRIES": "-1"}, "TICKUI_VALKEY_RETRIES"),
    ],
)
def test_bad_values_name_their_source(tables, env, field):
    with pytest.raises(BadInput) as caught:
        build(tables, env)
    assert caught.value.field == field
    assert "\n" not in str(caught.value)


def test_a_bad_flag_is_named_as_the_flag():
    with pytest.raises(BadInput) as caught:
        build({}, {}, {"interval_ms": (5, "--tick-interval")})
    assert caught.value.field == "--tick-interval"


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["run", "--for", "1", "--tick-interval", "5ms"], {}, "--tick-interval"),
        (["run", "--for", "1", "--valkey", "http://x"], {}, "--valkey"),
        (["run", "--for", "1"], {"TICKUI_BREAKER_THRESHOLD": "0"}, "TICKUI_BREAKER_THRESHOLD"),
        (["task", "list"], {"TICKUI_TICK_INTERVAL": "x"}, "TICKUI_TICK_INTERVAL"),
        (["ticks"], {}, "kafka"),
    ],
)
def test_bad_ticker_input_exits_2_with_one_line(tmp_path, args, env, named):
    result = cli(*args, db=tmp_path / "t.db", env=env, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert named in result.stderr


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('[ticker]\ninterval = "70s"\n', "line 2: ticker.interval"),
        ('[engine]\nkeep = 5\n\n[valkey]\nurl = "http://x"\n', "line 5: valkey.url"),
        ('[kafka]\nbootstrap = "127.0.0.1:1"\nacks = 1\n', "kafka.acks"),
    ],
)
def test_bad_ticker_tables_name_file_line_and_field(tmp_path, text, named):
    (tmp_path / "tickui.toml").write_text(text)
    result = cli("run", "--for", "1", db=tmp_path / "t.db", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert named in result.stderr and "tickui.toml" in result.stderr
    assert not (tmp_path / "t.db").exists()
