"""Fan-out is never on the request's path (docs/architecture.md, The path of one new block): in a
server, a POST hands its one event to the event loop's outbox and answers; a hanging channel layer
costs it nothing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conversations.record.models.conversation import Block
from conversations.record.services.api_tokens import api_token_create
from conversations.record.services.conversations import conversation_create
from tests.conftest import start_daphne
from tests.record.test_events import SilentServer, silent_server  # noqa: F401  (fixture)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

TIMEOUT_MS = 6000


def test_a_post_answers_at_once_while_the_layer_hangs(
    tmp_path: Path,
    silent_server: SilentServer,  # noqa: F811
) -> None:
    conversation = conversation_create(title="Hanging layer, live")
    _, token = api_token_create(label="off path")
    server = start_daphne(
        tmp_path,
        env={
            "REDIS_URL": f"redis://127.0.0.1:{silent_server.port}/0",
            "REPLAY_BROADCAST_TIMEOUT_MS": str(TIMEOUT_MS),
        },
    )
    try:
        with server.client(token) as client:
            path = f"/api/conversations/{conversation.id}/messages"
            took = []
            for n in range(3):
                started = time.monotonic()
                response = client.post(path, json={"role": "user", "blocks": [
                    {"type": "text", "text": f"kept {n}"}]})  # fmt: skip
                took.append(time.monotonic() - started)
                assert response.status_code == 201, response.text
        # Waiting on the layer would take the whole timeout, each time.
        assert max(took) < TIMEOUT_MS / 1000 / 2, took
        texts = Block.objects.filter(message__conversation=conversation).values_list(
            "text", flat=True
        )
        assert sorted(texts) == ["kept 0", "kept 1", "kept 2"]
        # The send really was tried, and its failure is logged once the timeout passes.
        deadline = time.monotonic() + TIMEOUT_MS / 1000 + 10
        while "did not answer in" not in server.log.read_text(errors="replace"):
            assert time.monotonic() < deadline, server.log.read_text(errors="replace")[-2000:]
            time.sleep(0.2)
        assert silent_server.accepted
    finally:
        server.stop()
