"""Host names given for a listener or a Kafka bootstrap: what the resolver would refuse with
an error of its own (an empty label, one over 63 characters) is bad input here, one line."""

from __future__ import annotations

import pytest

from tickui.common import checks
from tickui.common.errors import BadInput

GOOD = ["127.0.0.1", "localhost", "db.example.com", "my_host", "kafka-1.internal", "host.",
        "[::1]", "::1", "x." + "a" * 63]  # fmt: skip
BAD = ["nonsense..host", "-lead", "a" * 64, ".x", "x..", "a b", "", "x" * 254]


@pytest.mark.parametrize("host", GOOD)
def test_names_and_addresses_are_taken(host: str) -> None:
    assert checks.listen_host(host, "--host") == host.strip("[]")
    assert checks.host_port(f"[{host}]:9092" if host == "::1" else f"{host}:9092", "--kafka")


@pytest.mark.parametrize("host", BAD)
def test_what_no_resolver_takes_is_bad_input(host: str) -> None:
    with pytest.raises(BadInput):
        checks.listen_host(host, "--host")
    with pytest.raises(BadInput):
        checks.host_port(f"{host}:9092", "--kafka")


STORE_GOOD = ["postgresql://u@db:5432/x", "postgresql://u@[::1]:5432/x", "postgresql://u@db/x",
              "postgresql:///x", "postgres://u:pw@db:1/x", "/tmp/a:b.db"]  # fmt: skip
STORE_BAD = ["postgresql://u:pw@db:99999/x", "postgresql://u:pw@db:0/x",
             "postgresql://u:pw@db:abc/x", "postgresql://u:pw@db:/x",
             "postgresql://u:pw@a:5432,b:5433/x"]  # fmt: skip


@pytest.mark.parametrize("url", STORE_GOOD)
def test_store_urls_with_one_host_and_a_real_port_are_taken(url: str) -> None:
    assert checks.store_text(url, "--store") == url


@pytest.mark.parametrize("url", STORE_BAD)
def test_a_store_url_the_driver_would_fail_on_is_bad_input_without_its_password(url) -> None:
    with pytest.raises(BadInput) as refused:
        checks.store_text(url, "--store")
    assert "pw" not in str(refused.value)


def test_a_store_port_out_of_range_is_one_line_exit_2_everywhere(tmp_path) -> None:
    from helpers import cli

    url = "postgresql://u:hunter2@db:99999/x"
    toml = tmp_path / "t.toml"
    toml.write_text(f'[store]\nurl = "{url}"\n')
    for done in (
        cli("task", "list", "--store", url),
        cli("task", "list", env={"TICKUI_STORE": url}),
        cli("--config", str(toml), "task", "list"),
    ):
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "65535" in done.stderr
        assert "hunter2" not in done.stderr and "internal error" not in done.stderr
