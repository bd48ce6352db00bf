"""The JSON API (docs/contract.md §3): bearer tokens only, JSON errors naming the field, nothing
stored from a refused request, deterministic reads in a constant number of queries."""

from __future__ import annotations

import base64
import io
import json
import uuid
from typing import Any

import orjson
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from PIL import Image

from conversations.core import replay
from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.models.tokens import IdempotentResponse
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.services.api_tokens import api_token_create, api_token_revoke
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_create
from tests.conftest import ApiClient

LIST = "/api/conversations"


def png_b64(size: tuple[int, int] = (2, 2)) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def one(cid: Any) -> str:
    return f"{LIST}/{cid}"


def messages_url(cid: Any) -> str:
    return f"{LIST}/{cid}/messages"


def blocks_url(cid: Any, seq: int) -> str:
    return f"{LIST}/{cid}/messages/{seq}/blocks"


def replay_url(cid: Any) -> str:
    return f"{LIST}/{cid}/replay"


def state() -> tuple[Any, ...]:
    """Everything the API can store, to show that a refused request stored nothing."""
    return (
        list(
            Conversation.objects.order_by("id").values_list(
                "id", "title", "metadata", "message_count", "updated_at"
            )
        ),
        list(
            Message.objects.order_by("id").values_list(
                "id", "conversation_id", "seq", "role", "block_count"
            )
        ),
        list(Block.objects.order_by("id").values_list()),
        IdempotentResponse.objects.count(),
    )


def create(api: ApiClient, title: str = "A conversation", **extra: Any) -> dict[str, Any]:
    response = api.post(LIST, {"title": title, **extra})
    assert response.status_code == 201, response.content
    return response.json()


def append(api: ApiClient, cid: str, role: str, blocks: list[Any]) -> dict[str, Any]:
    response = api.post(messages_url(cid), {"role": role, "blocks": blocks})
    assert response.status_code == 201, response.content
    return response.json()


