# tickui build and test entry points. `make test` sets up a fresh Debian machine from nothing.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON      ?= python3
VENV        := .venv
VPY         := $(VENV)/bin/python
STAMP       := $(VENV)/.installed
# Debian packages the tests need; skipped entirely when their commands are already on PATH.
APT_PACKAGES := redis-server redis-tools tmux stunnel4 openssl postgresql chromium
APT_COMMANDS := redis-server redis-cli tmux stunnel4 openssl pg_ctlcluster psql chromium
PYTEST_ARGS ?= -ra --durations=15
# Five pytest-xdist workers on 2 cores: most tests wait on real processes, services and clocks
# (the summary's "cost by part" adds up about five times the wall time). Four kept the cores
# about 70 % busy; six kept them about 90 %, and the heaviest tests, dealt out together
# first, then starved one another (benchmarks/README.md, "The test suite"). Files that must
# not share the broker run in one group (tests/conftest.py SERIAL_GROUPS), on one worker;
# the tests marked slow are dealt out first.
# PYTEST_PARALLEL= runs everything in one process.
PYTEST_PARALLEL ?= -n 5 --dist loadgroup

.PHONY: help venv install deps test interop demo lint bench screenshots clean

help:
	@echo "make venv|install  create $(VENV) and pip install -e '.[dev]' (only when pyproject.toml changed)"
	@echo "make test          install Debian packages, venv, start Redis, Tansu, PostgreSQL, run pytest"
	@echo "make interop       check tickui against the real ONEX package (omnibase-infra, Python 3.12)"
	@echo "make demo          run tickui demo"
	@echo "make lint          ruff check ."
	@echo "make bench         run every benchmarks/*.py"
	@echo "make screenshots   python -m tickui.ui.screenshots"
	@echo "make clean         remove $(VENV) and caches"

# apt_install(packages): `apt-get update` fails at once (status 100) while another process holds
# its lock, so it is retried in a loop; `apt-get install` waits for the dpkg lock by itself.
define apt_install
	set -euo pipefail; \
	if [ "$$(id -u)" -eq 0 ]; then SUDO=; \
	elif command -v sudo >/dev/null 2>&1; then SUDO=sudo; \
	else echo "make: need root or sudo to install: $(1)" >&2; exit 1; fi; \
	command -v apt-get >/dev/null 2>&1 || { echo "make: apt-get not found; install by hand: $(1)" >&2; exit 1; }; \
	echo "make: installing Debian packages: $(1)"; \
	ok=; for i in $$(seq 1 30); do \
		if $$SUDO apt-get update -qq; then ok=1; break; fi; \
		echo "make: apt-get update failed (lock held?), retry $$i/30 in 4 s" >&2; sleep 4; \
	done; \
	[ -n "$$ok" ] || { echo "make: apt-get update kept failing" >&2; exit 1; }; \
	log=$$(mktemp); \
	if ! $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
			-o DPkg::Lock::Timeout=120 $(1) >"$$log" 2>&1; then \
		tail -n 30 "$$log" >&2; rm -f "$$log"; echo "make: apt-get install failed: $(1)" >&2; exit 1; \
	fi; \
	rm -f "$$log"
endef

deps:
	@missing=; for c in $(APT_COMMANDS); do command -v $$c >/dev/null 2>&1 || missing="$$missing $$c"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	echo "make: not on PATH:$$missing"; \
	$(call apt_install,$(APT_PACKAGES))

# ---- virtualenv ------------------------------------------------------------------------------
# Made by the system python3 (3.11+). A missing or dangling .venv/bin/python means no usable venv:
# rebuild it with --clear (which also drops the install stamp). Debian without python3-venv has no
# ensurepip: install it and retry.
$(VPY):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "make: $(PYTHON) is $$($(PYTHON) --version 2>&1); tickui needs Python 3.11+" >&2; exit 1; }
	@echo "make: creating $(VENV) with $$($(PYTHON) --version 2>&1)"
	@$(PYTHON) -m venv --clear $(VENV) 2>/dev/null || { \
		echo "make: '$(PYTHON) -m venv' failed; installing python3-venv"; \
		$(call apt_install,python3-venv); \
		$(PYTHON) -m venv --clear $(VENV); }

$(STAMP): pyproject.toml | $(VPY)
	@echo "make: pip install -e '.[dev]'"
	@$(VPY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	@touch $@

venv install: $(STAMP)

# ---- targets ---------------------------------------------------------------------------------
# pytest runs under scripts/services.sh, which starts Redis, Tansu and PostgreSQL first and stops them by their
# own PIDs afterwards. pytest's status is the target's status; 5 (no tests collected) is a failure.
# tickui's modules are compiled first: the tests start many tickui processes, and
# with PYTHONDONTWRITEBYTECODE set (as it may be) each would compile every module it imports.
# services.sh exports TICKUI_TEST_REQUIRE_SERVICES=1: a test whose service is missing fails, CI or not.
test: deps $(STAMP)
	@$(VPY) -m compileall -q -j 0 tickui >/dev/null
	@rc=0; scripts/services.sh run -- $(VPY) -m pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: FAILED: pytest collected no tests (exit 5)" >&2; fi; \
	exit $$rc

# The ONEX interop tests: scripts/interop.sh builds .interop/ once (Python 3.12, uv,
# omnibase-infra 0.38.6 and 0.38.76) and runs interop/ in each under scripts/services.sh.
interop: deps $(STAMP)
	@scripts/interop.sh

demo: $(STAMP)
	$(VENV)/bin/tickui demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	@shopt -s nullglob; files=(benchmarks/*.py); \
	if [ $${#files[@]} -eq 0 ]; then echo "make bench: no benchmarks/*.py"; exit 0; fi; \
	for f in "$${files[@]}"; do echo "== $$f"; $(VPY) "$$f" || exit $$?; done

screenshots: $(STAMP)
	$(VPY) -m tickui.ui.screenshots

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build dist *.egg-info snapshot_report.html
	find . -path ./.git -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
