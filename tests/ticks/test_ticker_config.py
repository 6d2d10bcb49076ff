"""Ticker settings: ranges, where a bad value came from, and what overrides what."""

from __future__ import annotations

import json

import pytest

import services
from helpers import cli
from tickui.common.errors import BadInput
from tickui.ticks.config import build


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


# ---- range edges: the last good value and the first bad one ---------------------------------


@pytest.mark.parametrize(
    ("ticker", "check"),
    [
        ({"interval": "10ms"}, lambda c: c.interval_ms == 10),
        ({"interval": "60s"}, lambda c: c.interval_ms == 60_000),
        ({"interval": "1m"}, lambda c: c.interval_ms == 60_000),
        ({"interval": "250ms", "jitter": "0ms"}, lambda c: c.jitter_ms == 0),
        ({"interval": "250ms", "jitter": "249ms"}, lambda c: c.jitter_ms == 249),
        ({"interval": "60s", "jitter": "10s"}, lambda c: c.jitter_ms == 10_000),
        ({"breaker_threshold": 1}, lambda c: c.breaker_threshold == 1),
        ({"breaker_threshold": 100}, lambda c: c.breaker_threshold == 100),
        ({"breaker_reset": "1s"}, lambda c: c.breaker_reset_s == 1),
        ({"breaker_reset": "1h"}, lambda c: c.breaker_reset_s == 3600),
        ({"publish_timeout": "10ms"}, lambda c: c.publish_timeout_s == 0.01),
        ({"publish_timeout": "60s"}, lambda c: c.publish_timeout_s == 60),
        ({"scheduler_id": "node-1.a_b:c"}, lambda c: c.scheduler_id == "node-1.a_b:c"),
        ({"scheduler_id": "n1"}, lambda c: c.sequence_key == "tickui:sequence:n1"),
        ({"scheduler_id": "a" * 128}, lambda c: len(c.scheduler_id) == 128),
        ({"topic": "a" * 249}, lambda c: len(c.topic) == 249),
        ({"topic": "Ticks_v2.x-y"}, lambda c: c.topic == "Ticks_v2.x-y"),
        ({"persist_sequence": False}, lambda c: c.persist_sequence is False),
        ({"sequence_key": "my:key"}, lambda c: c.sequence_key == "my:key"),
    ],
)
def test_good_ticker_values_at_the_edges(ticker, check):
    assert check(build({"ticker": ticker}, {}))


@pytest.mark.parametrize(
    ("tables", "check"),
    [
        ({"valkey": {"timeout": "100ms"}}, lambda c: c.valkey_timeout_s == 0.1),
        ({"valkey": {"timeout": "60s"}}, lambda c: c.valkey_timeout_s == 60),
        ({"valkey": {"retries": 0}}, lambda c: c.valkey_retries == 0),
        ({"valkey": {"retries": 10}}, lambda c: c.valkey_retries == 10),
        ({"valkey": {"url": "redis://h:6379/0"}}, lambda c: c.valkey_url == "redis://h:6379/0"),
        ({"valkey": {"url": "rediss://u:p@h:1"}}, lambda c: c.valkey_url.startswith("rediss")),
        # valkey:// is redis:// to the client library (handed on unchanged it crashed the run)
        ({"valkey": {"url": "valkey://h"}}, lambda c: c.valkey_url == "redis://h"),
        ({"valkey": {"url": "unix:///tmp/r.sock"}}, lambda c: c.valkey_url.startswith("unix")),
        ({"kafka": {"bootstrap": "127.0.0.1:9092"}}, lambda c: c.kafka_bootstrap),
        ({"kafka": {"bootstrap": "a:1,b.example:2"}}, lambda c: c.kafka_bootstrap),
        ({"kafka": {"bootstrap": "[::1]:9092"}}, lambda c: c.kafka_bootstrap == "[::1]:9092"),
        ({"kafka": {"topic": "from.kafka"}}, lambda c: c.topic == "from.kafka"),
    ],
)
def test_good_valkey_and_kafka_values(tables, check):
    assert check(build(tables, {}))