def assert_error(response: Any, status: int, *mentions: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert isinstance(body["error"], str) and body["error"]
    for mention in mentions:
        assert mention in body["error"], body
    return body


@pytest.fixture
def conversation(api: ApiClient) -> dict[str, Any]:
    body = create(api, "Existing")
    append(api, body["id"], "user", [{"type": "text", "text": "hello"}])
    return body


# --- authentication ------------------------------------------------------------------


def endpoints(cid: str) -> list[tuple[str, str, Any]]:
    return [
        ("get", LIST, None),
        ("post", LIST, {"title": "new"}),
        ("get", one(cid), None),
        ("post", messages_url(cid), {"role": "user", "blocks": []}),
        ("post", blocks_url(cid, 0), {"type": "text", "text": "more"}),
        ("get", replay_url(cid), None),
    ]


ENDPOINT_IDS = ["list", "create", "record", "append-message", "append-block", "replay"]


def call(client: ApiClient, method: str, path: str, body: Any) -> Any:
    return client.get(path) if method == "get" else client.post(path, body)


@pytest.mark.parametrize("index", range(6), ids=ENDPOINT_IDS)
def test_operator_with_a_token_is_served(api, conversation, index):
    method, path, body = endpoints(conversation["id"])[index]
    response = call(api, method, path, body)
    assert response.status_code == (201 if method == "post" else 200), response.content
    assert response["Content-Type"] == "application/json"


@pytest.mark.parametrize("index", range(6), ids=ENDPOINT_IDS)
def test_anonymous_request_is_refused_with_a_bearer_challenge(anonymous_api, conversation, index):
    method, path, body = endpoints(conversation["id"])[index]
    before = state()
    response = call(anonymous_api, method, path, body)
    assert_error(response, 401, "Authorization")
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert state() == before


def revoked_token() -> str:
    token, clear = api_token_create(label="revoked")
    api_token_revoke(token=token)
    return clear


OUTSIDERS = {
    "unknown-token": lambda: "Bearer rpl_not-a-token-anyone-was-given",
    "revoked-token": lambda: f"Bearer {revoked_token()}",
    "basic-scheme": lambda: "Basic x",
    "bearer-without-token": lambda: "Bearer",
    "bearer-with-blank-token": lambda: "Bearer    ",
    "token-without-scheme": lambda: "rpl_abc",
}


@pytest.mark.parametrize("outsider", OUTSIDERS)
@pytest.mark.parametrize("index", range(6), ids=ENDPOINT_IDS)
def test_outsider_request_is_refused_with_a_bearer_challenge(
    anonymous_api, conversation, index, outsider
):
    header = OUTSIDERS[outsider]()
    method, path, body = endpoints(conversation["id"])[index]
    before = state()
    if method == "get":
        response = anonymous_api.get(path, headers={"Authorization": header})
    else:
        response = anonymous_api.post(path, body, headers={"Authorization": header})
    assert_error(response, 401)
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert state() == before


def test_the_bearer_scheme_is_case_insensitive(token, conversation):
    client = ApiClient(None)
    response = client.get(LIST, headers={"Authorization": f"bearer {token}"})
    assert response.status_code == 200


@pytest.mark.parametrize("index", range(6), ids=ENDPOINT_IDS)
def test_a_signed_in_session_without_a_token_is_refused(anonymous_api, conversation, index):
    user = get_user_model().objects.create_superuser("op", "op@example.com", "pw-Secret-123")
    anonymous_api.client.force_login(user)
    method, path, body = endpoints(conversation["id"])[index]
    before = state()
    response = call(anonymous_api, method, path, body)
    assert_error(response, 401)
    assert state() == before


def test_api_posts_need_no_csrf_token(token):
    client = Client(enforce_csrf_checks=True)
    response = client.post(
        LIST,
        b'{"title": "no csrf"}',
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 201


# --- POST /api/conversations ---------------------------------------------------------


@pytest.mark.sqlite
def test_creating_a_conversation_answers_its_id_title_url_and_metadata(api):
    response = api.post(LIST, {"title": "Support run ✓", "metadata": {"agent": "triage"}})
    assert response.status_code == 201
    body = response.json()
    stored = Conversation.objects.get(pk=body["id"])
    assert body["title"] == stored.title == "Support run ✓"
    assert body["metadata"] == stored.metadata == {"agent": "triage"}
    assert body["url"] == f"http://testserver/c/{stored.id}/"
    assert body["message_count"] == 0


def test_metadata_defaults_to_an_empty_object(api):
    body = create(api, "plain")
    assert body["metadata"] == {}
    assert Conversation.objects.get(pk=body["id"]).metadata == {}


BAD_CONVERSATIONS = {
    "not-json": (b'{"title": ', "JSON"),
    "empty-body": (b"", "empty"),
    "json-array": (b'[{"title": "x"}]', "object"),
    "json-string": (b'"title"', "object"),
    "missing-title": (b'{"metadata": {}}', "title"),
    "title-not-a-string": (b'{"title": 5}', "title"),
    "title-null": (b'{"title": null}', "title"),
    "title-too-long": (orjson.dumps({"title": "x" * 501}), "title"),
    "title-with-nul": (b'{"title": "a\\u0000b"}', "title"),
    "extra-field": (b'{"title": "x", "colour": "red"}', "colour"),
    "metadata-a-list": (b'{"title": "x", "metadata": [1, 2]}', "metadata"),
    "metadata-a-string": (b'{"title": "x", "metadata": "{}"}', "metadata"),
    "metadata-with-nul": (b'{"title": "x", "metadata": {"k": ["\\u0000"]}}', "metadata"),
}


@pytest.mark.parametrize("case", BAD_CONVERSATIONS)
def test_a_bad_conversation_body_is_refused_naming_the_field(api, case):
    raw, field = BAD_CONVERSATIONS[case]
    before = state()
    assert_error(api.post(LIST, raw), 400, field)
    assert state() == before


# --- GET /api/conversations ----------------------------------------------------------


def titles(response: Any) -> list[str]:
    assert response.status_code == 200, response.content
    return [c["title"] for c in response.json()["results"]]


@pytest.mark.sqlite
def test_list_shows_newest_activity_first(api):
    a, b, c = (create(api, title) for title in ("a", "b", "c"))
    assert titles(api.get(LIST)) == ["c", "b", "a"]
    append(api, a["id"], "user", [])
    assert titles(api.get(LIST)) == ["a", "c", "b"]
    append(api, b["id"], "user", [])
    response = api.post(blocks_url(a["id"], 0), {"type": "text", "text": "late"})
    assert response.status_code == 201
    assert titles(api.get(LIST)) == ["a", "b", "c"]
    listed = api.get(LIST).json()["results"][0]
    assert listed["id"] == a["id"] and listed["message_count"] == 1
    assert listed["url"] == f"http://testserver/c/{a['id']}/"


@pytest.mark.sqlite
def test_search_finds_conversations_by_title_and_by_block_text(api):
    by_title = create(api, "Refund for the Zebra order")
    by_text = create(api, "Untitled")
    append(api, by_text["id"], "user", [{"type": "text", "text": "my zebra is broken"}])
    by_result = create(api, "Tools")
    append(
        api,
        by_result["id"],
        "assistant",
        [
            {"type": "tool_use", "id": "c1", "name": "lookup", "input": {}},
            {"type": "tool_result", "tool_use_id": "c1", "content": "ZEBRA-42 shipped"},
        ],
    )
    create(api, "Something else")
    found = api.get(LIST, q="zebra").json()
    assert {c["id"] for c in found["results"]} == {by_title["id"], by_text["id"], by_result["id"]}
    assert found["count"] == 3
    assert titles(api.get(LIST, q="nothing-matches-this")) == []
    assert len(titles(api.get(LIST, q=""))) == 4


@pytest.mark.sqlite
def test_search_matches_a_conversation_once_however_many_blocks_match(api):
    cid = create(api, "Repeats")["id"]
    append(api, cid, "user", [{"type": "text", "text": "needle"}] * 3)
    append(api, cid, "assistant", [{"type": "text", "text": "needle again"}])
    found = api.get(LIST, q="needle").json()
    assert [c["id"] for c in found["results"]] == [cid]
    assert found["count"] == 1


@pytest.mark.sqlite
@pytest.mark.parametrize("q", ["%", "_", "\\"])
def test_search_wildcards_are_taken_literally(api, q):
    create(api, "plain title")
    assert titles(api.get(LIST, q=q)) == []


@pytest.mark.sqlite
def test_list_is_paginated_with_next_and_previous_links(api):
    for n in range(5):
        create(api, f"c{n}")
    first = api.get(LIST, page_size="2").json()
    assert (first["count"], first["page"], first["pages"]) == (5, 1, 3)
    assert [c["title"] for c in first["results"]] == ["c4", "c3"]
    assert first["previous"] is None
    assert "page=2" in first["next"] and "page_size=2" in first["next"]
    second = api.get(first["next"].removeprefix("http://testserver")).json()
    assert [c["title"] for c in second["results"]] == ["c2", "c1"]
    assert "page=1" in second["previous"]
    last = api.get(second["next"].removeprefix("http://testserver")).json()
    assert [c["title"] for c in last["results"]] == ["c0"]
    assert last["next"] is None


@pytest.mark.sqlite
def test_pagination_links_keep_the_search(api):
    for n in range(3):
        create(api, f"needle {n}")
    create(api, "hay")
    first = api.get(LIST, q="needle", page_size="1").json()
    assert first["count"] == 3
    assert "q=needle" in first["next"]


def test_a_page_past_the_end_is_not_found(api):
    create(api)
    assert_error(api.get(LIST, page="3"), 404, "page")


@pytest.mark.parametrize(
    "params",
    [
        {"page": "0"},
        {"page": "abc"},
        {"page": "-1"},
        {"page": "1.5"},
        {"page_size": "0"},
        {"page_size": "many"},
    ],
)
def test_a_malformed_page_is_refused_naming_the_parameter(api, params):
    create(api)
    (name,) = params
    assert_error(api.get(LIST, **params), 400, name)


@pytest.mark.parametrize("value", ["²", "9" * 5000], ids=["superscript-digit", "5000-digits"])
def test_an_odd_page_number_is_refused_not_a_server_error(api, value):
    # "²".isdigit() is True but int("²") fails; so does int() of more than 4300 digits.
    create(api)
    response = api.get(LIST, page=value)
    assert response.status_code in (400, 404), response.status_code
    assert "error" in response.json()


@pytest.mark.sqlite
def test_a_search_with_a_nul_character_is_answered_not_a_server_error(api):
    # PostgreSQL text cannot hold U+0000: the query must be refused or matched, never crash.
    create(api, "plain")
    response = api.get(LIST, q="a\x00b")
    assert response.status_code in (200, 400), response.status_code
    if response.status_code == 200:
        assert response.json()["results"] == []
    else:
        assert "q" in response.json()["error"]


# --- GET /api/conversations/ID -------------------------------------------------------


TOOL_INPUT_RAW = (
    '{"zeta":1,"Ärger":"café ☕","alpha":{"y":[3,{"q":null,"b":true}],"b":"日本"},"10":-2.5,"":{}}'
)


@pytest.mark.sqlite
def test_the_record_holds_every_message_and_block_in_order(api):
    conv = create(api, "Whole", metadata={"k": [1, 2]})
    cid = conv["id"]
    append(api, cid, "system", [{"type": "text", "text": "Be brief."}])
    append(
        api,
        cid,
        "user",
        [
            {"type": "text", "text": "Look:"},
            {"type": "image", "media_type": "image/png", "data": png_b64()},
        ],
    )
    append(
        api,
        cid,
        "assistant",
        [
            {"type": "reasoning", "text": "Check the order."},
            {"type": "tool_use", "id": "call_1", "name": "orders", "input": {"id": 7}},
        ],
    )
    append(
        api,
        cid,
        "user",
        [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "none", "is_error": True},
        ],
    )
    append(api, cid, "assistant", [])
    api.post(blocks_url(cid, 0), {"type": "text", "text": "Be kind."})
    record = api.get(one(cid)).json()
    assert record["id"] == cid and record["title"] == "Whole"
    assert record["metadata"] == {"k": [1, 2]}
    assert record["message_count"] == 5
    assert record["url"] == f"http://testserver/c/{cid}/"
    assert [(m["seq"], m["role"]) for m in record["messages"]] == [
        (0, "system"),
        (1, "user"),
        (2, "assistant"),
        (3, "user"),
        (4, "assistant"),
    ]
    assert record["messages"][0]["blocks"] == [
        {"seq": 0, "type": "text", "text": "Be brief."},
        {"seq": 1, "type": "text", "text": "Be kind."},
    ]
    assert record["messages"][1]["blocks"] == [
        {"seq": 0, "type": "text", "text": "Look:"},
        {"seq": 1, "type": "image", "media_type": "image/png", "data": png_b64()},
    ]
    assert record["messages"][2]["blocks"] == [
        {"seq": 0, "type": "reasoning", "text": "Check the order."},
        {"seq": 1, "type": "tool_use", "id": "call_1", "name": "orders", "input": {"id": 7}},
    ]
    assert record["messages"][3]["blocks"] == [
        {
            "seq": 0,
            "type": "tool_result",
            "tool_use_id": "call_1",
            "name": "orders",
            "content": "none",
            "is_error": True,
        },
    ]
    assert record["messages"][4]["blocks"] == []


def test_the_record_is_deterministic(api):
    cid = create(api, "Twice", metadata={"b": 1, "a": {"d": 2, "c": 3}})["id"]
    append(api, cid, "user", [{"type": "text", "text": "one"}])
    append(
        api,
        cid,
        "assistant",
        [
            {"type": "tool_use", "id": "c", "name": "t", "input": orjson.loads(TOOL_INPUT_RAW)},
        ],
    )
    first = api.get(one(cid))
    second = api.get(one(cid))
    assert first.status_code == 200
    assert first.content == second.content


@pytest.mark.sqlite
def test_tool_use_input_keeps_its_key_order_byte_for_byte(api):
    cid = create(api, "Order")["id"]
    raw = TOOL_INPUT_RAW.encode()
    body = b'{"role": "assistant", "blocks": [{"type": "tool_use", "id": "c1", "name": "t", '
    body += b'"input": ' + raw + b"}]}"
    answer = api.post(messages_url(cid), body)
    assert answer.status_code == 201, answer.content
    assert b'"input"' not in answer.content  # the 201 names the message; it echoes no block
    record = api.get(one(cid))
    assert b'"input":' + raw in record.content
    assert list(record.json()["messages"][0]["blocks"][0]["input"]) == [
        "zeta",
        "Ärger",
        "alpha",
        "10",
        "",
    ]
    # The replay carries the same INPUT, as the projection's prose writes it.
    content = api.get(replay_url(cid)).json()["messages"][0]["content"]
    assert content == f"Tool use: t({TOOL_INPUT_RAW})"


def test_a_block_appended_later_keeps_its_input_order_too(api, conversation):
    raw = TOOL_INPUT_RAW.encode()
    body = b'{"type": "tool_use", "id": "c9", "name": "t", "input": ' + raw + b"}"
    assert api.post(blocks_url(conversation["id"], 0), body).status_code == 201
    assert b'"input":' + raw in api.get(one(conversation["id"])).content


@pytest.mark.parametrize("cid", [str(uuid.uuid4()), "not-a-uuid", "1234"])
def test_an_unknown_or_malformed_conversation_id_is_not_found(api, cid):
    assert_error(api.get(one(cid)), 404)
    assert_error(api.get(replay_url(cid)), 404)
    before = state()
    assert_error(api.post(messages_url(cid), {"role": "user", "blocks": []}), 404)
    assert_error(api.post(blocks_url(cid, 0), {"type": "text", "text": "x"}), 404)
    assert state() == before


IMAGE = {"type": "image", "media_type": "image/png", "data": base64.b64encode(b"x").decode()}


@pytest.mark.parametrize(
    "body",
    [b"", b"{", {"role": "robot", "blocks": []}, {"role": "assistant", "blocks": [IMAGE]}],
    ids=["empty", "not-json", "bad-role", "refused-by-the-service"],
)
def test_an_unknown_conversation_is_not_found_before_a_bad_body_is_refused(api, body):
    """An append reads no conversation first (the statement that counts it in finds it),
    yet an unknown one is still a 404 before whatever its body does wrong."""
    cid = str(uuid.uuid4())
    before = state()
    assert_error(api.post(messages_url(cid), body), 404, cid)
    batch = {"messages": [body]} if isinstance(body, dict) else body
    assert_error(api.post(f"{messages_url(cid)}/batch", batch), 404, cid)
    assert state() == before


# --- POST /api/conversations/ID/messages ---------------------------------------------


def test_messages_get_dense_seqs_from_zero(api):
    cid = create(api)["id"]
    answers = [append(api, cid, role, []) for role in ("system", "user", "assistant")]
    assert [a["seq"] for a in answers] == [0, 1, 2]
    assert answers[1]["url"] == f"http://testserver/c/{cid}/#m-1"
    assert answers[1]["conversation_id"] == cid
    assert answers[2]["block_count"] == 0 and "blocks" not in answers[2]
    assert list(Message.objects.filter(conversation_id=cid).values_list("seq", flat=True)) == [
        0,
        1,
        2,
    ]
    assert Conversation.objects.get(pk=cid).message_count == 3


@pytest.mark.sqlite
def test_a_message_may_carry_every_block_type(api):
    cid = create(api)["id"]
    png = png_b64()
    answer = append(
        api,
        cid,
        "user",
        [
            {"type": "text", "text": ""},
            {"type": "tool_use", "id": "c1", "name": "search", "input": {"q": "x"}},
            {"type": "tool_result", "tool_use_id": "c1", "content": "found"},
            {"type": "reasoning", "text": "hm"},
            {"type": "image", "media_type": "image/png", "data": png},
        ],
    )
    assert answer["block_count"] == 5 and "blocks" not in answer
    assert api.get(one(cid)).json()["messages"][0]["blocks"] == [
        {"seq": 0, "type": "text", "text": ""},
        {"seq": 1, "type": "tool_use", "id": "c1", "name": "search", "input": {"q": "x"}},
        {
            "seq": 2,
            "type": "tool_result",
            "tool_use_id": "c1",
            "name": "search",
            "content": "found",
            "is_error": False,
        },
        {"seq": 3, "type": "reasoning", "text": "hm"},
        {"seq": 4, "type": "image", "media_type": "image/png", "data": png},
    ]


GOOD = [
    {"type": "text", "text": "fine"},
    {"type": "tool_use", "id": "c1", "name": "t", "input": {}},
    {"type": "tool_result", "tool_use_id": "c1", "content": "ok"},
    {"type": "reasoning", "text": "fine"},
]

BAD_MESSAGES: dict[str, tuple[Any, str]] = {
    "unknown-type": ({"role": "user", "blocks": [GOOD[0], {"type": "video"}]}, "blocks[1].type"),
    "missing-type": ({"role": "user", "blocks": [{"text": "x"}]}, "blocks[0].type"),
    "missing-field": ({"role": "user", "blocks": [GOOD[0], {"type": "text"}]}, "blocks[1].text"),
    "wrong-type": (
        {"role": "user", "blocks": [GOOD[0], {"type": "text", "text": 5}]},
        "blocks[1].text",
    ),
    "extra-field": (
        {"role": "user", "blocks": [GOOD[0], {"type": "text", "text": "x", "lang": "en"}]},
        "blocks[1].lang",
    ),
    "only-the-last-block-is-bad": (
        {"role": "user", "blocks": [*GOOD, {"type": "reasoning", "text": None}]},
        "blocks[4].text",
    ),
    "tool-input-not-an-object": (
        {
            "role": "assistant",
            "blocks": [{"type": "tool_use", "id": "c", "name": "t", "input": [1]}],
        },
        "blocks[0].input",
    ),
    "empty-call-id": (
        {"role": "assistant", "blocks": [{"type": "tool_use", "id": "", "name": "t", "input": {}}]},
        "blocks[0].id",
    ),
    "is-error-not-a-bool": (
        {
            "role": "user",
            "blocks": [
                GOOD[1],
                {"type": "tool_result", "tool_use_id": "c1", "content": "x", "is_error": "yes"},
            ],
        },
        "blocks[1].is_error",
    ),
    "result-content-not-a-string": (
        {
            "role": "user",
            "blocks": [{"type": "tool_result", "tool_use_id": "c1", "content": ["x"]}],
        },
        "blocks[0].content",
    ),
    "text-with-nul": (
        {"role": "user", "blocks": [GOOD[0], {"type": "text", "text": "a\x00b"}]},
        "blocks[1].text",
    ),
    "block-not-an-object": ({"role": "user", "blocks": [GOOD[0], "hello"]}, "blocks[1]"),
    "blocks-not-a-list": ({"role": "user", "blocks": {"type": "text"}}, "blocks"),
    "tool-role": ({"role": "tool", "blocks": []}, "role"),
    "missing-role": ({"blocks": []}, "role"),
    "extra-message-field": ({"role": "user", "blocks": [], "name": "bob"}, "name"),
    "image-in-assistant-message": (
        {
            "role": "assistant",
            "blocks": [GOOD[0], {"type": "image", "media_type": "image/png", "data": png_b64()}],
        },
        "blocks[1]",
    ),
    "image-in-system-message": (
        {
            "role": "system",
            "blocks": [{"type": "image", "media_type": "image/png", "data": png_b64()}],
        },
        "blocks[0]",
    ),
    "image-not-decodable": (
        {
            "role": "user",
            "blocks": [GOOD[0], {"type": "image", "media_type": "image/png", "data": "aGVsbG8="}],
        },
        "blocks[1].data",
    ),
    "not-json": (b'{"role": "user", "blocks": [', "JSON"),
    "json-array": ([{"role": "user"}], "object"),
}


@pytest.mark.parametrize("case", BAD_MESSAGES)
def test_a_bad_message_is_refused_whole_naming_the_field(api, conversation, case):
    body, field = BAD_MESSAGES[case]
    cid = conversation["id"]
    record_before = api.get(one(cid)).content
    before = state()
    assert_error(api.post(messages_url(cid), body), 400, field)
    assert state() == before
    assert api.get(one(cid)).content == record_before
    assert Conversation.objects.get(pk=cid).message_count == 1


def test_an_image_in_an_assistant_message_names_the_block(api, conversation):
    body = BAD_MESSAGES["image-in-assistant-message"][0]
    answer = api.post(messages_url(conversation["id"]), body).json()
    assert answer["error"].startswith("blocks[1]")
    assert "user" in answer["error"]


# --- POST /api/conversations/ID/messages/SEQ/blocks ----------------------------------


@pytest.mark.sqlite
def test_blocks_are_appended_at_the_end_with_dense_seqs(api):
    cid = create(api)["id"]
    append(api, cid, "assistant", [GOOD[0]])
    append(api, cid, "user", [])
    first = api.post(blocks_url(cid, 0), {"type": "reasoning", "text": "r"})
    second = api.post(blocks_url(cid, 0), GOOD[1])
    on_last = api.post(blocks_url(cid, 1), {"type": "text", "text": "t"})
    assert [r.status_code for r in (first, second, on_last)] == [201, 201, 201]
    assert first.json() == {
        "seq": 1,
        "type": "reasoning",
        "conversation_id": cid,
        "message_seq": 0,
        "url": f"http://testserver/c/{cid}/#m-0",
    }
    assert second.json()["seq"] == 2
    assert on_last.json()["seq"] == 0 and on_last.json()["message_seq"] == 1
    record = api.get(one(cid)).json()
    assert [b["seq"] for b in record["messages"][0]["blocks"]] == [0, 1, 2]
    assert [b["type"] for b in record["messages"][0]["blocks"]] == [
        "text",
        "reasoning",
        "tool_use",
    ]
    assert Message.objects.get(conversation_id=cid, seq=0).block_count == 3


@pytest.mark.parametrize("seq", ["1", "99", "99999999999999999999", "-1", "x"])
def test_a_block_for_an_unknown_message_is_not_found(api, conversation, seq):
    before = state()
    response = api.post(f"{messages_url(conversation['id'])}/{seq}/blocks", GOOD[0])
    assert_error(response, 404)
    assert state() == before


BAD_BLOCKS: dict[str, tuple[Any, str]] = {
    "unknown-type": ({"type": "audio", "data": ""}, "type"),
    "missing-type": ({"text": "x"}, "type"),
    "missing-field": ({"type": "tool_result", "tool_use_id": "c"}, "content"),
    "wrong-type": ({"type": "reasoning", "text": 1}, "text"),
    "extra-field": ({"type": "text", "text": "x", "seq": 3}, "seq"),
    "image-in-assistant-message": (
        {"type": "image", "media_type": "image/png", "data": png_b64()},
        "block",
    ),
    "a-list": ([GOOD[0]], "object"),
    "not-json": (b"{nope", "JSON"),
}


@pytest.mark.parametrize("case", BAD_BLOCKS)
def test_a_bad_block_is_refused_naming_the_field(api, case):
    cid = create(api)["id"]
    append(api, cid, "assistant", [GOOD[0]])
    body, field = BAD_BLOCKS[case]
    record_before = api.get(one(cid)).content
    before = state()
    assert_error(api.post(blocks_url(cid, 0), body), 400, field)
    assert state() == before
    assert api.get(one(cid)).content == record_before


# --- GET /api/conversations/ID/replay ------------------------------------------------


def stored(role: str, blocks: list[dict[str, Any]]) -> replay.StoredMessage:
    """The projection's input, built from what was posted (not from what was stored)."""
    values: list[replay.Block] = []
    for block in blocks:
        kind = block["type"]
        if kind in ("text", "reasoning"):
            cls = replay.TextBlock if kind == "text" else replay.ReasoningBlock
            values.append(cls(block["text"]))
        elif kind == "tool_use":
            values.append(replay.ToolUseBlock.of(block["id"], block["name"], block["input"]))
        elif kind == "tool_result":
            values.append(
                replay.ToolResultBlock(
                    block["tool_use_id"],
                    block["name"],
                    block["content"],
                    block.get("is_error", False),
                )
            )
        else:
            values.append(replay.ImageBlock(block["media_type"], block["data"]))
    return replay.StoredMessage(role, tuple(values))  # type: ignore[arg-type]


@pytest.fixture
def replayable(api: ApiClient) -> tuple[str, list[replay.StoredMessage]]:
    png = png_b64()
    posted = [
        ("system", [{"type": "text", "text": "You are terse."}]),
        (
            "user",
            [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "media_type": "image/png", "data": png},
                {"type": "text", "text": "Be honest."},
            ],
        ),
        (
            "assistant",
            [
                {"type": "reasoning", "text": "Look it up."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "identify",
                    "input": {"b": 1, "a": 2},
                },
            ],
        ),
        (
            "user",
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "name": "identify",
                    "content": "a red square",
                    "is_error": False,
                }
            ],
        ),
        ("assistant", []),
        ("system", [{"type": "text", "text": "Stay terse."}]),
    ]
    cid = create(api, "Replayable")["id"]
    for role, blocks in posted:
        append(api, cid, role, blocks)
    return cid, [stored(role, blocks) for role, blocks in posted]


