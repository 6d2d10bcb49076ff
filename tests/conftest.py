"""Shared pytest fixtures for tickui. Add new fixtures under the matching section."""

from __future__ import annotations

from pathlib import Path

import pytest

import services  # tests/services.py: pytest puts tests/ on sys.path for this rootdir conftest

# ---- files -----------------------------------------------------------------------------------


@pytest.fixture
def tmp_db(tmp_path: Path) -> Path:
    """Path of a not yet created SQLite database in the test's own directory."""
    return tmp_path / "tickui.db"


# ---- real services (started by scripts/services.sh; see tests/services.py) --------------------


@pytest.fixture(scope="session")
def redis_url() -> str:
    """URL of the shared Redis: skip outside `make test`, fail under CI when it is missing."""
    return services.redis_url()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """host:port of the shared Tansu broker: skip outside `make test`, fail under CI."""
    return services.kafka_bootstrap()
