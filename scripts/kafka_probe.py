"""Is a Kafka endpoint that scripts/services.sh started really up, and really ours?

    python scripts/kafka_probe.py plain BOOTSTRAP PORT=PID
    python scripts/kafka_probe.py secure CA USER PASSWORD_FILE SCRAM SSL SASL_SSL PORT=PID...

Exit 0 when each PORT is listened on by its PID (a port answering proves nothing: Tansu on a
busy port panics and exits 0) and each endpoint answers an admin list_topics: `plain` without
security; `secure` the SCRAM front (SCRAM-SHA-256 and -512, and a wrong password refused), the
TLS one and the SASL_SSL one, trusting CA. Anything else: exit with the reason.
"""

from __future__ import annotations

import asyncio
import os
import sys


def owner_ok(port: int, pid: str) -> bool | None:
    """Whether `pid` owns the socket listening on `port`; None without a /proc view."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f[9])
    if not inodes:
        return None
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            return True
    return False


def check_owners(specs: list[str]) -> None:
    for spec in specs:
        port, pid = spec.split("=")
        if owner_ok(int(port), pid) is False:
            sys.exit(f"port {port} is listened on by another process, not pid {pid}")


async def list_topics(**options) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(request_timeout_ms=3000, **options)
    await admin.start()
    try:
        await admin.list_topics()
    finally:
        await admin.close()


async def wrong_password_refused(scram: str, user: str, password: str) -> None:
    from aiokafka.conn import create_conn
    from aiokafka.errors import SaslAuthenticationFailed

    host, port = scram.rsplit(":", 1)
    try:
        conn = await create_conn(
            host, int(port), request_timeout_ms=3000, security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user,
            sasl_plain_password=password + "x",
        )  # fmt: skip
    except SaslAuthenticationFailed:
        return
    conn.close()
    raise SystemExit(f"{scram}: a wrong password was accepted")


async def secure(ca: str, user: str, password_file: str, scram: str, tls: str, sasl_ssl: str):
    from aiokafka.helpers import create_ssl_context

    with open(password_file) as handle:
        password = handle.read().strip()
    ssl = create_ssl_context(cafile=ca)
    login = {"sasl_plain_username": user, "sasl_plain_password": password}
    await asyncio.gather(
        list_topics(bootstrap_servers=scram, security_protocol="SASL_PLAINTEXT",
                    sasl_mechanism="SCRAM-SHA-256", **login),
        list_topics(bootstrap_servers=scram, security_protocol="SASL_PLAINTEXT",
                    sasl_mechanism="SCRAM-SHA-512", **login),
        list_topics(bootstrap_servers=tls, security_protocol="SSL", ssl_context=ssl),
        list_topics(bootstrap_servers=sasl_ssl, security_protocol="SASL_SSL", ssl_context=ssl,
                    sasl_mechanism="SCRAM-SHA-512", **login),
        wrong_password_refused(scram, user, password),
    )  # fmt: skip


def main(argv: list[str]) -> None:
    if argv[:1] == ["plain"] and len(argv) == 3:
        check_owners(argv[2:])
        asyncio.run(asyncio.wait_for(list_topics(bootstrap_servers=argv[1]), 10))
    elif argv[:1] == ["secure"] and len(argv) >= 7:
        check_owners(argv[7:])
        asyncio.run(asyncio.wait_for(secure(*argv[1:7]), 15))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