def test_replay_defaults_to_vision_on_in_the_openai_shape(api, replayable):
    cid, messages = replayable
    payload = api.get(replay_url(cid)).json()
    assert payload == replay.project(messages, vision=True, shape="openai")
    assert [m["role"] for m in payload["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "system",
    ]
    assert payload["messages"][1]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{png_b64()}"},
    }
    assert payload["messages"][4]["content"] == "[Empty message]"


@pytest.mark.parametrize(
    ("query", "vision", "shape"),
    [
        ({"vision": "1"}, True, "openai"),
        ({"vision": "0"}, False, "openai"),
        ({"vision": "true"}, True, "openai"),
        ({"vision": "false"}, False, "openai"),
        ({"shape": "openai"}, True, "openai"),
        ({"shape": "anthropic"}, True, "anthropic"),
        ({"vision": "0", "shape": "anthropic"}, False, "anthropic"),
        ({"vision": "TRUE", "shape": "anthropic"}, True, "anthropic"),
    ],
)
def test_replay_is_the_projection_of_the_stored_record(api, replayable, query, vision, shape):
    cid, messages = replayable
    response = api.get(replay_url(cid), **query)
    assert response.status_code == 200
    assert response.json() == replay.project(messages, vision=vision, shape=shape)
    assert response.content == orjson.dumps(replay.project(messages, vision=vision, shape=shape))


