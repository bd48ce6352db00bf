"""The JSON API over a real daphne: the body limit with and without Content-Length, and the
curl flow of docs/api.md end to end."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from typing import Any

import httpx2 as httpx  # noqa: F401 (the client the fixtures hand out)
import orjson
import pytest
from PIL import Image

from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.services.api_tokens import api_token_create
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_create
from tests.conftest import Server, start_daphne

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

MB = 1024 * 1024


@pytest.fixture(scope="module")
def small_daphne(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A daphne whose body limit is 1 MB, so that going over it is quick."""
    server = start_daphne(tmp_path_factory.mktemp("small"), env={"REPLAY_MAX_BODY_MB": "1"})
    yield server
    server.process.terminate()
    server.process.wait(10)


@pytest.fixture
def live_token() -> str:
    _, clear = api_token_create(label="live")
    return clear


def stored() -> tuple[int, int, int]:
    return Conversation.objects.count(), Message.objects.count(), Block.objects.count()


def padded_message(size: int) -> bytes:
    """A valid message body of about `size` bytes."""
    body = orjson.dumps({"role": "user", "blocks": [{"type": "text", "text": ""}]})
    return body.replace(b'"text":""', b'"text":"' + b"x" * (size - len(body)) + b'"')


def chunks(raw: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for start in range(0, len(raw), size):
        yield raw[start : start + size]


@pytest.fixture
def live_conversation(live_token: str) -> str:
    conversation = conversation_create(title="Live")
    message_append(conversation=conversation, role="user", blocks=[])
    return str(conversation.id)


def assert_too_big(response: Any) -> None:
    assert response.status_code == 413, response.text
    assert response.headers["content-type"] == "application/json"
    assert "REPLAY_MAX_BODY_MB" in response.json()["error"]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("endpoint", ["create", "message", "block"])
def test_a_body_over_the_limit_is_refused_and_stores_nothing(
    small_daphne, live_token, live_conversation, chunked, endpoint
):
    path, raw = {
        "create": ("/api/conversations", orjson.dumps({"title": "x" * (2 * MB)})),
        "message": (f"/api/conversations/{live_conversation}/messages", padded_message(2 * MB)),
        "block": (
            f"/api/conversations/{live_conversation}/messages/0/blocks",
            orjson.dumps({"type": "text", "text": "y" * (2 * MB)}),
        ),
    }[endpoint]
    before = stored()
    with small_daphne.client(live_token) as client:
        response = client.post(
            path,
            content=chunks(raw) if chunked else raw,
            headers={"Content-Type": "application/json"},
        )
    assert ("content-length" in response.request.headers) is not chunked
    assert response.request.headers.get("transfer-encoding") == ("chunked" if chunked else None)
    assert_too_big(response)
    assert stored() == before


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_just_under_the_limit_is_stored(
    small_daphne, live_token, live_conversation, chunked
):
    raw = padded_message(MB - 64)
    with small_daphne.client(live_token) as client:
        response = client.post(
            f"/api/conversations/{live_conversation}/messages",
            content=chunks(raw) if chunked else raw,
            headers={"Content-Type": "application/json"},
        )
    assert response.status_code == 201, response.text
    assert len(Block.objects.get(message__seq=1).text) == len(raw) - len(padded_message(0))


def test_an_oversized_body_with_a_bad_token_gets_a_json_error(small_daphne, live_conversation):
    with small_daphne.client("rpl_unknown") as client:
        response = client.post("/api/conversations", content=chunks(b"z" * 2 * MB))
    assert response.status_code in (401, 413)
    assert "error" in response.json()


def png_b64() -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (3, 3), (0, 128, 0)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def test_the_api_guide_flow_works_end_to_end(daphne, live_token):
    png = png_b64()
    with daphne.client(live_token) as client:
        created = client.post("/api/conversations", json={"title": "Demo", "metadata": {"a": 1}})
        assert created.status_code == 201, created.text
        conversation = created.json()
        cid = conversation["id"]
        assert conversation["url"] == f"{daphne.url}/c/{cid}/"

        system = client.post(
            f"/api/conversations/{cid}/messages",
            json={"role": "system", "blocks": [{"type": "text", "text": "Be brief."}]},
        )
        user = client.post(
            f"/api/conversations/{cid}/messages",
            json={
                "role": "user",
                "blocks": [
                    {"type": "text", "text": "What is the weather in Paris?"},
                    {"type": "image", "media_type": "image/png", "data": png},
                ],
            },
        )
        assistant = client.post(
            f"/api/conversations/{cid}/messages",
            json={
                "role": "assistant",
                "blocks": [
                    {"type": "tool_use", "id": "call_1", "name": "weather",
                     "input": {"city": "Paris", "unit": "C"}},
                ],
            },
        )  # fmt: skip
        assert [r.status_code for r in (system, user, assistant)] == [201, 201, 201]
        assert [r.json()["seq"] for r in (system, user, assistant)] == [0, 1, 2]

        block = client.post(
            f"/api/conversations/{cid}/messages/2/blocks",
            json={"type": "tool_result", "tool_use_id": "call_1", "content": "18°C"},
        )
        assert block.status_code == 201, block.text
        assert block.json()["seq"] == 1
        assert block.json()["type"] == "tool_result"  # the 201 names the block, no body

        replayed = client.get(
            f"/api/conversations/{cid}/replay", params={"vision": "0", "shape": "anthropic"}
        )
        assert replayed.status_code == 200
        assert replayed.json() == {
            "system": "Be brief.",
            "messages": [
                {
                    "role": "user",
                    "content": "What is the weather in Paris?\n\n"
                    "[Image (image/png): not seen — this model cannot view images]",
                },
                {
                    "role": "assistant",
                    "content": 'Tool use: weather({"city":"Paris","unit":"C"})\n\n'
                    "Result (weather): 18°C",
                },
            ],
        }

        record = client.get(f"/api/conversations/{cid}")
        assert record.status_code == 200
        assert [len(m["blocks"]) for m in record.json()["messages"]] == [1, 2, 2]
        assert record.json()["messages"][2]["blocks"][1]["name"] == "weather"  # resolved
        assert client.get(f"/api/conversations/{cid}").content == record.content

        listed = client.get("/api/conversations", params={"q": "Demo"}).json()
        assert [c["id"] for c in listed["results"]] == [cid]

    with daphne.client() as anonymous:
        refused = anonymous.get(f"/api/conversations/{cid}/replay")
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
