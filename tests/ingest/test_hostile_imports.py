"""Imports of hostile or unusual bodies (docs/contract.md §3 limits, §6 rules 2 and 3): each
is stored whole or refused with a 400 naming where, never a 500, and nothing half-stored."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from conversations.record.models.conversation import Block, Conversation, Message
from tests.conftest import ApiClient
from tests.realdata import REAL

DEEP = "[" * 5000 + "]" * 5000
COMPACT_LINE = (REAL / "claude_code_compact_boundary.jsonl").read_bytes().splitlines(True)[1]


def post(api: ApiClient, raw: bytes, query: str = "") -> Any:
    return api.client.post(
        "/api/imports" + query,
        raw,
        content_type="application/octet-stream",
        headers=api._headers(None),
    )


def stored() -> tuple[int, int, int]:
    return Conversation.objects.count(), Message.objects.count(), Block.objects.count()


REFUSED = {
    "detected, nested 5,000 deep": ("", json.dumps({"messages": []})[:-2] + f"[{DEEP}]}}"),
    "an OTel attribute nested 5,000 deep": (
        "?format=otel-genai",
        json.dumps({"gen_ai.input.messages": DEEP}),
    ),
    "an OTel text with a lone surrogate, in a JSON string": (
        "?format=otel-genai",
        json.dumps(
            {
                "gen_ai.input.messages": '[{"role":"user","parts":[{"type":"text",'
                '"content":"a\\ud800"}]}]'
            }
        ),
    ),
    "a session line nested 5,000 deep": (
        "",
        '{"type":"user","uuid":"u1","message":{"role":"user","content":"hi"}}\n'
        + '{"type":"user","uuid":"u2","message":{"role":"user","content":'
        + DEEP
        + "}}\n",
    ),
}


@pytest.mark.django_db
@pytest.mark.parametrize("case", list(REFUSED))
def test_a_body_the_record_cannot_hold_is_a_400_naming_where(api: ApiClient, case: str) -> None:
    query, body = REFUSED[case]
    before = stored()
    response = post(api, body.encode(), query)
    assert response.status_code == 400, response.content[:300]
    error = response.json()["error"]
    assert "deeper than 64" in error or "surrogate" in error
    assert "[0]" in error or "line 2" in error  # where, not just what
    assert stored() == before


@pytest.mark.django_db
def test_tool_arguments_nested_too_deep_are_kept_as_their_string(api: ApiClient) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": DEEP}}
    body = {
        "messages": [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": [call]}]
    }
    response = post(api, json.dumps(body).encode(), "?format=openai-chat")
    assert response.status_code == 201, response.content[:300]
    block = Block.objects.get(type="tool_use")
    assert json.loads(block.input_json) == {"_raw": DEEP}


@pytest.mark.django_db
def test_arguments_whose_numbers_json_would_round_are_kept_exactly(api: ApiClient) -> None:
    raw = '{"x": 0.1000000000000000055511151231257827}'
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": raw}}
    body = {"messages": [{"role": "assistant", "tool_calls": [call]}]}
    assert post(api, json.dumps(body).encode(), "?format=openai-chat").status_code == 201
    assert json.loads(Block.objects.get(type="tool_use").input_json) == {"_raw": raw}


@pytest.mark.django_db
def test_reasoning_content_of_openai_compatible_models_is_reasoning(api: ApiClient) -> None:
    answer = {"role": "assistant", "content": "4", "reasoning_content": "Add."}
    body = {"messages": [{"role": "user", "content": "2+2?"}, answer]}
    response = post(api, json.dumps(body).encode(), "?format=openai-chat")
    assert response.status_code == 201, response.content[:300]
    message = Message.objects.get(seq=1)
    assert [(b.type, b.text) for b in message.blocks.order_by("seq")] == [
        ("reasoning", "Add."),
        ("text", "4"),
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "value", "text"),
    [
        ("previous_response_id", "resp_123", "[previous response (resp_123): not stored]"),
        ("conversation", "conv_9", "[conversation (conv_9): not stored]"),
    ],
)
def test_a_server_side_reference_is_a_gap_not_a_400(
    api: ApiClient, field: str, value: str, text: str
) -> None:
    body = {field: value, "input": "hi"}
    response = post(api, json.dumps(body).encode(), "?format=openai-responses")
    assert response.status_code == 201, response.content[:300]
    assert response.json()["gaps"][0]["where"] == field
    gap = Block.objects.get(text=text)
    assert gap.origin == {field: value}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "format", "where"),
    [
        (b'{"type":"user"' + b" " * 3_000_000, "claude-code", "line 1"),  # no newline at all
        (COMPACT_LINE + b'{"type":"user"' + b" " * 3_000_000 + b"}\n", None, "line 2"),
        (b'{"messages": [' + b" " * 3_000_000 + b"]}", "openai-chat", "line 1"),
        (b'{"messages": []}\n' + b" " * 3_000_000, None, "file"),
    ],
)
def test_manage_import_reads_in_bounded_pieces_and_names_the_limit(
    tmp_path: Path, settings: Any, body: bytes, format: str | None, where: str
) -> None:
    settings.REPLAY_MAX_BODY_MB = 1
    path = tmp_path / "big"
    path.write_bytes(body)
    err = StringIO()
    with pytest.raises(CommandError):
        call_command("import", str(path), format=format, stderr=err)
    assert f"{where}: is over the 1 MB limit (REPLAY_MAX_BODY_MB)" in err.getvalue()
    assert stored() == (0, 0, 0)


@pytest.mark.django_db
def test_manage_import_of_a_device_with_no_newline_ends(settings: Any) -> None:
    settings.REPLAY_MAX_BODY_MB = 1
    err = StringIO()
    with pytest.raises(CommandError):
        call_command("import", "/dev/zero", format="claude-code", stderr=err)
    assert "line 1: is over the 1 MB limit" in err.getvalue()
