"""One redaction wherever text leaves tickui, and control characters never reach a
terminal raw: real `tickui` processes, every output of a task that carries secrets."""

from __future__ import annotations

import json
import logging

import pytest

from helpers import cli
from tickui.common.logfilter import RedactingFilter
from tickui.common.redact import (
    hide,
    printable,
    redact,
    redact_data,
    safe_text,
    secret_markers,
)

# (text holding a secret, the secret) for every form the issue names, and a few more.
FORMS = [
    ("redis://user:ab@pw1@host/0", "ab@pw1"),
    ("redis://:p/w2@host:6379", "p/w2"),
    ("redis://user:p/w@x3@host:6379/0", "p/w@x3"),
    ("rediss://:only4@host", "only4"),
    ("user:hunter5@broker:9092", "hunter5"),
    ("--kafka user:hunter6@broker:9092,other:9092", "hunter6"),
    ("postgres://me:s3cr3t7@db.example.com/x", "s3cr3t7"),
    ("password=sw0rd8", "sw0rd8"),
    ("DB_PASSWORD=sw0rd9 other", "sw0rd9"),
    ("token: tok10", "tok10"),
    ("Authorization: Bearer abcdef1234511", "abcdef1234511"),
    ("mysql --password sw0rd12 -h db", "sw0rd12"),
    ("'redis://a:one13@h', 'redis://b:two14@h'", "one13"),
    ("'redis://a:one13@h', 'redis://b:two14@h'", "two14"),
    # *_KEY= pairs (README) and the other short names as a whole part of a name
    ("STRIPE_KEY=sk15", "sk15"),
    ("x-api-key=k16", "k16"),
    ("X-Api-Key: k17", "k17"),
    ("DB_PASS=p18", "p18"),
    ("--key=k19", "k19"),
    # a quoted value is hidden to its closing quote, not to its first space
    ("PASSWORD='two words20' next", "words20"),
    ('mysql --password "two words21"', "words21"),
    ("password=escaped\\ space22", "space22"),
    # JSON and Python dict forms: the key's own closing quote
    ('{"password": "pw23", "name": "n"}', "pw23"),
    ("{'client_secret': 'pw24'}", "pw24"),
    # whatever the scheme, an Authorization header's value
    ('curl -H "Authorization: token tok25" h', "tok25"),
    # curl / wget -u user:password
    ("curl -u bob:pw26 https://h", "pw26"),
    ("wget --user=bob:pw27 h", "pw27"),
]


@pytest.mark.parametrize(("text", "secret"), FORMS)
def test_every_form_is_redacted(text, secret):
    assert secret not in redact(text)
    assert "***" in redact(text)
    assert secret not in safe_text(text)


def test_what_is_not_a_secret_is_left_alone():
    for text in ("every 1s", "exit 3", "at 12:30 today", "user@host", "http://h:80/p?x=1", "a:b"):
        assert redact(text) == text
    for text in ("monkey=banana", "author=Bob", "bypass=1", "sort key: name", "--keep 5"):
        assert redact(text) == text
    assert redact("redis://user:pw@host:6379/0") == "redis://user:***@host:6379/0"


def test_data_is_redacted_inside_lists_and_flags_hide_their_value():
    data = redact_data(
        {"command": ["mysql", "--password", "x1", "redis://u:x2@h"], "env": {"API_TOKEN": "x3"}}
    )
    text = json.dumps(data)
    assert not any(s in text for s in ("x1", "x2", "x3"))
    assert data["command"][0] == "mysql"
    assert redact_data(["curl", "-u", "bob:x4", "h"]) == ["curl", "-u", "bob:***", "h"]


def test_control_characters_are_made_visible():
    raw = "a\x1b[2J\x07b\rc\x00d\x9b\u202ee\u2028f"
    shown = printable(raw)
    assert shown.isprintable()
    assert "\\x1b" in shown and "\\u202e" in shown
    assert printable("one\ntwo", newlines=True) == "one\ntwo"
    assert printable("one\ntwo") == "one\\x0atwo"