def test_replay_without_vision_names_the_unseen_image(api, replayable):
    cid, _ = replayable
    content = api.get(replay_url(cid), vision="0").json()["messages"][1]["content"]
    assert content == (
        "What is this?\n\n[Image (image/png): not seen — this model cannot view images]"
        "\n\nBe honest."
    )


def test_replay_in_the_anthropic_shape_lifts_system_messages(api, replayable):
    cid, _ = replayable
    payload = api.get(replay_url(cid), shape="anthropic").json()
    assert payload["system"] == "You are terse.\n\nStay terse."
    assert [m["role"] for m in payload["messages"]] == ["user", "assistant", "user", "assistant"]
    assert "toolu_1" not in json.dumps(payload)


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ({"vision": "2"}, "vision"),
        ({"vision": "yes"}, "vision"),
        ({"vision": ""}, "vision"),
        ({"shape": "gemini"}, "shape"),
        ({"shape": "OpenAI"}, "shape"),
        ({"shape": ""}, "shape"),
    ],
)
def test_a_bad_replay_option_is_refused_naming_the_parameter(api, replayable, query, name):
    cid, _ = replayable
    assert_error(api.get(replay_url(cid), **query), 400, name)


# --- Idempotency-Key -----------------------------------------------------------------


def test_a_repeated_create_with_the_same_key_answers_the_same_and_stores_once(api):
    key = {"Idempotency-Key": "create-1"}
    first = api.post(LIST, {"title": "once"}, headers=key)
    second = api.post(LIST, {"title": "once"}, headers=key)
    assert first.status_code == second.status_code == 201
    assert first.content == second.content
    assert Conversation.objects.filter(title="once").count() == 1


