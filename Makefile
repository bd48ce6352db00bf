# Replay: `make run` serves the demo, `make test` runs every check. Both install first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000

.PHONY: install run test test-sqlite test-postgres lint bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c requirements.lock -e '.[dev]'
	touch $@

run: install
	DJANGO_DEBUG=1 $(BIN)/python manage.py migrate --noinput
	DJANGO_DEBUG=1 $(BIN)/python manage.py load_demo
	DJANGO_DEBUG=1 $(BIN)/python manage.py ensure_operator --url http://127.0.0.1:$(PORT)/
	DJANGO_DEBUG=1 $(BIN)/daphne -b 127.0.0.1 -p $(PORT) replaysite.asgi:application

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy .
	$(BIN)/lint-imports

# The whole suite on SQLite, then again on PostgreSQL when one is reachable
# (REPLAY_REQUIRE_SERVICES=1 turns "not reachable" into a failure).
test: lint test-sqlite test-postgres

test-sqlite: install
	env -u DATABASE_URL $(BIN)/pytest

test-postgres: install
	@url=$$($(BIN)/python -m tests.services postgres) || exit $$?; \
	if [ -n "$$url" ]; then \
		echo "== the suite again on PostgreSQL ($$url)"; \
		DATABASE_URL="$$url" $(BIN)/pytest; \
	fi

# Each prints its figures against the issues' targets; all of them run even if one misses.
bench: install
	@status=0; \
	$(BIN)/python -m tests.bench || status=1; \
	$(BIN)/python -m tests.bench_dashboard || status=1; \
	$(BIN)/python -m tests.bench_live || status=1; \
	$(BIN)/python -m tests.bench_handshake || status=1; \
	$(BIN)/python -m tests.bench_import || status=1; \
	$(BIN)/python -m tests.bench_context || status=1; \
	$(BIN)/python -m tests.bench_tail || status=1; \
	$(BIN)/python -m tests.bench_ingest || status=1; \
	$(BIN)/python -m tests.bench_search || status=1; \
	exit $$status

clean:
	rm -rf $(VENV) staticfiles .mypy_cache .ruff_cache .pytest_cache