@pytest.mark.parametrize(
    ("ticker", "field"),
    [
        ({"interval": "9ms"}, "ticker.interval"),
        ({"interval": "60001ms"}, "ticker.interval"),
        ({"interval": "0ms"}, "ticker.interval"),
        ({"interval": "10.5ms"}, "ticker.interval"),  # not a whole number of ms
        ({"interval": 1000}, "ticker.interval"),  # a number, not a duration text
        ({"interval": "1000"}, "ticker.interval"),  # no unit
        ({"interval": "250ms", "jitter": "250ms"}, "ticker.jitter"),  # equal to the interval
        ({"interval": "60s", "jitter": "10001ms"}, "ticker.jitter"),
        ({"breaker_threshold": "5"}, "ticker.breaker_threshold"),  # TOML text, not a number
        ({"breaker_threshold": True}, "ticker.breaker_threshold"),
        ({"breaker_threshold": 2.5}, "ticker.breaker_threshold"),
        ({"breaker_reset": "999ms"}, "ticker.breaker_reset"),
        ({"breaker_reset": "3601s"}, "ticker.breaker_reset"),
        ({"publish_timeout": "9ms"}, "ticker.publish_timeout"),
        ({"publish_timeout": "61s"}, "ticker.publish_timeout"),
        ({"scheduler_id": "a" * 129}, "ticker.scheduler_id"),
        ({"scheduler_id": "has space"}, "ticker.scheduler_id"),
        ({"scheduler_id": "bad/slash"}, "ticker.scheduler_id"),
        ({"scheduler_id": ""}, "ticker.scheduler_id"),
        ({"topic": "a" * 250}, "ticker.topic"),
        ({"topic": "ticks/all"}, "ticker.topic"),
        ({"topic": ""}, "ticker.topic"),
    ],
)
def test_bad_ticker_values_at_the_edges(ticker, field):
    with pytest.raises(BadInput) as caught:
        build({"ticker": ticker}, {})
    assert caught.value.field == field
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("tables", "field"),
    [
        ({"valkey": {"timeout": "99ms"}}, "valkey.timeout"),
        ({"valkey": {"timeout": "61s"}}, "valkey.timeout"),
        ({"valkey": {"retries": -1}}, "valkey.retries"),
        ({"valkey": {"url": "http://x"}}, "valkey.url"),
        ({"valkey": {"url": "localhost:6379"}}, "valkey.url"),
        ({"valkey": {"pasword": "x"}}, "valkey.pasword"),
        ({"kafka": {"bootstrap": "host:1, other:2"}}, "kafka.bootstrap"),
        ({"kafka": {"bootstrap": "a:1,"}}, "kafka.bootstrap"),
        ({"kafka": {"bootstrap": "kafka://h:1"}}, "kafka.bootstrap"),
        ({"kafka": {"topic": "no spaces"}}, "kafka.topic"),
        ({"kafka": {"acks": "all"}}, "kafka.acks"),
        ({"ticker": "1s"}, "ticker"),  # not a table
    ],
)
def test_bad_valkey_and_kafka_values(tables, field):
    with pytest.raises(BadInput) as caught:
        build(tables, {})
    assert caught.value.field == field