def test_a_repeated_message_with_the_same_key_is_stored_once(api, conversation):
    cid = conversation["id"]
    body = {"role": "assistant", "blocks": [GOOD[0], GOOD[1]]}
    first = api.post(messages_url(cid), body, headers={"Idempotency-Key": "m-1"})
    after_first = state()
    second = api.post(messages_url(cid), body, headers={"Idempotency-Key": "m-1"})
    assert first.status_code == second.status_code == 201
    assert first.content == second.content
    assert state() == after_first
    assert Conversation.objects.get(pk=cid).message_count == 2


def test_a_repeated_block_with_the_same_key_is_stored_once(api, conversation):
    cid = conversation["id"]
    first = api.post(blocks_url(cid, 0), GOOD[0], headers={"Idempotency-Key": "b-1"})
    after_first = state()
    second = api.post(blocks_url(cid, 0), GOOD[0], headers={"Idempotency-Key": "b-1"})
    assert first.status_code == second.status_code == 201
    assert first.content == second.content
    assert state() == after_first
    assert Message.objects.get(conversation_id=cid, seq=0).block_count == 2


def test_the_same_key_under_another_token_is_independent(api, conversation):
    _, other = api_token_create(label="other")
    other_api = ApiClient(other)
    body = {"role": "user", "blocks": [GOOD[0]]}
    key = {"Idempotency-Key": "shared"}
    mine = api.post(messages_url(conversation["id"]), body, headers=key)
    theirs = other_api.post(messages_url(conversation["id"]), body, headers=key)
    assert mine.status_code == theirs.status_code == 201
    assert (mine.json()["seq"], theirs.json()["seq"]) == (1, 2)


