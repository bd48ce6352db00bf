"""Scale-out (docs/contract.md §4, Live delivery): two daphne processes sharing PostgreSQL and a
private Redis.

A block ingested through one process reaches the watchers of both; Redis stopped,
restarted or hanging in the middle of ingest loses nothing: every POST still answers 201
and the watchers end up holding exactly the record. Runs in the PostgreSQL pass of
`make test` (on SQLite two processes would share one file, not the deployment tested).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from django.conf import settings

from tests import services as found
from tests.conftest import Server, start_daphne
from tests.live.test_live_e2e import Api, LiveClient, assert_once_in_order, operator_cookie, text
from tests.redis_server import RedisServer, available

pytestmark = [pytest.mark.live, pytest.mark.services, pytest.mark.django_db(transaction=True)]

REFRESH_SECONDS = 2


def unavailable(reason: str) -> None:
    if found.required():
        pytest.fail(f"REPLAY_REQUIRE_SERVICES=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def postgres() -> None:
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        # Not a skip in CI: `make test` runs the whole suite on PostgreSQL.
        pytest.skip("two processes share PostgreSQL: this runs in the PostgreSQL pass")
    if found.postgres_url() is None:
        unavailable("PostgreSQL is not reachable")


@pytest.fixture(scope="module")
def redis(postgres: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private redis-server on a free port (the machine's own Redis is left alone)."""
    if not available():
        unavailable("redis-server is not installed")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def pair(
    redis: RedisServer, django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Server]]:
    """Processes A and B on the Redis channel layer, refreshing their groups every 2 s."""
    tmp = tmp_path_factory.mktemp("daphne")
    env = {"REDIS_URL": redis.url, "REPLAY_GROUP_REFRESH_SECONDS": str(REFRESH_SECONDS)}
    with ThreadPoolExecutor(2) as pool:
        starting = [pool.submit(start_daphne, tmp, env) for _ in range(2)]
    servers = [s.result() for s in starting if s.exception() is None]
    try:
        failed = [s.exception() for s in starting if s.exception() is not None]
        if failed:
            raise RuntimeError(f"a daphne did not start: {failed[0]}")
        yield servers[0], servers[1]
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def watchers() -> Iterator[list[LiveClient]]:
    opened: list[LiveClient] = []
    yield opened
    for client in opened:
        if client.ws is not None:
            client.ws.close()


def watch(
    watchers: list[LiveClient],
    server: Server,
    conversation_id: str,
    cookie: str,
    params: str = "vision=1&shape=openai",
) -> LiveClient:
    """A watcher that loaded the page from `server` and follows it live."""
    client = LiveClient(server.url, conversation_id, cookie, params=params)
    watchers.append(client)
    client.load_page()
    client.connect()
    return client


def describe(client: LiveClient) -> str:
    return (
        f"{client.base_url} {client.params}: closes {client.closes}, reconnects "
        f"{client.reconnects}, redundant {client.redundant}, "
        f"received {[(x.seq, x.blocks) for x in client.received]}"
    )


def test_block_ingested_through_one_process_reaches_watchers_on_both(
    pair: tuple[Server, Server], token: str, watchers: list[LiveClient]
) -> None:
    a, b = pair
    cookie = operator_cookie()
    api_a, api_b = Api(a, token), Api(b, token)
    try:
        conversation_id = api_a.conversation()
        api_a.message(conversation_id, "user", text("hello"))
        on_a = watch(watchers, a, conversation_id, cookie)
        on_b = watch(watchers, b, conversation_id, cookie, "vision=0&shape=anthropic")

        seq = api_a.message(conversation_id, "assistant", text("from A"))
        for client in (on_a, on_b):
            client.wait_for_record(timeout=10)
        api_a.block(conversation_id, seq, {"type": "reasoning", "text": "a block through A"})
        for client in (on_a, on_b):
            client.wait_for_record(timeout=10)
        api_b.message(conversation_id, "user", text("and one through B"))
        for client in (on_a, on_b):
            client.wait_for_record(timeout=10)
            assert_once_in_order(client.received, new_from=1)
            assert [(x.seq, x.blocks) for x in client.received] == [(1, 1), (1, 2), (2, 1)]
            client.assert_equals_fresh_page()
    finally:
        api_a.close()
        api_b.close()


def outage(redis: RedisServer, how: str) -> None:
    if how == "stopped-2s":  # refused: every layer connection drops
        redis.stop()
        time.sleep(2.0)
        redis.start()
    elif how == "restarted":  # back at once and empty: sockets may live on, their groups gone
        redis.restart()
    else:  # hanging: connections stay open and every command waits
        redis.pause()
        time.sleep(2.0)
        redis.resume()


