"""Kafka over TLS and with SCRAM logins, Valkey over TLS with an ACL user: ticks, dispatch and
workers on the secured endpoints `scripts/services.sh` starts (stunnel for TLS, a SASL front
end for SCRAM, both in front of real Tansu brokers: see the comment there for why), each
setting given the ways tickui takes them (file, environment, flags). A wrong password and an
untrusted certificate are one line and exit 1; no password shows anywhere."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kafka_support import KafkaEngine, Worker, add_task, occurrences, unique, wait_for

import services
from helpers import cli

pytestmark = pytest.mark.slow


def tickui(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    full = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "tickui", *args], env=full, capture_output=True, text=True,
        timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def scram_flags(mechanism: str = "SCRAM-SHA-256", password_file: str | None = None) -> list[str]:
    bootstrap, user, pw_file = services.kafka_scram()
    return [
        "--kafka", bootstrap, "--kafka-security-protocol", "SASL_PLAINTEXT",
        "--kafka-sasl-mechanism", mechanism, "--kafka-sasl-username", user,
        "--kafka-sasl-password-file", password_file or pw_file,
    ]  # fmt: skip


def wrong_password_file(tmp_path: Path, text: str = "not-the-password-7f3a9c") -> str:
    path = tmp_path / "wrong.password"
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_ticks_go_out_and_are_read_back_with_a_scram_login(tmp_path, mechanism):
    topic = unique("ticks-scram")
    ran = tickui("--db", str(tmp_path / "t.db"), "run", *scram_flags(mechanism), "--topic", topic,
                 "--tick-interval", "200ms", "--for", "2")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    read = tickui("ticks", *scram_flags(mechanism), "--topic", topic, "--from-beginning",
                  "--count", "3", "--json", "--for", "20")  # fmt: skip
    assert read.returncode == 0, read.stderr
    assert len(read.stdout.splitlines()) == 3


def test_ticks_over_tls_from_the_environment(tmp_path):
    topic = unique("ticks-tls")
    env = {
        "TICKUI_KAFKA_BOOTSTRAP": services.kafka_tls(),
        "TICKUI_KAFKA_SECURITY_PROTOCOL": "SSL",
        "TICKUI_KAFKA_SSL_CAFILE": services.tls_ca(),
    }
    ran = tickui("--db", str(tmp_path / "t.db"), "run", "--topic", topic, "--tick-interval",
                 "200ms", "--for", "2", env=env)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    read = tickui("ticks", "--topic", topic, "--from-beginning", "--count", "2", "--for", "20",
                  env=env)  # fmt: skip
    assert read.returncode == 0 and len(read.stdout.splitlines()) == 2, read.stderr


def test_dispatch_and_a_worker_over_tls_with_a_login(tmp_path):
    """The engine reads its connection from tickui.toml, the worker from the environment."""
    bootstrap, user, pw_file = services.kafka_sasl_ssl()
    ca = services.tls_ca()
    db, out = tmp_path / "t.db", tmp_path / "ran.txt"
    config = tmp_path / "tickui.toml"
    config.write_text(
        '[dispatch]\nmode = "kafka"\nstart_timeout = "20s"\n'
        f'[kafka]\nsecurity_protocol = "SASL_SSL"\nsasl_mechanism = "SCRAM-SHA-512"\n'
        f'sasl_username = "{user}"\nsasl_password_file = "{pw_file}"\nssl_cafile = "{ca}"\n'
    )
    assert cli("task", "list", db=db).returncode == 0
    env_before = dict(os.environ)
    os.environ.update(
        TICKUI_KAFKA_SECURITY_PROTOCOL="SASL_SSL",
        TICKUI_KAFKA_SASL_MECHANISM="SCRAM-SHA-256",
        TICKUI_KAFKA_SASL_USERNAME=user,
        TICKUI_KAFKA_PASSWORD=services.read_secret(pw_file),
        TICKUI_KAFKA_SSL_CAFILE=ca,
    )
    try:
        worker = Worker(bootstrap, unique("g-tls"), unique("w"), tmp_path, 2)
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    engine = KafkaEngine(db, config, bootstrap, tmp_path / "engine.log")
    try:
        wait_for(lambda: worker.ready, 30, f"the worker:\n{worker.output()}")
        add_task(db, "secure", out, every="1h")
        assert cli("task", "run-now", "secure", db=db).returncode == 0
        done = wait_for(
            lambda: [o for o in occurrences(db) if o["state"] in ("succeeded", "failed")],
            30,
            f"the run:\n{engine.output()[-2000:]}",
        )
        assert done[0]["state"] == "succeeded" and done[0]["worker"] == worker.id
    finally:
        worker.stop(10)
        engine.stop(10)
    secret = services.read_secret(pw_file)
    assert secret not in worker.output() + engine.output()


def test_a_wrong_password_is_one_line_exit_1_and_never_shown(tmp_path, kafka_bootstrap):
    secret = "not-the-password-7f3a9c"
    bad = wrong_password_file(tmp_path, secret)
    runs = {
        "worker": ["worker", *scram_flags(password_file=bad)],
        "run": [
            "--db",
            str(tmp_path / "t.db"),
            "run",
            *scram_flags(password_file=bad),
            "--for",
            "5",
        ],
        "ticks": ["ticks", *scram_flags(password_file=bad), "--for", "5"],
    }
    for what, args in runs.items():
        done = tickui(*args)
        assert done.returncode == 1, (what, done.stderr)
        assert done.stderr.count("\n") == 1, (what, done.stderr)
        assert "login refused for user tickui (SCRAM-SHA-256)" in done.stderr, done.stderr
        assert secret not in done.stdout + done.stderr
    # the same through TICKUI_KAFKA_PASSWORD: still never shown
    bootstrap, user, _ = services.kafka_scram()
    env = {"TICKUI_KAFKA_PASSWORD": secret}
    done = tickui("ticks", "--kafka", bootstrap, "--kafka-security-protocol", "SASL_PLAINTEXT",
                  "--kafka-sasl-mechanism", "SCRAM-SHA-256", "--kafka-sasl-username", user,
                  "--for", "5", env=env)  # fmt: skip
    assert done.returncode == 1 and secret not in done.stderr and "login refused" in done.stderr


def test_an_untrusted_certificate_is_one_line_exit_1(tmp_path):
    flags = ["--kafka", services.kafka_tls(), "--kafka-security-protocol", "SSL",
             "--kafka-ssl-cafile", services.other_ca()]  # fmt: skip
    for args in (["worker", *flags], ["ticks", *flags, "--for", "5"],
                 ["--db", str(tmp_path / "t.db"), "run", *flags, "--for", "5"]):  # fmt: skip
        done = tickui(*args)
        assert done.returncode == 1, done.stderr
        assert done.stderr.count("\n") == 1 and "TLS certificate is not trusted" in done.stderr


def test_bad_security_settings_are_bad_input(tmp_path):
    bootstrap, _, _ = services.kafka_scram()
    cases = [
        (["--kafka-security-protocol", "TLS"], "is not one of PLAINTEXT"),
        (
            ["--kafka-security-protocol", "SASL_PLAINTEXT", "--kafka-sasl-mechanism", "GSSAPI"],
            "--kafka-sasl-mechanism",
        ),
        (
            ["--kafka-security-protocol", "SASL_PLAINTEXT", "--kafka-sasl-mechanism", "PLAIN"],
            "needs a user name",
        ),
        (
            ["--kafka-security-protocol", "SSL", "--kafka-ssl-cafile", str(tmp_path / "none.pem")],
            "none.pem",
        ),
    ]
    for flags, said in cases:
        done = tickui("ticks", "--kafka", bootstrap, *flags, "--for", "1")
        assert done.returncode == 2 and said in done.stderr, (flags, done.stderr)
    loose = tmp_path / "loose.password"
    loose.write_text("x" * 12)
    loose.chmod(0o644)
    done = tickui("ticks", *scram_flags(password_file=str(loose)), "--for", "1")
    assert done.returncode == 2 and "chmod 600" in done.stderr, done.stderr


def test_valkey_over_tls_with_an_acl_user(tmp_path):
    url, pw_file = services.redis_tls()
    key = unique("tickui:seq")
    env = {
        "TICKUI_VALKEY_SSL_CAFILE": services.tls_ca(),
        "TICKUI_VALKEY_PASSWORD_FILE": pw_file,
        "TICKUI_SEQUENCE_KEY": key,
    }
    ran = tickui("--db", str(tmp_path / "t.db"), "run", "--valkey", url, "--tick-interval",
                 "100ms", "--for", "1.5", env=env)  # fmt: skip
    assert ran.returncode == 0, ran.stderr

    async def stored() -> bytes | None:
        from redis.asyncio import Redis

        client = Redis.from_url(url, password=services.read_secret(pw_file),
                                ssl_ca_certs=services.tls_ca())  # fmt: skip
        try:
            return await client.get(key)
        finally:
            await client.aclose()

    value = asyncio.run(stored())
    assert value is not None and int(value) > 0
    secret = services.read_secret(pw_file)
    assert secret not in ran.stdout + ran.stderr