def test_the_log_filter_redacts_and_keeps_a_record_on_one_line():
    record = logging.LogRecord(
        "t", logging.ERROR, "f", 1, "url %s\x1b[31m\nforged", ("redis://u:pw@h",), None
    )
    RedactingFilter().filter(record)
    message = record.getMessage()
    assert "pw@" not in message and "\n" not in message and "\x1b" not in message


SECRET_COMMAND = (
    "echo start; echo 'redis://user:ab@pw1@host/0'; echo 'user:hunter5@broker:9092';"
    " printf 'password=sw0rd8 \\033[31mred\\033[0m redis://:p/w2@host:6379\\n'; exit 3"
)
SECRETS = ["ab@pw1", "hunter5", "sw0rd8", "p/w2"]


def _clean(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, (where, secret, text)
    assert "\x1b" not in text, (where, text)


def test_no_secret_and_no_raw_escape_in_any_output(tmp_path):
    db = tmp_path / "t.db"
    added = cli(
        "task", "add", "leaky", "--every", "1s",
        "--env", "TARGET=redis://user:ab@pw1@host/0",
        "--env", "API_TOKEN=hunter5",
        "--", "sh", "-c", SECRET_COMMAND,
        db=db,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    _clean(added.stdout + added.stderr, "task add")
    disabled = cli("task", "disable", "leaky", "--note", "\x1b[2Jpassword=sw0rd8", db=db)
    _clean(disabled.stdout + disabled.stderr, "disable")
    assert cli("task", "enable", "leaky", db=db).returncode == 0
    run = cli(
        "run", "--for", "2.5", "--valkey", "redis://user:ab@pw1@127.0.0.1:1/0", db=db, timeout=60
    )
    assert run.returncode == 0, run.stderr
    _clean(run.stdout + run.stderr, "run (its log)")
    assert "127.0.0.1" in run.stderr  # the Valkey error is there, redacted
    outputs = {}
    for args in (
        ["task", "show", "leaky"],
        ["task", "show", "leaky", "--json"],
        ["task", "list"],
        ["task", "list", "--json"],
        ["history"],
        ["history", "--json"],
        ["history", "leaky", "--json"],
    ):
        result = cli(*args, db=db)
        assert result.returncode == 0, (args, result.stderr)
        _clean(result.stdout + result.stderr, " ".join(args))
        outputs[" ".join(args)] = result.stdout
    failed = [o for o in json.loads(outputs["history --json"]) if o["state"] == "failed"]
    assert failed, outputs["history --json"]
    assert "redis://:***@host:6379" in failed[0]["detail"]  # the detail is there, redacted
    assert "\\x1b" in outputs["history"] or "***" in outputs["history"]
    shown = json.loads(outputs["task show leaky --json"])[0]
    assert shown["command"][0] == "sh"


@pytest.mark.parametrize(
    ("args", "secret"),
    [
        (["run", "--valkey", "redis://:p/w2@host:6379"], "p/w2"),
        (["run", "--valkey", "redis://user:ab@pw1@host:notaport/0"], "ab@pw1"),
        (["run", "--kafka", "user:hunter5@broker:9092"], "hunter5"),
        (["ticks", "--kafka", "user:hunter5@broker:9092"], "hunter5"),
        (["run", "--valkey", "redis://u:sw0rd8@h:1/0?socket_timeout=x"], "sw0rd8"),
    ],
)
def test_error_lines_never_show_the_secret(tmp_path, args, secret):
    result = cli(*args, db=tmp_path / "t.db")
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert secret not in result.stderr and "Traceback" not in result.stderr


def test_bad_config_values_are_quoted_redacted(tmp_path):
    (tmp_path / "tickui.toml").write_text('[valkey]\nurl = "redis://:p/w2@host:6379"\n')
    result = cli("task", "list", db=tmp_path / "t.db", cwd=tmp_path)
    assert result.returncode == 2 and "p/w2" not in result.stderr
    assert "valkey.url" in result.stderr


def test_task_show_hides_a_secret_argument_and_keeps_the_arguments_after_it(tmp_path):
    """Each argument is redacted on its own: a secret must not swallow its neighbours."""
    db = tmp_path / "t.db"
    command = ["curl", "-H", "Authorization: Bearer abcdefghijkl", "--password=hunter2", "-u", "x"]
    assert cli("task", "add", "s", "--every", "1h", "--", *command, db=db).returncode == 0
    shown = cli("task", "show", "s", db=db).stdout
    line = next(line for line in shown.splitlines() if "command:" in line)
    assert "abcdefghijkl" not in line and "hunter2" not in line
    assert line.split("command: ", 1)[1] == "curl -H 'Authorization: ***' '--password=***' -u x"


def test_a_long_word_is_redacted_whole_and_its_secret_still_found() -> None:
    """One word of a megabyte (base64, minified output, timestamps run together): searched
    once, not from each of its colons (that took hours), and a URL password at its end is
    still hidden."""
    word = "a:" * 500_000 + "x redis://user:hunter2@cache:6379"
    shown = redact(word)
    assert "hunter2" not in shown and shown.endswith("redis://user:***@cache:6379")
    assert redact("a" * 1_000_000) == "a" * 1_000_000


def test_kafka_and_valkey_passwords_given_to_tickui_never_show(tmp_path):
    """A password tickui was given (a file, TICKUI_KAFKA_PASSWORD, TICKUI_VALKEY_PASSWORD) is
    hidden from any text, even standing alone where no pattern would know it for a secret."""
    from tickui.common.redact import redact
    from tickui.ticks.config import build, kafka_access, valkey_password

    pw_file = tmp_path / "kafka.password"
    pw_file.write_text("Fil3dSecretWord\n")
    pw_file.chmod(0o600)
    flags = {"kafka_bootstrap": ("127.0.0.1:1", "--kafka")}
    env = {
        "TICKUI_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "TICKUI_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
        "TICKUI_KAFKA_SASL_USERNAME": "tickui",
        "TICKUI_KAFKA_SASL_PASSWORD_FILE": str(pw_file),
        "TICKUI_VALKEY_PASSWORD": "EnvValkeyWord9",
    }
    config = build({}, env, flags)
    access = kafka_access(config)
    assert access.sasl_password == "Fil3dSecretWord"
    assert valkey_password(config) == "EnvValkeyWord9"
    for secret in ("Fil3dSecretWord", "EnvValkeyWord9"):
        assert secret not in redact(f"broker said: {secret} is wrong") + repr(access) + repr(config)
    said = cli(
        "ticks", "--kafka", "127.0.0.1:1", "--kafka-security-protocol", "SASL_PLAINTEXT",
        "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-username", "tickui",
        "--for", "1", db=tmp_path / "t.db", env={"TICKUI_KAFKA_PASSWORD": "Env0nlyWord"},
    )  # fmt: skip
    assert said.returncode == 1 and len(said.stderr.strip().splitlines()) == 1, said.stderr
    assert "Env0nlyWord" not in said.stdout + said.stderr


@pytest.mark.parametrize(
    "text",
    [
        "curl -H 'X-Auth-Header: Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0Lg' https://api.test",
        "calling the api with Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0Lg now",
        "sent basic eyJhbGciOiJIUzI1NiJ9.c2VjcmV0Lg to the proxy",
    ],
)
def test_a_bearer_token_is_hidden_without_an_authorization_header_before_it(text) -> None:
    """README: bearer tokens are redacted wherever they stand, not only after
    `Authorization:` (a log line, a curl flag with another header name)."""
    shown = redact(text)
    assert "eyJhbGciOiJIUzI1NiJ9" not in shown and "c2VjcmV0Lg" not in shown, shown
    assert "***" in shown


@pytest.mark.parametrize(
    "text",
    [text for text, _ in FORMS]
    + ["Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0Lg", "PROXY-AUTHORIZATION = x y", "a HIDDEN-42 b"],
)
def test_every_line_redact_changes_holds_a_secret_marker(text) -> None:
    """A search for `***` looks only at lines holding one (the run view's log search)."""
    hide("HIDDEN-42")
    assert redact(text) != text
    assert any(marker.lower() in text.lower() for marker in secret_markers())
