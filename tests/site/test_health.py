"""The probes of docs/contract.md §5, against real daphne processes: `/healthz` answers
without I/O, `/readyz` names the database, the migrations and (with `REDIS_URL`) the
channel layer, and neither leaks configuration nor sits behind the host check or the
HTTPS redirect."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest

from tests.conftest import Server, free_port, start_daphne
from tests.redis_server import RedisServer, available

pytestmark = pytest.mark.live


def probe(server: Server, path: str, **headers: str) -> httpx.Response:
    with httpx.Client(base_url=server.url, timeout=10, follow_redirects=False) as client:
        return client.get(path, headers=headers)


def test_a_serving_process_is_live_and_ready(transactional_db: None, daphne: Server) -> None:
    live = probe(daphne, "/healthz")
    assert (live.status_code, live.json()) == (200, {"status": "ok"})
    ready = probe(daphne, "/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ok", "checks": {"database": "ok", "migrations": "ok"}}
    assert ready.headers["cache-control"] == "no-store"
    assert ready.headers["content-type"] == "application/json"


def test_probes_answer_get_and_head_only(transactional_db: None, daphne: Server) -> None:
    with httpx.Client(base_url=daphne.url, timeout=10) as client:
        head = client.head("/readyz")
        post = client.post("/healthz", content=b"{}")
    assert (head.status_code, head.content) == (200, b"")
    assert post.status_code == 405
    assert post.headers["allow"] == "GET, HEAD"


@pytest.fixture(scope="module")
def unreachable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Behind TLS (`DJANGO_HTTPS=1`), with neither its database nor its Redis answering."""
    root = tmp_path_factory.mktemp("unreachable")
    server = start_daphne(
        root,
        {
            "DATABASE_URL": f"postgres://127.0.0.1:{free_port()}/gone",
            "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
            "DJANGO_HTTPS": "1",
            "DJANGO_DEBUG": "0",
            "REPLAY_STATIC_ROOT": str(root),
        },
    )
    yield server
    server.stop()


def test_a_process_whose_database_and_redis_are_gone_is_live_but_not_ready(
    unreachable: Server,
) -> None:
    # A load balancer probes over plain HTTP and names the host by its address: neither
    # the HTTPS redirect nor the host check stands between it and the answer.
    live = probe(unreachable, "/healthz", host="10.1.2.3:8000")
    assert (live.status_code, live.json()) == (200, {"status": "ok"})
    started = time.monotonic()
    ready = probe(unreachable, "/readyz", host="10.1.2.3:8000")
    assert time.monotonic() - started < 5
    assert ready.status_code == 503
    body = ready.json()
    # psycopg's pool keeps trying for its own timeout: the probe gives up first.
    assert body["checks"].pop("database") in ("failed", "timeout")
    assert body == {
        "status": "unavailable",
        "checks": {"channel_layer": "failed", "migrations": "unknown"},
    }
    # Nothing of the configuration: no host, port, URL or error text.
    for secret in ("127.0.0.1", "postgres", "redis:", "gone", "refused", "Error"):
        assert secret not in ready.text
    # The rest of the site still sits behind the redirect.
    assert probe(unreachable, "/accounts/login/").status_code == 301


@pytest.mark.skipif(not available(), reason="redis-server is not installed")
def test_pending_migrations_make_a_process_not_ready(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path)
    redis.start()
    server = start_daphne(
        tmp_path,
        {
            "DATABASE_URL": f"sqlite:///{tmp_path / 'never-migrated.sqlite3'}",
            "REDIS_URL": redis.url,
        },
    )
    try:
        ready = probe(server, "/readyz")
    finally:
        server.stop()
        redis.stop()
    assert ready.status_code == 503
    assert ready.json()["checks"] == {
        "database": "ok",
        "channel_layer": "ok",
        "migrations": "pending",
    }
