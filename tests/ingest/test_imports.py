"""Importing through the record (docs/contract.md §3 `POST /api/imports`, §6 rule 6, `manage.py
import`): one transaction, nothing stored from a bad file, the same bytes once."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from conversations.record.models.conversation import Block, Conversation, Message
from tests import importdata
from tests.conftest import ApiClient, Server
from tests.ingest.test_import_views import importer
from tests.realdata import REAL

IMPORTS = "/api/imports"
COMPACT = REAL / "claude_code_compact_boundary.jsonl"


def counts() -> tuple[int, int, int]:
    return Conversation.objects.count(), Message.objects.count(), Block.objects.count()


def post(api: ApiClient, raw: bytes, query: str = "") -> Any:
    return api.client.post(
        IMPORTS + query, raw, content_type="application/octet-stream", headers=api._headers(None)
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("label", "raw"), importdata.all_sources(), ids=[s[0] for s in importdata.all_sources()]
)
def test_every_real_recording_imports_through_the_api(
    api: ApiClient, label: str, raw: bytes
) -> None:
    response = post(api, raw)
    assert response.status_code == 201, response.content
    answer = response.json()
    conversation = Conversation.objects.get(pk=answer["id"])
    assert (
        conversation.message_count
        == answer["messages"]
        == Message.objects.filter(conversation=conversation).count()
    )
    assert answer["blocks"] == Block.objects.filter(message__conversation=conversation).count()
    assert conversation.metadata["gaps"] == answer["gaps"]
    replay = api.get(f"/api/conversations/{answer['id']}/replay?compact=none")  # whole record
    assert replay.status_code == 200
    assert len(replay.json()["messages"]) == answer["messages"]


@pytest.mark.django_db
def test_the_same_bytes_again_return_the_same_conversation_and_store_nothing(
    api: ApiClient,
) -> None:
    raw = COMPACT.read_bytes()
    first = post(api, raw, "?title=Mine")
    before = counts()
    again = post(api, raw)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["messages"] == first.json()["messages"]
    assert counts() == before


@pytest.mark.django_db
def test_claude_code_import_keeps_provenance_and_the_compact_marker(api: ApiClient) -> None:
    answer = post(api, COMPACT.read_bytes(), "?name=compact.jsonl").json()
    conversation = Conversation.objects.get(pk=answer["id"])
    meta = conversation.metadata
    assert meta["sessionId"] == "0e26ec2f-937e-482c-b889-bc126f996913"
    assert {"cwd", "gitBranch", "version"} <= set(meta)
    assert meta["import"]["format"] == "claude-code"
    assert meta["import"]["file_name"] == "compact.jsonl"
    assert len(meta["import"]["sha256"]) == 64
    (boundary,) = meta["compact_boundaries"]
    marked = Message.objects.get(conversation=conversation, seq=boundary["seq"])
    assert marked.metadata["compact_boundary"]["trigger"] == "manual"
    assert conversation.import_sha256 == meta["import"]["sha256"]
    kinds = {gap["kind"] for gap in answer["gaps"]}
    assert {"system prompt", "tool definitions"} <= kinds


@pytest.mark.django_db
def test_gap_blocks_keep_their_source_in_origin(api: ApiClient) -> None:
    raw = importdata.request_bodies("anthropic_messages_document_pdf_base64.json")[-1]
    answer = post(api, raw).json()
    (gap,) = answer["gaps"]
    block = Block.objects.get(
        message__conversation_id=answer["id"], message__seq=gap["message"], seq=gap["block"]
    )
    assert block.text == "[document (application/pdf): not stored]"
    assert block.origin["type"] == "document"


@pytest.mark.django_db
def test_an_image_that_is_not_one_becomes_a_gap(api: ApiClient) -> None:
    body = [
        {
            "role": "user",
            "parts": [
                {
                    "type": "blob",
                    "modality": "image",
                    "mime_type": "image/png",
                    "content": "aGVsbG8=",
                }
            ],
        }
    ]
    answer = post(api, json.dumps(body).encode()).json()
    assert answer["gaps"][0]["kind"] == "image"
    block = Block.objects.get(message__conversation_id=answer["id"])
    assert block.type == "text" and block.text.startswith("[image (image/png): not stored")


@pytest.mark.django_db
def test_sidechains_are_stored_as_linked_conversations(api: ApiClient) -> None:
    lines = [
        {
            "type": "user",
            "uuid": "u1",
            "parentUuid": None,
            "sessionId": "s",
            "message": {"role": "user", "content": "main"},
        },
        {
            "type": "user",
            "uuid": "s1",
            "parentUuid": "u1",
            "isSidechain": True,
            "agentId": "ag",
            "sessionId": "s",
            "message": {"role": "user", "content": "task"},
        },
    ]
    raw = b"\n".join(json.dumps(line).encode() for line in lines)
    answer = post(api, raw).json()
    (linked,) = answer["linked"]
    main = Conversation.objects.get(pk=answer["id"])
    side = Conversation.objects.get(pk=linked["id"])
    assert main.metadata["linked"] == [str(side.id)]
    assert side.metadata["linked_from"] == str(main.id)
    assert side.import_sha256 is None


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("raw", "query", "where"),
    [
        (b'{"messages": [', "", "line 1, column 15"),
        (
            b"\n".join(
                [
                    b'{"type":"user","uuid":"a","parentUuid":null,"message":{"role":"user","content":"x"}}',
                    b"{oops",
                    b"{}",
                ]
            ),
            "",
            "line 2",
        ),
        (
            json.dumps({"input": "hi", "instructions": "x"}).encode(),
            "?format=anthropic",
            "input",  # openai-responses content: the named format is refused (§6)
        ),
        (json.dumps({"prompt": "hi"}).encode(), "?format=anthropic", "messages"),
        (
            json.dumps(
                {"messages": [{"role": "user", "content": [{"type": "text", "text": "a\u0000b"}]}]}
            ).encode(),
            "?format=anthropic",
            None,
        ),
    ],
)
def test_a_malformed_file_is_a_400_naming_where_and_stores_nothing(
    api: ApiClient, raw: bytes, query: str, where: str | None
) -> None:
    response = post(api, raw, query)
    assert response.status_code == 400, response.content
    if where is not None:
        assert response.json()["where"] == where
        assert where in response.json()["error"]
    else:
        assert "messages[0], block 0: text" in response.json()["error"]
    assert counts() == (0, 0, 0)


@pytest.mark.django_db
def test_an_unknown_format_names_the_formats(api: ApiClient) -> None:
    response = post(api, b'{"hello": 1}')
    assert response.status_code == 400
    assert (
        "tried anthropic, openai-chat, openai-responses, claude-code, otel-genai"
        in response.json()["error"]
    )
    bad = post(api, b"{}", "?format=yaml")
    assert bad.status_code == 400 and bad.json()["field"] == "format"


@pytest.mark.django_db
def test_imports_need_a_token(anonymous_api: ApiClient) -> None:
    assert post(anonymous_api, COMPACT.read_bytes()).status_code == 401
    assert counts() == (0, 0, 0)


@pytest.mark.django_db
def test_manage_import_prints_one_line_per_file(tmp_path: Path) -> None:
    body = tmp_path / "chat.json"
    body.write_bytes(
        importdata.request_bodies("openai_chat_tool_calls_tool_role_image_url.json")[-1]
    )
    out = StringIO()
    call_command("import", str(COMPACT), str(body), stdout=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    first = Conversation.objects.get(metadata__import__file_name=COMPACT.name)
    assert lines[0].startswith(f"{first.id} 9 messages 10 blocks 2 gaps /c/{first.id}/")
    assert "1 gaps" in lines[1]
    again = StringIO()
    call_command("import", str(COMPACT), stdout=again)
    assert "already imported" in again.getvalue()
    assert Conversation.objects.count() == 2


@pytest.mark.django_db
def test_manage_import_reports_a_bad_file_and_stores_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    lines = COMPACT.read_bytes().splitlines()
    lines[5] = b"{not json"
    bad.write_bytes(b"\n".join(lines))
    err = StringIO()
    with pytest.raises(CommandError):
        call_command("import", str(bad), stderr=err)
    assert "line 6" in err.getvalue()
    assert counts() == (0, 0, 0)


ONE_OF_EACH = [
    (importdata.request_bodies("anthropic_sdk_tool_result_is_error.json")[-1], "messages[0].role"),
    (
        importdata.request_bodies("openai_chat_tool_calls_tool_role_image_url.json")[-1],
        "messages[0].role",
    ),
    (
        importdata.request_bodies("openai_responses_reasoning_function_call_output.json")[-1],
        "input[0].role",
    ),
    (
        json.dumps({"gen_ai.input.messages": [{"role": "user", "parts": []}]}).encode(),
        "gen_ai.input.messages[0].role",
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("raw", "where"),
    ONE_OF_EACH,
    ids=["anthropic", "openai-chat", "openai-responses", "otel-genai"],
)
def test_every_format_is_stored_once_and_a_bad_one_not_at_all(
    api: ApiClient, raw: bytes, where: str
) -> None:
    first = post(api, raw)
    assert first.status_code == 201
    before = counts()
    assert post(api, raw).json()["id"] == first.json()["id"]
    assert counts() == before
    body = json.loads(raw)
    items = body.get("messages") or body.get("input") or body["gen_ai.input.messages"]
    items[0]["role"] = "robot"
    broken = post(api, json.dumps(body).encode())
    assert broken.status_code == 400
    assert broken.json()["where"] == where
    assert counts() == before


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (
            b'{"messages": [{"role": "user", "content": "a", "content": "b"}]}',
            "messages[0].content",
        ),
        (b'{"model": "claude-x", "max_tokens": 1e400, "messages": []}', "max_tokens"),
        (
            b'{"type":"user","uuid":"a","parentUuid":null,'
            b'"message":{"role":"user","content":"x","role":"user"}}\n'
            b'{"type":"summary","summary":"t","leafUuid":"a"}',
            "line 1, message.role",
        ),
    ],
)
def test_the_json_limits_of_every_body_apply_to_imports(
    api: ApiClient, raw: bytes, where: str
) -> None:
    response = post(api, raw, "?format=anthropic" if raw.startswith(b'{"m') else "")
    assert response.status_code == 400, response.content
    assert response.json()["where"] == where
    assert counts() == (0, 0, 0)


def test_an_import_announces_its_conversation_once_after_commit(transactional_db: None) -> None:
    from asgiref.sync import async_to_sync, sync_to_async
    from channels.layers import channel_layers

    from conversations.ingest.imports import transcript_import
    from conversations.record import events
    from tests.record.test_events import Member

    def load() -> Any:
        return transcript_import(raw=COMPACT.read_bytes(), format=None, title=None, file_name=None)

    async def body() -> None:
        listener = await Member.join(events.LIST_GROUP)
        cid = str((await sync_to_async(load)()).conversation.id)
        assert await listener.next() == {"type": "conversation.created", "conversation_id": cid}
        added = await listener.next()
        assert added == {
            "type": "conversation.message_added",
            "conversation_id": cid,
            "message_seq": 8,
            "block_count": 1,
        }
        assert await listener.nothing()
        await sync_to_async(load)()  # the same bytes: nothing stored, nothing announced
        assert await listener.nothing()

    channel_layers.backends = {}
    try:
        async_to_sync(body)()
    finally:
        channel_layers.backends = {}


# A multipart form (`curl -F file=@session.jsonl`) carries the file in its `file` field
# (docs/contract.md §6), on the API as on the dashboard's drop.


@pytest.mark.django_db
def test_a_multipart_file_field_is_imported_with_its_file_name(api: ApiClient) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("session.jsonl", COMPACT.read_bytes())
    response = api.client.post(IMPORTS, {"file": upload}, headers=api._headers(None))
    assert response.status_code == 201, response.content
    conversation = Conversation.objects.get(pk=response.json()["id"])
    assert conversation.metadata["import"]["file_name"] == "session.jsonl"
    again = api.client.post(
        IMPORTS, {"file": SimpleUploadedFile("x", COMPACT.read_bytes())}, headers=api._headers(None)
    )
    assert again.status_code == 200 and again.json()["id"] == str(conversation.id)


@pytest.mark.django_db
@pytest.mark.parametrize("form", [{}, {"file": "not a file"}, {"transcript": "x"}])
def test_a_multipart_form_without_a_file_field_is_a_400_naming_it(
    api: ApiClient, form: dict[str, Any]
) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    if "transcript" in form:
        form = {"transcript": SimpleUploadedFile("x.jsonl", COMPACT.read_bytes())}
    response = api.client.post(IMPORTS, form, headers=api._headers(None))
    assert response.status_code == 400, response.content
    assert response.json()["field"] == "file"
    assert "file" in response.json()["error"]
    assert counts() == (0, 0, 0)


def test_a_multipart_upload_to_a_real_server_is_imported(
    transactional_db: None, daphne: Server, token: str
) -> None:
    with daphne.client(token) as client:
        files = {"file": ("session.jsonl", COMPACT.read_bytes(), "application/octet-stream")}
        response = client.post(IMPORTS, files=files)
        assert response.status_code == 201, response.text
        missing = client.post(IMPORTS, files={"upload": ("x.jsonl", b"{}")})
    assert missing.status_code == 400 and missing.json()["field"] == "file"
    conversation = Conversation.objects.get(pk=response.json()["id"])
    assert conversation.metadata["import"]["file_name"] == "session.jsonl"


# -- a named format the content contradicts (docs/contract.md §6) --------------------------------


def _real_by_format() -> list[tuple[str, str, bytes]]:
    """(format, label, bytes): the first recorded body of each real recording."""
    sources = [
        (format, name, importdata.request_bodies(name)[0])
        for name, format in importdata.REQUEST_FILES.items()
    ]
    sources += [
        ("claude-code", name, (REAL / name).read_bytes()) for name in importdata.SESSION_FILES
    ]
    sources += [
        ("otel-genai", f"{name}: {label}", raw)
        for name in importdata.OTEL_FILES
        for label, raw in importdata.otel_sources(name)[:1]
    ]
    return sources


FORMATS = ("anthropic", "openai-chat", "openai-responses", "claude-code", "otel-genai")
WRONG = [
    (right, wrong, label, raw)
    for right, label, raw in _real_by_format()
    for wrong in FORMATS
    if wrong != right
]
WRONG_IDS = [f"{label} as {wrong}" for _right, wrong, label, _raw in WRONG]
# One recording of each format, for the command and the drop zone.
ONE_WRONG = [
    case
    for case in WRONG
    if case[2]
    in {
        "anthropic_sdk_tool_result_is_error.json",
        "openai_chat_tool_calls_tool_role_image_url.json",
        "openai_responses_reasoning_function_call_output.json",
        "claude_code_compact_boundary.jsonl",
        "otel_genai_pydantic_ai_emitter_snapshots.json: test_instrumented_model",
    }
]
ONE_WRONG_IDS = [f"{right} as {wrong}" for right, wrong, _label, _raw in ONE_WRONG]


@pytest.mark.django_db
@pytest.mark.parametrize(("right", "wrong", "label", "raw"), WRONG, ids=WRONG_IDS)
def test_a_wrong_format_is_a_400_naming_it_and_never_blocks_the_right_import(
    api: ApiClient, right: str, wrong: str, label: str, raw: bytes
) -> None:
    refused = post(api, raw, f"?format={wrong}")
    assert refused.status_code == 400, refused.content
    answer = refused.json()
    assert answer["format"] == wrong and f"not readable as {wrong}: " in answer["error"]
    assert answer["where"] and f"{answer['where']}: " in answer["error"]
    assert counts() == (0, 0, 0)
    detected = post(api, raw)
    assert detected.status_code == 201, detected.content
    assert detected.json()["messages"] > 0
    stored = Conversation.objects.get(pk=detected.json()["id"])
    assert stored.metadata["import"]["format"] == right
    # The same bytes with the wrong format again: still refused, not "already imported".
    assert post(api, raw, f"?format={wrong}").status_code == 400
    assert post(api, raw, f"?format={right}").json()["id"] == str(stored.id)


@pytest.mark.django_db
@pytest.mark.parametrize(("right", "wrong", "label", "raw"), ONE_WRONG, ids=ONE_WRONG_IDS)
def test_manage_import_refuses_a_wrong_format_naming_it(
    tmp_path: Path, right: str, wrong: str, label: str, raw: bytes
) -> None:
    path = tmp_path / "transcript"
    path.write_bytes(raw)
    err = StringIO()
    with pytest.raises(CommandError):
        call_command("import", str(path), format=wrong, stderr=err)
    assert f"transcript: not imported as {wrong}: " in err.getvalue()
    assert counts() == (0, 0, 0)
    out = StringIO()
    call_command("import", str(path), stdout=out)
    assert "transcript: imported)" in out.getvalue()
    assert Conversation.objects.get().metadata["import"]["format"] == right
    with pytest.raises(CommandError):
        call_command("import", str(path), format=wrong, stderr=StringIO())


@pytest.mark.django_db
@pytest.mark.parametrize(("right", "wrong", "label", "raw"), ONE_WRONG, ids=ONE_WRONG_IDS)
def test_the_drop_zone_refuses_a_wrong_format_naming_it(
    right: str, wrong: str, label: str, raw: bytes
) -> None:
    client = Client()
    client.force_login(importer())

    def drop(query: str) -> Any:
        return client.post("/imports" + query, raw, content_type="application/octet-stream")

    refused = drop(f"?format={wrong}")
    assert refused.status_code == 400, refused.content
    assert f"not readable as {wrong}: " in refused.json()["error"]
    assert counts() == (0, 0, 0)
    dropped = drop("")
    assert dropped.status_code == 201 and dropped.json()["messages"] > 0
    assert Conversation.objects.get().metadata["import"]["format"] == right
    assert drop(f"?format={wrong}").status_code == 400


@pytest.mark.django_db
def test_bytes_another_format_read_are_never_the_answer(api: ApiClient) -> None:
    ambiguous = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
    first = post(api, ambiguous, "?format=anthropic")
    assert first.status_code == 201, first.content
    other = post(api, ambiguous, "?format=openai-chat")
    assert other.status_code == 400 and other.json()["field"] == "format"
    assert (
        f"imported before as anthropic (conversation {first.json()['id']})"
        in (other.json()["error"])
    )
    assert post(api, ambiguous).status_code == 400  # still ambiguous: as before the import
    assert post(api, ambiguous, "?format=anthropic").json()["id"] == first.json()["id"]
    assert Conversation.objects.count() == 1
