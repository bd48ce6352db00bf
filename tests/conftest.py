"""Shared fixtures: API clients with real tokens, and a real daphne server on a free port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx  # the HTTP client the OpenAI and Anthropic SDKs ship with
import orjson
import pytest
from django.conf import settings
from django.test import Client

from conversations.core import page_windows, socket_window
from conversations.record.services.api_tokens import api_token_create
from tests.counted import BlocksCounted

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    django_db_modify_db_settings_parallel_suffix: None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # pytest-django's own suffix first (test_NAME_gw0 under xdist), as its default does.
    # A file, not :memory:, so that a daphne subprocess sees the same test database.
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        db.setdefault("TEST", {})["NAME"] = str(tmp_path_factory.mktemp("db") / "test.sqlite3")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """`@pytest.mark.sqlite(only=True)`: a path SQLite alone has (its query planner), skipped
    on another database as Django's own suite skips by database feature. The SQLite pass of
    `make test` (`-m sqlite`) runs it."""
    if any(mark.kwargs.get("only") for mark in item.iter_markers("sqlite")):
        from django.db import connection

        if connection.vendor != "sqlite":
            pytest.skip(f"SQLite's own path, not {connection.vendor}'s: runs in make test-sqlite")


@pytest.fixture(scope="session")
def empty_static_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("staticfiles")


@pytest.fixture(autouse=True)
def test_settings(settings: Any, empty_static_root: Path) -> None:
    # The manifest storage needs `collectstatic`; a fresh checkout's tests must not.
    settings.STATIC_ROOT = empty_static_root
    settings.STORAGES = settings.STORAGES | {
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}
    }
    # Signing in is tested, not the cost of the production password hasher.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # This process's layer is the in-memory one even when REDIS_URL is set (it then names
    # the Redis that the Redis tests and the daphne servers use): the tests of consumers
    # and events read its groups, and a test of the Redis layer sets it itself.
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "conversations.live.layers.ThrottledInMemoryChannelLayer"}
    }


class ApiClient:
    """Django's test client speaking JSON with a bearer token."""

    def __init__(self, token: str | None) -> None:
        self.client = Client()
        self.token = token

    def _headers(self, headers: dict[str, str] | None) -> dict[str, str]:
        base = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return base | (headers or {})

    def get(self, path: str, headers: dict[str, str] | None = None, **params: Any) -> Any:
        return self.client.get(path, params, headers=self._headers(headers))

    def post(self, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        raw = body if isinstance(body, bytes | str) else orjson.dumps(body)
        return self.client.post(
            path, raw, content_type="application/json", headers=self._headers(headers)
        )


@pytest.fixture
def token(db: None) -> str:
    _, clear = api_token_create(label="tests")
    return clear


@pytest.fixture
def api(token: str) -> ApiClient:
    return ApiClient(token)


@pytest.fixture
def blocks_counted() -> Iterator[BlocksCounted]:
    """How many blocks the record counts during the test (tests/counted.py)."""
    with BlocksCounted() as counted:
        yield counted


@pytest.fixture
def anonymous_api(db: None) -> ApiClient:
    return ApiClient(None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def database_url() -> str:
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = db.get("USER") or ""
    auth = f"{user}@" if user else ""
    return f"postgres://{auth}{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"


class Server:
    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.process = process
        self.log = log

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


# daphne's options as the deployment and `make run` pass them (tests/live/test_socket_bounds.py
# checks that they do): a client's frame is capped at what a page sends (§4 Bounds). The
# message cap is autobahn's for both directions, so it is the server's largest frame.
DAPHNE_OPTIONS = (
    f"--websocket-max-frame-size={socket_window.CLIENT_BYTES}",
    f"--websocket-max-message-size={page_windows.FRAME_BYTES}",
)


def start_daphne(tmp: Path, env: dict[str, str] | None = None, port: int | None = None) -> Server:
    """daphne on the test database; on `port` to restart a server where clients expect it."""
    port = port or free_port()
    log = tmp / f"daphne-{port}-{time.monotonic_ns()}.log"
    # REDIS_URL only when a test gives it: a server of its own layer, as this process has,
    # never one shared with another run's servers through the developer's Redis.
    inherited = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    environment = (
        inherited
        | {
            "DATABASE_URL": database_url(),
            "DJANGO_DEBUG": "1",
            "DJANGO_SECRET_KEY": settings.SECRET_KEY,
        }
        | (env or {})
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), *DAPHNE_OPTIONS,
         "replaysite.asgi:application"],
        cwd=ROOT,
        env=environment,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    server = Server(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"daphne exited: {log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return server
        except OSError:
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"daphne did not start on {port}: {log.read_text()}")


@pytest.fixture(scope="session")
def daphne(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A real daphne serving the test database; use it with `transactional_db`."""
    # It shares the test database with every test of the session: webhook deliveries are
    # sent by the tests that make them, never by this server on its own schedule.
    server = start_daphne(tmp_path_factory.mktemp("daphne"), {"REPLAY_WEBHOOK_SENDER": "0"})
    yield server
    server.stop()


PASSWORD = "a long and private passphrase"


@pytest.fixture
def operator(db: None) -> Any:
    """A user with conversations.view_conversation (not staff, not a superuser)."""
    from tests.builders import make_user

    return make_user("operator", password=PASSWORD)


@pytest.fixture
def operator_client(operator: Any) -> Client:
    client = Client()
    client.force_login(operator)
    return client


@pytest.fixture
def outsider_client(db: None) -> Client:
    """Signed in, without the permission."""
    from tests.builders import make_user

    client = Client()
    client.force_login(make_user("outsider", operator=False, password=PASSWORD))
    return client
