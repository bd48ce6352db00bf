"""`REDIS_URL=unix:///path/to/redis.sock`: the channel layer (and the readiness check)
reach a Redis that listens on a Unix socket only (docs/configuration.md)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conversations.record.services.api_tokens import api_token_create
from tests.conftest import Server, start_daphne
from tests.live.test_live_e2e import Api, LiveClient, operator_cookie, text
from tests.redis_server import RedisServer, available
from tests.site.test_health import probe

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not available(), reason="redis-server is not installed"),
]


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    # A short directory of its own: a socket's path holds at most 107 bytes.
    directory = Path(tempfile.mkdtemp(prefix="replay-redis-"))
    server = RedisServer(directory, unix_socket=True)
    server.start()
    yield server
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)


def test_a_server_on_a_unix_socket_redis_is_ready_and_pushes_to_its_watchers(
    transactional_db: None, redis: RedisServer, tmp_path: Path
) -> None:
    assert redis.url.startswith("unix:///")
    server: Server = start_daphne(tmp_path, {"REDIS_URL": redis.url})
    _token, clear = api_token_create(label="unix socket")
    api = Api(server, clear)
    try:
        ready = probe(server, "/readyz")
        assert ready.status_code == 200, server.log.read_text()
        assert ready.json()["checks"]["channel_layer"] == "ok"
        conversation_id = api.conversation()
        client = LiveClient(server.url, conversation_id, operator_cookie())
        client.connect(resume=False)
        try:
            api.message(conversation_id, "user", text("through the unix socket"))
            client.wait_for_record()  # group_send went through that Redis
            assert "through the unix socket" in client.held[0].html
        finally:
            client.close()
    finally:
        api.close()
        server.stop()