@dataclass
class Post:
    kind: str
    status: int
    seconds: float


@pytest.mark.parametrize("how", ["stopped-2s", "restarted", "hanging-2s"])
def test_redis_outage_during_ingest_loses_nothing(
    pair: tuple[Server, Server],
    redis: RedisServer,
    token: str,
    watchers: list[LiveClient],
    how: str,
) -> None:
    a, b = pair
    cookie = operator_cookie()
    api = Api(a, token)
    conversation_id = api.conversation()
    api.message(conversation_id, "system", text("watch me"))
    api.close()
    clients = [
        watch(watchers, a, conversation_id, cookie),
        watch(watchers, b, conversation_id, cookie),
        watch(watchers, b, conversation_id, cookie, "vision=0&shape=anthropic"),
    ]
    posts: list[Post] = []
    errors: list[BaseException] = []
    ingesting = threading.Event()
    ingesting.set()

    def ingest() -> None:
        # A message, then a block on it, again and again, through process A only.
        base = f"/api/conversations/{conversation_id}/messages"
        seq: Any = None
        try:
            with a.client(token) as http:
                while ingesting.is_set():
                    started = time.monotonic()
                    if seq is None:
                        kind = "message"
                        response = http.post(base, json={"role": "assistant", "blocks": []})
                    else:
                        kind = "block"
                        response = http.post(f"{base}/{seq}/blocks", json=text(f"b{len(posts)}"))
                    posts.append(Post(kind, response.status_code, time.monotonic() - started))
                    seq = response.json()["seq"] if kind == "message" else None
                    time.sleep(0.05)
        except BaseException as exc:
            errors.append(exc)

    def follow(client: LiveClient) -> None:
        # Receives all along, reconnecting with a resume frame after every close.
        try:
            client.wait_for(lambda: not ingesting.is_set(), timeout=60, reconnect=True)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ingest)]
    threads += [threading.Thread(target=follow, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        down_at = len(posts)
        outage(redis, how)
        up_at = len(posts)
        time.sleep(1.5)
    finally:
        ingesting.clear()
        for thread in threads:
            thread.join(30)
    assert not any(t.is_alive() for t in threads), "a thread is stuck"

    assert not errors, errors
    assert [p for p in posts if p.status != 201] == [], "every POST answers 201"
    if how != "restarted":
        assert up_at - down_at >= 2, f"ingest stalled while Redis was out: {posts}"
        assert "could not publish" in a.log.read_text(), "the layer failure is logged"
    slowest = max(p.seconds for p in posts)
    assert slowest < 2.0, f"a POST took {slowest:.2f}s while Redis was out"

    for client in clients:
        client.wait_for_record(timeout=REFRESH_SECONDS * 5, reconnect=True)
    for client in clients:
        # Every message exactly once, in order, with its blocks: a fresh reload's page.
        assert client.counts() == client.expected(), describe(client)
        first_seen = list(dict.fromkeys(x.seq for x in client.received))
        assert first_seen == sorted(first_seen), describe(client)
        client.assert_equals_fresh_page()


def test_watchers_on_both_processes_get_every_change_once_in_order(
    pair: tuple[Server, Server], token: str, watchers: list[LiveClient]
) -> None:
    """docs/contract.md §4's live delivery over Redis: each process joins the conversation's group
    once and renders each change once per view; changes posted through both processes, faster than
    one at a time, reach every watcher on both exactly once, in order."""
    a, b = pair
    cookie = operator_cookie()
    apis = [Api(a, token), Api(b, token)]
    try:
        conversation_id = apis[0].conversation()
        apis[0].message(conversation_id, "system", text("watch me"))
        clients = [
            watch(watchers, server, conversation_id, cookie, params)
            for server in (a, b)
            for params in ("vision=1&shape=openai",) * 3 + ("vision=0&shape=anthropic",) * 2
        ]
        seq = 0
        for n in range(24):
            api = apis[n % 2]
            if n % 4 == 0:
                seq = api.message(conversation_id, "assistant", text(f"m{n}"))
            else:
                api.block(conversation_id, seq, text(f"block {n}"))
        for client in clients:
            client.wait_for_record(timeout=15)
        for client in clients:
            assert client.quiet(0.2) == [], describe(client)
            assert_once_in_order(client.received, new_from=1)
            assert client.redundant == 0, describe(client)
            client.assert_equals_fresh_page()
    finally:
        for api in apis:
            api.close()