# ---- the environment -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("var", "value", "check"),
    [
        ("TICKUI_TICK_INTERVAL", "250ms", lambda c: c.interval_ms == 250),
        ("TICKUI_TICK_JITTER", "5ms", lambda c: c.jitter_ms == 5),
        ("TICKUI_BREAKER_THRESHOLD", " 7 ", lambda c: c.breaker_threshold == 7),
        ("TICKUI_BREAKER_RESET", "2m", lambda c: c.breaker_reset_s == 120),
        ("TICKUI_PUBLISH_TIMEOUT", "500ms", lambda c: c.publish_timeout_s == 0.5),
        ("TICKUI_SCHEDULER_ID", "node-7", lambda c: c.scheduler_id == "node-7"),
        ("TICKUI_TOPIC", "t.x", lambda c: c.topic == "t.x"),
        ("TICKUI_PERSIST_SEQUENCE", "off", lambda c: c.persist_sequence is False),
        ("TICKUI_PERSIST_SEQUENCE", "YES", lambda c: c.persist_sequence is True),
        ("TICKUI_SEQUENCE_KEY", "k:1", lambda c: c.sequence_key == "k:1"),
        ("TICKUI_KAFKA_BOOTSTRAP", "h:9092", lambda c: c.kafka_bootstrap == "h:9092"),
        ("TICKUI_VALKEY_URL", "redis://h:1", lambda c: c.valkey_url == "redis://h:1"),
        ("TICKUI_VALKEY_TIMEOUT", "2s", lambda c: c.valkey_timeout_s == 2),
        ("TICKUI_VALKEY_RETRIES", "3", lambda c: c.valkey_retries == 3),
    ],
)
def test_every_environment_variable_is_read(var, value, check):
    assert check(build({}, {var: value}))


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("TICKUI_TICK_INTERVAL", "9ms"),
        ("TICKUI_TICK_INTERVAL", "1000"),
        ("TICKUI_TICK_INTERVAL", ""),
        ("TICKUI_TICK_JITTER", "2s"),  # not below the default 1 s interval
        ("TICKUI_BREAKER_THRESHOLD", "101"),
        ("TICKUI_BREAKER_THRESHOLD", "3.5"),
        ("TICKUI_BREAKER_RESET", "0s"),
        ("TICKUI_PUBLISH_TIMEOUT", "2m"),
        ("TICKUI_SCHEDULER_ID", "white space"),
        ("TICKUI_TOPIC", "a/b"),
        ("TICKUI_SEQUENCE_KEY", "   "),
        ("TICKUI_KAFKA_BOOTSTRAP", "no spaces:1"),
        ("TICKUI_VALKEY_URL", "http://h"),
        ("TICKUI_VALKEY_TIMEOUT", "10ms"),
        ("TICKUI_VALKEY_RETRIES", "11"),
        ("TICKUI_VALKEY_RETRIES", "many"),
    ],
)
def test_an_invalid_environment_value_is_an_error_not_a_default(var, value):
    with pytest.raises(BadInput) as caught:
        build({}, {var: value})
    assert caught.value.field == var


def test_a_bad_environment_value_is_an_error_even_when_the_file_is_good():
    tables = {"ticker": {"breaker_threshold": 7}}
    with pytest.raises(BadInput) as caught:
        build(tables, {"TICKUI_BREAKER_THRESHOLD": "zero"})
    assert caught.value.field == "TICKUI_BREAKER_THRESHOLD"


def test_unrelated_environment_is_ignored():
    cfg = build({}, {"TICKUI_DB": "/x", "TICKUI_COLOUR": "red", "PATH": "/bin"})
    assert cfg.interval_ms == 1000


# ---- precedence and naming --------------------------------------------------------------------


def test_each_layer_overrides_the_one_below_field_by_field():
    tables = {
        "ticker": {"interval": "2s", "breaker_threshold": 9, "topic": "file.t"},
        "valkey": {"url": "redis://file:1", "retries": 2},
    }
    env = {"TICKUI_BREAKER_THRESHOLD": "8", "TICKUI_VALKEY_URL": "redis://env:1"}
    flags = {
        "valkey_url": ("redis://flag:1", "--valkey"),
        "kafka_bootstrap": (None, "--kafka"),  # a flag not given overrides nothing
        "topic": (None, "--topic"),
    }
    cfg = build(tables, env, flags)
    assert cfg.interval_ms == 2000  # file only
    assert cfg.breaker_threshold == 8  # env over file
    assert cfg.valkey_retries == 2  # file only
    assert cfg.valkey_url == "redis://flag:1"  # flag over env over file
    assert cfg.topic == "file.t"
    assert cfg.kafka_bootstrap is None


def test_a_good_override_rescues_a_bad_lower_value_only_after_range_checks():
    # the file's interval is in range on its own, the env one replaces it: no error
    cfg = build({"ticker": {"interval": "2s"}}, {"TICKUI_TICK_INTERVAL": "20ms"})
    assert cfg.interval_ms == 20
    # an out-of-range value is blamed on the layer it finally came from
    with pytest.raises(BadInput) as caught:
        build({"ticker": {"interval": "2s"}}, {"TICKUI_TICK_INTERVAL": "70s"})
    assert caught.value.field == "TICKUI_TICK_INTERVAL"


