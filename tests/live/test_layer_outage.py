"""A process whose Redis is unreachable (docs/contract.md §4, Live delivery): the channel
layer is a hint, not the record, so its sockets still open and catch up from the database,
and the failure is logged once a while, not once per handshake. A real daphne, its
REDIS_URL at a port nobody listens on or at a private Redis that is then stopped."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed

from conversations.live.layers import UNREACHABLE, Outage
from conversations.record.models.conversation import Conversation
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_create
from tests.conftest import Server, free_port, start_daphne
from tests.live.test_live_e2e import LiveClient, open_socket, operator_cookie, text
from tests.redis_server import RedisServer, available

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

HANDSHAKES = 12


@pytest.fixture(params=["closed-port", "stopped"])
def unreachable(
    request: pytest.FixtureRequest, tmp_path: Path, transactional_db: None
) -> Iterator[Server]:
    """A daphne whose Redis is not there: never was (a closed port), or went away after the
    server had used it."""
    if request.param == "closed-port":
        server = start_daphne(tmp_path, {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/3"})
        yield server
        server.stop()
        return
    if not available():
        pytest.skip("redis-server is not installed")
    redis = RedisServer(tmp_path)
    redis.start()
    server = start_daphne(tmp_path, {"REDIS_URL": redis.url})
    try:
        # The server talks to its Redis first (a socket joins its groups), then it is gone.
        headers = {"Cookie": f"sessionid={operator_cookie()}", "Origin": server.url}
        ws = open_socket(server.url.replace("http", "ws", 1) + "/ws/conversations/", headers)
        with pytest.raises(TimeoutError):
            ws.recv(timeout=0.3)  # open, and quiet
        ws.close()
        redis.stop()
        yield server
    finally:
        server.stop()
        redis.stop()


def add(conversation_id: str, value: str) -> None:
    """Stored without the server hearing of it (this process's layer is its own)."""
    message_append(
        conversation=Conversation.objects.get(pk=conversation_id),
        role="user",
        blocks=[BLOCK_ADAPTER.validate_python(text(value))],
    )


def test_sockets_open_and_catch_up_from_the_database_without_redis(
    unreachable: Server,
) -> None:
    server = unreachable
    cookie = operator_cookie()
    conversation = conversation_create(title="no layer")
    cid = str(conversation.id)
    add(cid, "before the page")
    client = LiveClient(server.url, cid, cookie)
    client.load_page()
    add(cid, "after the page")
    add(cid, "and another")
    try:
        client.connect()  # its resume report brings what it misses, from the database
        client.wait_for_record(timeout=10)
        assert client.counts() == {0: 1, 1: 1, 2: 1}
        for _ in range(HANDSHAKES):
            other = LiveClient(server.url, cid, cookie)
            other.load_page()
            other.connect()
            assert other.ws is not None
            try:
                other.ws.recv(timeout=0.2)  # nothing is missing: nothing comes, no close
            except TimeoutError:
                pass
            except ConnectionClosed as closed:  # pragma: no cover (the failure shown)
                raise AssertionError(f"closed with {closed.rcvd}") from closed
            other.ws.close()
    finally:
        if client.ws is not None:
            client.ws.close()
    log = server.log.read_text(errors="replace")
    assert "Traceback" not in log, log
    assert " 500 " not in log and "HTTP 500" not in log, log
    assert log.count(UNREACHABLE) == 1, log


def test_an_outage_is_logged_once_per_interval_with_its_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    outage = Outage(lambda: now[0], every=60)
    failure = ConnectionError("Error 111 connecting")
    with caplog.at_level(logging.WARNING, logger="conversations.live.layers"):
        for _ in range(500):  # a mass reconnect into the outage
            outage.failed("group join", failure)
        now[0] = 59.0
        outage.failed("receive", failure)
        assert [r.getMessage().count(UNREACHABLE) for r in caplog.records] == [1]
        now[0] = 60.0
        outage.failed("receive", failure)
        assert len(caplog.records) == 2
        assert "(501 failures, the last a receive" in caplog.records[1].getMessage()
        outage.answered()
        outage.answered()
        assert [r.getMessage() for r in caplog.records[2:]] == ["the channel layer answers again"]
        outage.failed("receive", failure)  # a new outage is told at once
        assert len(caplog.records) == 4
