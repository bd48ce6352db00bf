# Replay: `make run` serves the demo, `make test` runs every check. Both install first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
# What a client may send on a live socket: a frame of 4 KB at most, a page's resume report
# (docs/contract.md §4 Bounds). The message cap holds for what the server sends too: its
# largest frame, 256 KB.
DAPHNE_OPTIONS := --websocket-max-frame-size=4096 --websocket-max-message-size=262144

.PHONY: install install-prod lock run test test-sqlite test-sqlite-all test-postgres lint bench bench-scale clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c requirements.lock -e '.[dev]'
	touch $@

# A production install: the app and its dependencies at the lock's versions, without the
# dev extras (pytest, mypy, Playwright, the providers' SDKs).
install-prod:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c requirements.lock -e .

# requirements.lock from pyproject.toml with the dev extra, sorted, by uv (a dev tool). The
# lock's current pins are kept wherever pyproject.toml still allows them: only a new or changed
# requirement moves one (LOCK_ARGS=--upgrade moves them all; --offline resolves from uv's cache).
LOCK_ARGS ?=
lock: install
	$(BIN)/uv pip compile pyproject.toml --extra dev --python $(BIN)/python \
		--output-file requirements.lock --custom-compile-command 'make lock' --quiet $(LOCK_ARGS)

run: install
	DJANGO_DEBUG=1 $(BIN)/python manage.py migrate --noinput
	DJANGO_DEBUG=1 $(BIN)/python manage.py load_demo
	DJANGO_DEBUG=1 $(BIN)/python manage.py ensure_operator --url http://127.0.0.1:$(PORT)/
	DJANGO_DEBUG=1 $(BIN)/daphne -b 127.0.0.1 -p $(PORT) $(DAPHNE_OPTIONS) replaysite.asgi:application

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/lint-imports

# The whole suite on PostgreSQL, the production database; then on SQLite the tests marked
# `sqlite` (FTS5 search, WAL and the busy timeout, SQLite's query plans, the embedded
# default, a smoke set of the API and pages). Without a reachable PostgreSQL the whole suite
# runs on SQLite instead (REPLAY_REQUIRE_SERVICES=1 turns "not reachable" into a failure).
test: lint
	@url=$$($(BIN)/python -m tests.services postgres) || exit $$?; \
	if [ -n "$$url" ]; then \
		$(MAKE) --no-print-directory test-postgres && $(MAKE) --no-print-directory test-sqlite; \
	else \
		echo "== no PostgreSQL: the whole suite on SQLite"; \
		$(MAKE) --no-print-directory test-sqlite-all; \
	fi

test-postgres: install
	@url=$$($(BIN)/python -m tests.services postgres) || exit $$?; \
	if [ -n "$$url" ]; then \
		echo "== the whole suite on PostgreSQL ($$url)"; \
		DATABASE_URL="$$url" $(BIN)/pytest; \
	fi

test-sqlite: install
	@echo "== SQLite's own paths and the smoke set (-m sqlite)"
	env -u DATABASE_URL $(BIN)/pytest -m sqlite

# For a machine without PostgreSQL: every test on SQLite.
test-sqlite-all: install
	env -u DATABASE_URL $(BIN)/pytest

# Each prints its figures against the issues' targets; all of them run even if one misses.
bench: install
	@status=0; \
	$(BIN)/python -m bench.targets || status=1; \
	$(BIN)/python -m bench.dashboard || status=1; \
	$(BIN)/python -m bench.live || status=1; \
	$(BIN)/python -m bench.handshake || status=1; \
	$(BIN)/python -m bench.imports || status=1; \
	$(BIN)/python -m bench.context || status=1; \
	$(BIN)/python -m bench.counts || status=1; \
	$(BIN)/python -m bench.tail || status=1; \
	$(BIN)/python -m bench.ingest || status=1; \
	$(BIN)/python -m bench.search || status=1; \
	$(BIN)/python -m bench.notes || status=1; \
	$(BIN)/python -m bench.compare || status=1; \
	$(BIN)/python -m bench.alerts || status=1; \
	$(BIN)/python -m bench.streams || status=1; \
	exit $$status

# docs/benchmarks.md's million-message figures on PostgreSQL, apart from `bench` for they take
# long (about half an hour on a loaded 2-core machine): builds a throwaway database of SCALE_MESSAGES messages
# with COPY, measures search, the finder, storage and ingest against their targets, drops it.
SCALE_MESSAGES ?= 1000000
bench-scale: install
	$(BIN)/python -m bench.scale --messages $(SCALE_MESSAGES)

clean:
	rm -rf $(VENV) staticfiles .mypy_cache .ruff_cache .pytest_cache