def test_jitter_is_checked_against_the_final_interval_and_blamed_on_jitter():
    with pytest.raises(BadInput) as caught:
        build({"ticker": {"jitter": "100ms"}}, {}, {"interval_ms": (50, "--tick-interval")})
    assert caught.value.field == "ticker.jitter"
    ok = build({"ticker": {"jitter": "100ms"}}, {}, {"interval_ms": (500, "--tick-interval")})
    assert (ok.interval_ms, ok.jitter_ms) == (500, 100)


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        ({"interval_ms": (60_001, "--tick-interval")}, "--tick-interval"),
        ({"interval_ms": (9.5, "--tick-interval")}, "--tick-interval"),
        ({"valkey_url": ("http://x", "--valkey")}, "--valkey"),
        ({"kafka_bootstrap": ("a b", "--kafka")}, "--kafka"),
        ({"topic": ("bad topic", "--topic")}, "--topic"),
    ],
)
def test_bad_flags_are_named_as_the_flag(flags, field):
    with pytest.raises(BadInput) as caught:
        build({"ticker": {"interval": "1s"}}, {"TICKUI_TOPIC": "ok.topic"}, flags)
    assert caught.value.field == field


# ---- the command line, as the README gives it ---------------------------------------------------


def _one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    assert result.stdout == ""
    return lines[0]


def test_cli_tick_interval_too_short(tmp_path):
    line = _one_line(cli("run", "--for", "1", "--tick-interval", "5ms", db=tmp_path / "t.db"))
    assert "tick-interval" in line
    assert not (tmp_path / "t.db").exists()


def test_cli_tick_interval_not_a_duration(tmp_path):
    line = _one_line(cli("run", "--for", "1", "--tick-interval", "fast", db=tmp_path / "t.db"))
    assert "tick-interval" in line


def test_cli_breaker_threshold_zero_in_env(tmp_path):
    result = cli(
        "run", "--for", "1", db=tmp_path / "t.db", cwd=tmp_path,
        env={"TICKUI_BREAKER_THRESHOLD": "0"},
    )  # fmt: skip
    line = _one_line(result)
    assert "TICKUI_BREAKER_THRESHOLD" in line


def test_cli_interval_in_file_names_file_line_and_field(tmp_path):
    (tmp_path / "tickui.toml").write_text('[ticker]\ninterval = "70s"\n')
    line = _one_line(cli("run", "--for", "1", db=tmp_path / "t.db", cwd=tmp_path))
    assert "tickui.toml" in line
    assert "line 2" in line
    assert "ticker.interval" in line
    assert not (tmp_path / "t.db").exists()  # nothing written


def test_cli_valkey_http_url_in_file(tmp_path):
    (tmp_path / "tickui.toml").write_text('[valkey]\nurl = "http://x"\n')
    line = _one_line(cli("run", "--for", "1", db=tmp_path / "t.db", cwd=tmp_path))
    assert "tickui.toml line 2" in line and "valkey.url" in line


def test_cli_unknown_key_in_kafka(tmp_path):
    (tmp_path / "tickui.toml").write_text('[kafka]\nbootstrap = "h:1"\nlinger = 5\n')
    line = _one_line(cli("run", "--for", "1", db=tmp_path / "t.db", cwd=tmp_path))
    assert "kafka.linger" in line and "line 3" in line


def test_cli_explicit_config_path_is_named(tmp_path):
    conf = tmp_path / "elsewhere.toml"
    conf.write_text('\n\n[ticker]\nbreaker_reset = "2h"\n')
    line = _one_line(cli("--config", str(conf), "run", "--for", "1", db=tmp_path / "t.db"))
    assert "elsewhere.toml line 4" in line and "ticker.breaker_reset" in line


