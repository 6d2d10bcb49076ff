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