def test_the_same_key_with_another_body_is_refused(api, conversation):
    cid = conversation["id"]
    key = {"Idempotency-Key": "k"}
    assert (
        api.post(messages_url(cid), {"role": "user", "blocks": []}, headers=key).status_code == 201
    )
    before = state()
    assert_error(api.post(messages_url(cid), {"role": "assistant", "blocks": []}, headers=key), 422)
    assert_error(api.post(LIST, {"title": "other"}, headers=key), 422)
    assert state() == before


def test_a_refused_request_with_a_key_keeps_no_answer(api, conversation):
    before = state()
    response = api.post(
        messages_url(conversation["id"]), {"role": "tool"}, headers={"Idempotency-Key": "bad"}
    )
    assert_error(response, 400, "role")
    assert state() == before


def test_an_overlong_key_is_refused(api):
    before = state()
    assert_error(
        api.post(LIST, {"title": "x"}, headers={"Idempotency-Key": "k" * 256}),
        400,
        "Idempotency-Key",
    )
    assert state() == before


# --- methods and paths ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("put", LIST),
        ("delete", LIST),
        ("patch", LIST),  # PATCH of one conversation sets its window (docs/contract.md §7)
        ("post", "{one}"),
        ("put", "{one}"),  # DELETE is allowed since docs/contract.md §3 of 2026-12-01
        ("get", "{messages}"),
        ("put", "{messages}"),
        ("get", "{blocks}"),
        ("post", "{replay}"),
    ],
)
def test_a_wrong_method_is_refused_as_json(api, conversation, method, path):
    cid = conversation["id"]
    url = path.format(
        one=one(cid), messages=messages_url(cid), blocks=blocks_url(cid, 0), replay=replay_url(cid)
    )
    before = state()
    response = api.client.generic(
        method.upper(), url, b"{}", content_type="application/json", headers=api._headers(None)
    )
    body = assert_error(response, 405, method.upper())
    assert body["error"]
    assert response["Allow"]
    assert method.upper() not in response["Allow"].split(", ")
    assert state() == before