def test_cli_good_settings_run_and_report_them(tmp_path):
    """The control for the cases above: valid settings from all three layers run."""
    (tmp_path / "tickui.toml").write_text('[ticker]\ninterval = "2s"\nbreaker_threshold = 9\n')
    result = cli(
        "run", "--for", "0.5", "--tick-interval", "50ms", db=tmp_path / "t.db", cwd=tmp_path,
        env={"TICKUI_BREAKER_THRESHOLD": "4"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    metrics = json.loads(result.stderr.strip().splitlines()[-1])["ticker"]
    assert metrics["interval_ms"] == 50  # flag over file
    assert metrics["breaker_threshold"] == 4  # env over file
    assert metrics["ticks_emitted"] >= 3


# ---- wire format, its default topic, and the 100 ms rule for Kafka ----------------


def test_wire_defaults_to_bare_and_the_topic_follows_the_wire():
    assert (build({}, {}).wire, build({}, {}).topic) == ("bare", "runtime.tick.v1")
    cfg = build({"kafka": {"wire": "envelope"}}, {})
    assert (cfg.wire, cfg.topic) == ("envelope", "onex.intent.platform.runtime-tick.v1")
    cfg = build({}, {"TICKUI_KAFKA_WIRE": "envelope"})
    assert cfg.topic == "onex.intent.platform.runtime-tick.v1"
    cfg = build({"kafka": {"wire": "envelope"}}, {}, {"wire": ("bare", "--wire")})
    assert (cfg.wire, cfg.topic) == ("bare", "runtime.tick.v1")  # flag over file


def test_a_given_topic_stays_whatever_the_wire():
    cfg = build({"kafka": {"wire": "envelope", "topic": "mine.ticks"}}, {})
    assert (cfg.wire, cfg.topic) == ("envelope", "mine.ticks")
    cfg = build({}, {"TICKUI_TOPIC": "env.ticks"}, {"wire": ("envelope", "--wire")})
    assert cfg.topic == "env.ticks"


@pytest.mark.parametrize(
    ("tables", "env", "field"),
    [
        ({"kafka": {"wire": "xml"}}, {}, "kafka.wire"),
        ({"kafka": {"wire": 1}}, {}, "kafka.wire"),
        ({}, {"TICKUI_KAFKA_WIRE": "Envelope2"}, "TICKUI_KAFKA_WIRE"),
    ],
)
def test_a_bad_wire_names_its_source(tables, env, field):
    with pytest.raises(BadInput) as caught:
        build(tables, env)
    assert caught.value.field == field


KAFKA = {"bootstrap": "h:1"}


@pytest.mark.parametrize(
    ("tables", "env", "flags", "field"),
    [
        ({"kafka": KAFKA, "ticker": {"interval": "50ms"}}, {}, {}, "ticker.interval"),
        ({"kafka": KAFKA}, {"TICKUI_TICK_INTERVAL": "99ms"}, {}, "TICKUI_TICK_INTERVAL"),
        ({}, {"TICKUI_KAFKA_BOOTSTRAP": "h:1"}, {"interval_ms": (10, "--tick")}, "--tick"),
    ],
)
def test_kafka_with_ticks_under_100ms_is_refused_naming_onex(tables, env, flags, field):
    with pytest.raises(BadInput) as caught:
        build(tables, env, flags)
    assert caught.value.field == field
    assert "ONEX consumers reject" in str(caught.value) and "100" in str(caught.value)


def test_100ms_to_kafka_and_faster_local_ticks_are_fine():
    assert build({"kafka": {"bootstrap": "h:1"}, "ticker": {"interval": "100ms"}}, {}).interval_ms
    assert build({"ticker": {"interval": "10ms"}}, {}).interval_ms == 10  # no Kafka


def test_cli_run_kafka_under_100ms_exits_2_with_one_line_before_anything(tmp_path):
    port = services.free_port()  # nothing listens: the refusal comes before any connection
    result = cli(
        "run", "--for", "1", "--kafka", f"127.0.0.1:{port}", "--tick-interval", "50ms",
        db=tmp_path / "t.db", cwd=tmp_path,
    )  # fmt: skip
    line = _one_line(result)
    assert "--tick-interval" in line and "ONEX consumers reject" in line
    assert not (tmp_path / "t.db").exists()


@pytest.mark.parametrize("command", ["run", "ticks"])
def test_cli_bad_wire_flag_exits_2_with_one_line(tmp_path, command):
    line = _one_line(cli(command, "--wire", "xml", db=tmp_path / "t.db", cwd=tmp_path))
    assert "--wire" in line
