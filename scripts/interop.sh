#!/usr/bin/env bash
# make interop: check tickui against the real ONEX package (PyPI omnibase-infra).
#
#   scripts/interop.sh            build the venvs if needed, then run interop/ in each
#   scripts/interop.sh --build    build only
#
# omnibase-infra needs Python >= 3.12 (tickui runs on 3.11). Found in this order: $INTEROP_PYTHON,
# pyenv's newest versions/3.12.*/bin/python3.12 (the real binary: the pyenv shim fails when the
# global version is not 3.12), then `python3.12` on PATH if it really runs. None: one line, exit 1.
#
# Built once, under .interop/ (gitignored), with uv from PyPI in a small tools venv (plain pip's
# old resolver gives up on omnibase-infra's dependencies): one venv per pinned ONEX version, each
# with pytest, pytest-asyncio, pytest-timeout, aiokafka and tickui itself (editable, so the tests
# run the checkout's code). A venv is rebuilt only when its stamp changes: Python, the pins, or
# tickui's pyproject.toml. A failed install: one line naming the log, exit 1.
#
# Then, per version: scripts/services.sh run -- VENV/bin/python -m pytest -c interop/pytest.ini
# interop/ (services.sh starts Tansu and Redis and exports TICKUI_TEST_KAFKA / _REDIS_URL).
# Exit status: 0 when every version passed, else 1. INTEROP_PYTEST_ARGS: extra pytest arguments;
# INTEROP_ONEX_VERSIONS: other omnibase-infra versions (space-separated) instead of the pinned two.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

read -r -a ONEX_VERSIONS <<<"${INTEROP_ONEX_VERSIONS:-0.38.6 0.38.76}"   # the pinned ones
UV_PIN="uv==0.13.9"
TEST_PINS=("pytest>=8,<10" "pytest-asyncio>=1.5,<2" "pytest-timeout>=2.4" "aiokafka>=0.14,<0.15")
DIR=$ROOT/.interop

say() { printf 'make interop: %s\n' "$*" >&2; }
fail() { say "$*"; exit 1; }

# ---- Python 3.12 -----------------------------------------------------------------------------
is_312() { [ -n "$1" ] && "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1; }

find_python() {
    local cand root
    if [ -n "${INTEROP_PYTHON:-}" ]; then
        is_312 "$INTEROP_PYTHON" && { echo "$INTEROP_PYTHON"; return 0; }
        fail "needs Python 3.12 (INTEROP_PYTHON=$INTEROP_PYTHON is not a working Python 3.12)"
    fi
    root=${PYENV_ROOT:-$HOME/.pyenv}
    command -v pyenv >/dev/null 2>&1 && root=$(pyenv root 2>/dev/null || echo "$root")
    if [ -d "$root/versions" ]; then
        while read -r cand; do
            is_312 "$cand" && { echo "$cand"; return 0; }
        done < <(ls -d "$root"/versions/3.12.*/bin/python3.12 2>/dev/null | sort -rV)
    fi
    cand=$(command -v python3.12 2>/dev/null || true)
    is_312 "$cand" && { echo "$cand"; return 0; }
    fail "needs Python 3.12 (omnibase-infra requires >=3.12): none found (no pyenv versions/3.12.*, no working python3.12 on PATH; INTEROP_PYTHON=... to choose one)"
}

# ---- build -----------------------------------------------------------------------------------
PY=$(find_python)
PYVER=$("$PY" -c 'import platform; print(platform.python_version())')
PYPROJECT_SHA=$(sha256sum pyproject.toml | cut -c1-16)
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9   # two `make interop` at once: the second waits for the first build

UV=$DIR/tools/bin/uv
build_tools() {
    local key="python=$PYVER $UV_PIN"
    [ -x "$UV" ] && [ "$(cat "$DIR/tools/.stamp" 2>/dev/null)" = "$key" ] && return 0
    say "building the tools venv ($UV_PIN, Python $PYVER at $PY)"
    rm -rf "$DIR/tools"
    { "$PY" -m venv "$DIR/tools" && "$DIR/tools/bin/python" -m pip install -q \
        --disable-pip-version-check "$UV_PIN"; } >"$DIR/tools.log" 2>&1 ||
        fail "installing $UV_PIN into .interop/tools failed: $(tail -n 1 "$DIR/tools.log") (log: .interop/tools.log)"
    echo "$key" >"$DIR/tools/.stamp"
}

build_venv() {
    local version=$1 venv=$DIR/onex-$1 log=$DIR/onex-$1.log t0 key
    key="python=$PYVER omnibase-infra==$version ${TEST_PINS[*]} pyproject=$PYPROJECT_SHA"
    [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.stamp" 2>/dev/null)" = "$key" ] && return 0
    say "building .interop/onex-$version (omnibase-infra==$version, tickui -e .)"
    t0=$(date +%s)
    rm -rf "$venv"
    {
        UV_PYTHON_DOWNLOADS=never "$UV" venv -q -p "$PY" "$venv" &&
            VIRTUAL_ENV=$venv UV_PYTHON_DOWNLOADS=never "$UV" pip install -q \
                "omnibase-infra==$version" "${TEST_PINS[@]}" -e "$ROOT"
    } >"$log" 2>&1 || {
        local last
        last=$(grep -v '^\s*$' "$log" | tail -n 1 | sed 's/^[[:space:]]*//')
        fail "installing omnibase-infra==$version into .interop/onex-$version failed: ${last:-no output} (log: .interop/onex-$version.log)"
    }
    echo "$key" >"$venv/.stamp"
    say "built .interop/onex-$version in $(($(date +%s) - t0)) s"
}

build_tools
for v in "${ONEX_VERSIONS[@]}"; do build_venv "$v"; done
flock -u 9
[ "${1:-}" = --build ] && exit 0

# ---- run -------------------------------------------------------------------------------------
rc=0 summary=()
for v in "${ONEX_VERSIONS[@]}"; do
    echo "== interop: omnibase-infra $v (Python $PYVER)"
    t0=$(date +%s%3N) r=0
    scripts/services.sh run -- "$DIR/onex-$v/bin/python" -m pytest -c interop/pytest.ini \
        --rootdir "$ROOT" interop -q ${INTEROP_PYTEST_ARGS:-} || r=$?
    [ "$r" -eq 5 ] && say "pytest collected no tests (exit 5)"
    ms=$(($(date +%s%3N) - t0))
    summary+=("omnibase-infra $v: $([ "$r" -eq 0 ] && echo passed || echo "FAILED (pytest exit $r)") in $((ms / 1000)).$((ms % 1000 / 100)) s")
    [ "$r" -eq 0 ] || rc=1
done
for line in "${summary[@]}"; do say "$line"; done
exit "$rc"