@pytest.mark.parametrize(
    "path",
    [
        "/api/",
        "/api/nothing",
        "/api/conversations/",
        "/api/conversations/{cid}/extra",
        "/api/conversations/{cid}/messages/0",
    ],
)
def test_an_unknown_api_path_is_not_found_as_json(api, conversation, path):
    assert_error(api.get(path.format(cid=conversation["id"])), 404)


def test_a_body_over_the_limit_is_refused_in_process(api, settings):
    settings.REPLAY_MAX_BODY_MB = 1
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024
    before = state()
    body = orjson.dumps({"title": "x" * (1024 * 1024 + 10)})
    assert_error(api.post(LIST, body), 413, "REPLAY_MAX_BODY_MB")
    assert state() == before


# --- queries -------------------------------------------------------------------------


def build(messages: int) -> Conversation:
    conversation = conversation_create(title=f"{messages} messages")
    blocks = [
        BLOCK_ADAPTER.validate_python({"type": "text", "text": "hi"}),
        BLOCK_ADAPTER.validate_python(
            {"type": "tool_use", "id": "c", "name": "t", "input": {"a": 1}}
        ),
        BLOCK_ADAPTER.validate_python({"type": "tool_result", "tool_use_id": "c", "content": "ok"}),
    ]
    for n in range(messages):
        role = ("user", "assistant")[n % 2]
        message_append(conversation=conversation, role=role, blocks=blocks)
    return conversation


