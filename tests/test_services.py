"""A missing service fails the test under CI and under `make test`; plain pytest skips it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import services

ROOT = Path(__file__).resolve().parent.parent


def _clear(monkeypatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv(services.REQUIRE_ENV, raising=False)
    monkeypatch.delenv(services.REDIS_ENV, raising=False)
    monkeypatch.delenv(services.KAFKA_ENV, raising=False)


def test_plain_pytest_skips_a_missing_service(monkeypatch):
    _clear(monkeypatch)
    with pytest.raises(pytest.skip.Exception):
        services.redis_url()
    monkeypatch.setenv(services.REQUIRE_ENV, "0")  # the explicit opt-out
    with pytest.raises(pytest.skip.Exception):
        services.kafka_bootstrap()


@pytest.mark.parametrize(
    "env", [{services.REQUIRE_ENV: "1"}, {"CI": "true"}, {"CI": "1", services.REQUIRE_ENV: "0"}]
)
def test_make_test_or_ci_fails_on_a_missing_service(monkeypatch, env):
    _clear(monkeypatch)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(pytest.fail.Exception, match="failure, not a skip"):
        services.redis_url()
    with pytest.raises(pytest.fail.Exception, match="failure, not a skip"):
        services.kafka_bootstrap()


_PROBE = textwrap.dedent(
    """
    import services

    def test_needs_redis():
        services.redis_url()
    """
)


def test_services_sh_makes_a_missing_service_fail_without_ci(tmp_path):
    """What `make test` runs, with CI unset and the Redis address taken away from pytest."""
    probe = tmp_path / "test_probe.py"
    probe.write_text(_PROBE)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", services.REQUIRE_ENV)}
    env["PYTHONPATH"] = str(ROOT / "tests")
    inner = [
        "env", "-u", services.REDIS_ENV,
        sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
        "--rootdir", str(tmp_path), str(probe),
    ]  # fmt: skip
    result = subprocess.run(
        [str(ROOT / "scripts/services.sh"), "run", "--", *inner],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=90,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed" in result.stdout and "failure, not a skip" in result.stdout, result.stdout
