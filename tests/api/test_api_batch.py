"""POST /api/conversations/ID/messages/batch (docs/contract.md §3): many messages, all or
nothing."""

from __future__ import annotations

from typing import Any

import pytest

from conversations.record.models.conversation import Message
from conversations.record.schemas import MAX_BATCH_MESSAGES
from tests.api.test_api import append, assert_error, create, one, state
from tests.builders import png, text, tool_result, tool_use

pytestmark = pytest.mark.django_db


def batch_url(cid: Any) -> str:
    return f"/api/conversations/{cid}/messages/batch"


@pytest.fixture
def conversation(api) -> dict[str, Any]:
    body = create(api, "Batch")
    append(api, body["id"], "system", [text("be brief")])
    return body


def test_a_batch_is_stored_after_the_record_and_answers_its_seqs(api, conversation):
    cid = conversation["id"]
    response = api.post(
        batch_url(cid),
        {
            "messages": [
                {"role": "user", "blocks": [text("q")], "metadata": {"source_id": "u1"}},
                {"role": "assistant", "blocks": [tool_use("c1", "search", q="x")]},
                {"role": "user", "blocks": [tool_result("c1", "found")]},
                {"role": "assistant"},
            ]
        },
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["seqs"] == [1, 4]
    assert body["conversation_id"] == cid
    assert body["url"].endswith(f"/c/{cid}/#m-1")
    record = api.get(one(cid)).json()
    assert record["message_count"] == 5
    assert [m["seq"] for m in record["messages"]] == [0, 1, 2, 3, 4]
    assert record["messages"][1]["metadata"] == {"source_id": "u1"}
    assert record["messages"][3]["blocks"][0]["name"] == "search"  # resolved in the batch
    assert record["messages"][4]["blocks"] == []


def test_a_block_origin_is_kept_and_shown_in_the_record(api, conversation):
    origin = {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}
    block = text("[document (a.pdf): not stored]") | {"origin": origin}
    response = api.post(
        batch_url(conversation["id"]), {"messages": [{"role": "user", "blocks": [block]}]}
    )
    assert response.status_code == 201, response.content
    stored = api.get(one(conversation["id"])).json()["messages"][1]["blocks"][0]
    assert stored == {"seq": 0, "type": "text", "text": block["text"], "origin": origin}
    # and it never crosses into a replay
    replay = api.get(f"/api/conversations/{conversation['id']}/replay").content.decode()
    assert "example.com" not in replay


@pytest.mark.parametrize(
    ("messages", "mentions"),
    [
        (
            [{"role": "user"}] * 3 + [{"role": "user", "blocks": [{"type": "text"}]}],
            ["messages[3].blocks[0].text", "required"],
        ),
        (
            [{"role": "user"}, {"role": "user", "blocks": [{"type": "text", "text": 3}]}],
            ["messages[1].blocks[0].text"],
        ),
        ([{"role": "tool"}], ["messages[0].role"]),
        ([{"role": "user", "extra": 1}], ["messages[0].extra"]),
        (
            [{"role": "user"}, {"role": "assistant", "blocks": [png()]}],
            ["messages[1].blocks[0]", "user messages"],
        ),
        (
            [{"role": "user", "blocks": [text("a") | {"origin": "not an object"}]}],
            ["messages[0].blocks[0].origin"],
        ),
        ([{"role": "user", "metadata": {"k": "a\x00b"}}], ["messages[0].metadata"]),
        ([], ["messages"]),
    ],
)
def test_a_bad_batch_is_refused_whole_naming_the_path(api, conversation, messages, mentions):
    before = state()
    assert_error(api.post(batch_url(conversation["id"]), {"messages": messages}), 400, *mentions)
    assert state() == before


@pytest.mark.parametrize("body", [{}, {"messages": {}}, {"messages": [], "extra": 1}])
def test_a_malformed_batch_body_is_refused(api, conversation, body):
    before = state()
    assert_error(api.post(batch_url(conversation["id"]), body), 400, "messages" if body else "")
    assert state() == before


def test_more_than_the_limit_is_refused(api, conversation):
    before = state()
    messages = [{"role": "user"}] * (MAX_BATCH_MESSAGES + 1)
    assert_error(api.post(batch_url(conversation["id"]), {"messages": messages}), 400, "messages")
    assert state() == before


def test_the_limit_itself_is_stored(api, conversation):
    messages = [{"role": "user", "blocks": [text(f"m{i}")]} for i in range(MAX_BATCH_MESSAGES)]
    response = api.post(batch_url(conversation["id"]), {"messages": messages})
    assert response.status_code == 201, response.content
    assert response.json()["seqs"] == [1, MAX_BATCH_MESSAGES]
    seqs = Message.objects.filter(conversation_id=conversation["id"]).values_list("seq", flat=True)
    assert sorted(seqs) == list(range(MAX_BATCH_MESSAGES + 1))


def test_a_batch_for_an_unknown_conversation_is_not_found(api):
    before = state()
    url = batch_url("00000000-0000-0000-0000-000000000000")
    assert_error(api.post(url, {"messages": [{"role": "user"}]}), 404)
    assert state() == before


@pytest.mark.parametrize("header", [None, "Bearer rpl_not-a-token"])
def test_anonymous_and_outsider_batches_are_refused(anonymous_api, conversation, header):
    before = state()
    response = anonymous_api.post(
        batch_url(conversation["id"]),
        {"messages": [{"role": "user"}]},
        headers={"Authorization": header} if header else None,
    )
    assert_error(response, 401)
    assert state() == before


def test_a_repeated_batch_with_the_same_key_is_stored_once(api, conversation):
    body = {"messages": [{"role": "user", "blocks": [text("once")]}] * 3}
    headers = {"Idempotency-Key": "batch-1"}
    first = api.post(batch_url(conversation["id"]), body, headers=headers)
    again = api.post(batch_url(conversation["id"]), body, headers=headers)
    assert first.status_code == again.status_code == 201
    assert first.content == again.content
    assert Message.objects.filter(conversation_id=conversation["id"]).count() == 4