def count_queries(api: ApiClient, path: str, body: Any = None) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = api.get(path) if body is None else api.post(path, body)
        assert response.status_code in (200, 201)
    return len(queries)


def test_reads_take_the_same_few_queries_for_5_and_300_messages(api, django_assert_max_num_queries):
    small, large = build(5), build(300)
    api.get(LIST)  # the token's first use records last_used_at
    for endpoint in (one, replay_url):
        with django_assert_max_num_queries(5):
            api.get(endpoint(small.id))
        assert count_queries(api, endpoint(small.id)) == count_queries(api, endpoint(large.id))
    assert len(api.get(one(large.id)).json()["messages"]) == 300
    assert len(api.get(replay_url(large.id)).json()["messages"]) == 300


def test_appending_a_message_takes_the_same_queries_for_3_and_90_blocks(api):
    cid = create(api)["id"]
    append(api, cid, "system", [])  # the first message has no earlier calls to look up
    blocks = [
        {"type": "text", "text": "hi"},
        {"type": "tool_use", "id": "c", "name": "t", "input": {"a": 1}},
        {"type": "tool_result", "tool_use_id": "c", "content": "ok"},
    ]
    few = count_queries(api, messages_url(cid), {"role": "user", "blocks": blocks})
    many = count_queries(api, messages_url(cid), {"role": "user", "blocks": blocks * 30})
    assert few == many
    assert Block.objects.filter(message__conversation_id=cid).count() == 93
    assert Block.objects.filter(name="t").count() == 62  # every result's name was resolved


# --- fuzz ----------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = [
    "type",
    "text",
    "id",
    "name",
    "input",
    "tool_use_id",
    "content",
    "is_error",
    "media_type",
    "data",
    "title",
    "metadata",
    "role",
    "blocks",
]
NEAR_BLOCKS = st.dictionaries(
    st.sampled_from(FIELDS),
    st.sampled_from([*replay.BLOCK_TYPES, "image/png", "aGk=", "c"]) | JSON_VALUES,
    max_size=6,
)
NEAR_BODIES = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["user", "assistant", "system", "tool"]) | JSON_VALUES,
        "blocks": st.lists(NEAR_BLOCKS, max_size=4) | JSON_VALUES,
        "title": st.text(max_size=10) | JSON_VALUES,
        "metadata": JSON_VALUES,
    },
)
BODIES = (
    JSON_VALUES.map(lambda v: json.dumps(v).encode())
    | NEAR_BODIES.map(lambda v: json.dumps(v).encode())
    | NEAR_BLOCKS.map(lambda v: json.dumps(v).encode())
    | st.binary(max_size=64)
)


@hypothesis_settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=BODIES, target=st.sampled_from(["create", "message", "block"]))
def test_no_body_makes_the_api_fail_and_a_refused_one_stores_nothing(
    api, conversation, body, target
):
    cid = conversation["id"]
    path = {"create": LIST, "message": messages_url(cid), "block": blocks_url(cid, 0)}[target]
    before = state()
    response = api.post(path, body)
    assert response.status_code < 500, (body, response.content)
    assert response["Content-Type"] == "application/json"
    if response.status_code >= 400:
        assert isinstance(response.json()["error"], str)
        assert state() == before
    else:
        assert response.status_code == 201


# Numbers in any script (Nd, No: "²", "٣") are where a page parser is tempted by isdigit().
NUMBERS = st.text(st.characters(categories=["Nd", "No"]), min_size=1, max_size=3)
QUERY_TEXT = st.text(max_size=12) | st.sampled_from(["0", "1", "2", "-1", " 1", "true"])


@hypothesis_settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    params=st.fixed_dictionaries(
        {},
        optional={
            "page": NUMBERS | QUERY_TEXT,
            "page_size": NUMBERS | QUERY_TEXT,
            "q": QUERY_TEXT,
            "vision": QUERY_TEXT,
            "shape": QUERY_TEXT | st.sampled_from(replay.SHAPES),
        },
    ),
    target=st.sampled_from(["list", "record", "replay"]),
)
def test_no_query_string_makes_the_api_fail(api, conversation, params, target):
    cid = conversation["id"]
    path = {"list": LIST, "record": one(cid), "replay": replay_url(cid)}[target]
    response = api.get(path, **params)
    assert response.status_code in (200, 400, 404), (params, response.content)
    assert response["Content-Type"] == "application/json"
    if response.status_code != 200:
        assert isinstance(response.json()["error"], str)
