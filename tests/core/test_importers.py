"""The importers (docs/contract.md §6) as pure functions: real recordings, one test per mapping rule
per format, Claude Code's chain and grouping, detection and malformed sources."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from conversations.core import importers, replay
from conversations.core.importers import ImportFormatError, claude_code, otel_genai
from tests import importdata
from tests.realdata import REAL
from tests.sdk_types import validate_payload

SOURCES = importdata.all_sources()


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


def kinds(imported: importers.Imported) -> list[tuple[str, list[str]]]:
    return [(m.role, [b["type"] for b in m.blocks]) for m in imported.messages]


# Real recordings.


@pytest.mark.parametrize(("label", "raw"), SOURCES, ids=[label for label, _ in SOURCES])
def test_every_real_recording_imports_and_replays_by_the_spec(label: str, raw: bytes) -> None:
    imported = importers.read(raw)
    assert imported.messages
    messages = importdata.stored(imported)
    for vision in (True, False):
        for shape in replay.SHAPES:
            payload = replay.project(messages, vision=vision, shape=shape)
            kept = [m for m in messages if shape == "openai" or m.role != "system"]
            assert [m["role"] for m in payload["messages"]] == [m.role for m in kept]
            validate_payload(payload, shape)
            wire = orjson.dumps(payload)
            assert b'"tool_call_id"' not in wire and b'"role":"tool"' not in wire


@pytest.mark.parametrize("name", list(importdata.REQUEST_FILES))
def test_request_bodies_are_detected_as_their_format(name: str) -> None:
    for body in importdata.request_bodies(name):
        assert importers.detect(body) == importdata.REQUEST_FILES[name]


@pytest.mark.parametrize("name", importdata.SESSION_FILES)
def test_session_files_are_detected_as_claude_code(name: str) -> None:
    assert importers.detect((REAL / name).read_bytes()) == "claude-code"


def test_the_same_conversation_imports_alike_from_anthropic_and_openai() -> None:
    anthropic = importers.read(
        importdata.request_bodies("anthropic_messages_tool_result_text_image_base64.json")[-1]
    )
    openai = importers.read(
        importdata.request_bodies("openai_chat_tool_result_image_as_user_data_url.json")[-1]
    )
    image_a = [b for m in anthropic.messages for b in m.blocks if b["type"] == "image"]
    image_o = [b for m in openai.messages for b in m.blocks if b["type"] == "image"]
    assert image_a[0]["data"] == image_o[0]["data"]
    assert anthropic.messages[2].blocks[0]["name"] == "get_mixed_content"
    assert openai.messages[2].blocks[0]["name"] == "get_mixed_content"


# Rule 1: one stored message per source message, in order.


def test_anthropic_system_comes_first_then_one_message_each() -> None:
    body = {
        "model": "claude-x",
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
        ],
    }
    imported = importers.read(dumps(body), "anthropic")
    assert kinds(imported) == [("system", ["text"]), ("user", ["text"]), ("assistant", ["text"])]
    assert imported.metadata == {"model": "claude-x"}


def test_openai_chat_tool_messages_group_into_one_user_message() -> None:
    body = {
        "messages": [
            {"role": "developer", "content": "Rules."},
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                    {"id": "b", "type": "function", "function": {"name": "g", "arguments": "[1]"}},
                ],
            },
            {"role": "tool", "tool_call_id": "a", "content": "A"},
            {"role": "tool", "tool_call_id": "b", "content": [{"type": "text", "text": "B"}]},
            {"role": "assistant", "content": "done"},
        ]
    }
    imported = importers.read(dumps(body), "openai-chat")
    assert kinds(imported) == [
        ("system", ["text"]),
        ("user", ["text"]),
        ("assistant", ["tool_use", "tool_use"]),
        ("user", ["tool_result", "tool_result"]),
        ("assistant", ["text"]),
    ]
    assert imported.messages[0].metadata["source_role"] == "developer"
    results = imported.messages[3].blocks
    assert [(r["tool_use_id"], r["name"], r["content"]) for r in results] == [
        ("a", "f", "A"),
        ("b", "g", "B"),
    ]
    # Rule 2: arguments that are not a JSON object are kept raw.
    assert imported.messages[2].blocks[1]["input"] == {"_raw": "[1]"}


def test_openai_responses_groups_reasoning_and_calls_into_one_assistant_turn() -> None:
    body = {
        "instructions": "Sys.",
        "input": [
            {"role": "user", "content": "go"},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "think"}],
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "c1",
                "name": "f",
                "arguments": '{"x":1}',
            },
            {"type": "custom_tool_call", "call_id": "c2", "name": "patch", "input": "*** diff"},
            {"type": "function_call_output", "call_id": "c1", "output": "one"},
            {"type": "custom_tool_call_output", "call_id": "c2", "output": "two"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "ok"}],
            },
        ],
    }
    imported = importers.read(dumps(body))
    assert imported.format == "openai-responses"
    assert kinds(imported) == [
        ("system", ["text"]),
        ("user", ["text"]),
        ("assistant", ["reasoning", "tool_use", "tool_use"]),
        ("user", ["tool_result", "tool_result"]),
        ("assistant", ["text"]),
    ]
    calls = imported.messages[2].blocks
    assert calls[1]["input"] == {"x": 1}
    assert calls[2]["input"] == {"_raw": "*** diff"}
    assert imported.messages[2].metadata["ids"] == ["rs_1", "fc_1"]
    assert [r["name"] for r in imported.messages[3].blocks] == ["f", "patch"]


def test_otel_tool_messages_become_user_results() -> None:
    body = {
        "gen_ai.system_instructions": '[{"type": "text", "content": "Sys."}]',
        "gen_ai.input.messages": [
            {"role": "user", "parts": [{"type": "text", "content": "go"}]},
            {
                "role": "assistant",
                "parts": [{"type": "tool_call", "id": "c", "name": "f", "arguments": {"a": 1}}],
            },
            {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c", "response": "R"}]},
        ],
        "gen_ai.output.messages": [
            {
                "role": "assistant",
                "parts": [{"type": "text", "content": "ok"}],
                "finish_reason": "stop",
            }
        ],
    }
    imported = importers.read(dumps(body))
    assert imported.format == "otel-genai"
    assert kinds(imported) == [
        ("system", ["text"]),
        ("user", ["text"]),
        ("assistant", ["tool_use"]),
        ("user", ["tool_result"]),
        ("assistant", ["text"]),
    ]
    assert imported.messages[3].blocks[0]["name"] == "f"
    assert imported.messages[4].metadata["finish_reason"] == "stop"


# Rule 2: blocks.


def test_anthropic_blocks_map_to_the_five_kinds() -> None:
    body = {
        "model": "claude-x",
        "messages": [
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {
                        "type": "server_tool_use",
                        "id": "s1",
                        "name": "web_search",
                        "input": {"q": "x"},
                    },
                    {
                        "type": "web_search_tool_result",
                        "tool_use_id": "s1",
                        "content": {
                            "type": "web_search_tool_result_error",
                            "error_code": "max_uses_exceeded",
                        },
                    },
                    {
                        "type": "mcp_tool_use",
                        "id": "m1",
                        "name": "echo",
                        "server_name": "srv",
                        "input": {},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "m1",
                        "content": [
                            {"type": "text", "text": "one"},
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": "AAAA",
                                },
                            },
                            {"type": "text", "text": "two"},
                        ],
                    }
                ],
            },
        ],
    }
    imported = importers.read(dumps(body), "anthropic")
    assistant, user = imported.messages
    assert [b["type"] for b in assistant.blocks] == [
        "reasoning",
        "reasoning",
        "tool_use",
        "tool_result",
        "tool_use",
    ]
    assert assistant.blocks[0]["origin"] == {
        "type": "thinking",
        "thinking": "hm",
        "signature": "sig",
    }
    assert assistant.blocks[1]["text"] == "[redacted]"
    error = assistant.blocks[3]
    assert error["is_error"] is True and error["content"] == "max_uses_exceeded"
    assert assistant.blocks[4]["origin"]["server_name"] == "srv"
    assert [b["type"] for b in user.blocks] == ["tool_result", "image"]
    assert user.blocks[0]["content"] == "one\n\ntwo"
    assert user.blocks[0]["name"] == "echo"
    assert imported.gaps == []


def test_openai_data_url_image_is_an_image_and_a_url_is_a_gap() -> None:
    body = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                ],
            }
        ]
    }
    imported = importers.read(dumps(body), "openai-chat")
    first, second = imported.messages[0].blocks
    assert first == {"type": "image", "media_type": "image/png", "data": "AAAA"}
    assert second["text"] == "[image (https://example.com/a.png): not stored]"
    assert second["origin"] == body["messages"][0]["content"][1]


def test_responses_encrypted_reasoning_is_redacted_and_keeps_its_source() -> None:
    body = {
        "input": [{"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": "gAAA"}]
    }
    imported = importers.read(dumps(body), "openai-responses")
    block = imported.messages[0].blocks[0]
    assert block["text"] == "[redacted]"
    assert block["origin"]["encrypted_content"] == "gAAA"


def test_otel_thinking_blob_and_raw_arguments() -> None:
    body = [
        {
            "role": "user",
            "parts": [
                {"type": "blob", "modality": "image", "mime_type": "image/png", "content": "AAAA"}
            ],
        },
        {
            "role": "assistant",
            "parts": [
                {"type": "thinking", "content": "hm"},
                {"type": "tool_call", "id": "c", "name": "f", "arguments": "args1"},
            ],
        },
    ]
    imported = importers.read(dumps(body))
    assert imported.messages[0].blocks[0]["type"] == "image"
    assert [b["type"] for b in imported.messages[1].blocks] == ["reasoning", "tool_use"]
    assert imported.messages[1].blocks[1]["input"] == {"_raw": "args1"}


# Rule 3: nothing silently dropped.


@pytest.mark.parametrize(
    ("format", "body", "marker"),
    [
        (
            "anthropic",
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "document",
                                "source": {
                                    "type": "base64",
                                    "media_type": "application/pdf",
                                    "data": "JVBE",
                                },
                            }
                        ],
                    }
                ]
            },
            "[document (application/pdf): not stored]",
        ),
        (
            "anthropic",
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": [
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": "AAAA",
                                },
                            }
                        ],
                    }
                ]
            },
            "[image (image/png, in an assistant message): not stored]",
        ),
        (
            "anthropic",
            {"messages": [{"role": "user", "content": [{"type": "brand_new_block", "x": 1}]}]},
            "[brand_new_block: not stored]",
        ),
        (
            "openai-chat",
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "input_audio",
                                "input_audio": {"data": "AAAA", "format": "wav"},
                            }
                        ],
                    }
                ]
            },
            "[audio (wav): not stored]",
        ),
        (
            "openai-responses",
            {"previous_response_id": "resp_1", "input": "next"},
            "[previous response (resp_1): not stored]",
        ),
        (
            "openai-responses",
            {"input": [{"type": "web_search_call", "id": "ws_1", "status": "completed"}]},
            "[web_search_call (ws_1): not stored]",
        ),
        (
            "otel-genai",
            [
                {
                    "role": "user",
                    "parts": [{"type": "uri", "modality": "video", "uri": "gs://b/v.mp4"}],
                }
            ],
            "[video (gs://b/v.mp4): not stored]",
        ),
    ],
)
def test_what_has_no_kind_becomes_a_marked_gap(format: str, body: Any, marker: str) -> None:
    imported = importers.read(dumps(body), format)  # type: ignore[arg-type]
    texts = [b for m in imported.messages for b in m.blocks if b.get("text") == marker]
    assert len(texts) == 1
    assert texts[0]["origin"]
    gap = imported.gaps[0]
    assert imported.messages[gap.message].blocks[gap.block]["text"] == marker  # type: ignore[index]


def test_base64_inside_origin_is_replaced_by_a_note() -> None:
    data = "A" * 10_000
    body = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "document",
                        "source": {"type": "base64", "media_type": "application/pdf", "data": data},
                    }
                ],
            }
        ]
    }
    imported = importers.read(dumps(body), "anthropic")
    origin = imported.messages[0].blocks[0]["origin"]
    assert data not in json.dumps(origin)
    assert "10000 characters" in origin["source"]["data"]


def test_claude_code_lists_what_it_never_records() -> None:
    imported = importers.read((REAL / "claude_code_compact_boundary.jsonl").read_bytes())
    listed = {(g.kind, g.message) for g in imported.gaps}
    assert ("system prompt", None) in listed
    assert ("tool definitions", None) in listed


# Rule 4: provenance.


def test_claude_code_provenance_per_message_and_conversation() -> None:
    imported = importers.read(
        (REAL / "claude_code_rejected_tool_use_interrupted.jsonl").read_bytes()
    )
    assistant = imported.messages[1].metadata
    assert assistant["id"].startswith("msg_")
    assert assistant["model"] == "claude-opus-4-6"
    assert "usage" in assistant and "timestamp" in assistant and "uuid" in assistant
    assert len(assistant["uuids"]) == 5  # five lines, one message
    assert set(claude_code.SESSION_KEYS) <= set(imported.metadata)
    assert imported.metadata["version"] == "2.1.38"


def test_otel_export_spans_keep_model_and_usage() -> None:
    export = _export(
        [
            _span("t", 1, [_user("hi")], [_assistant("a")], model="gpt-4o", tokens=(3, 4)),
            _span("t", 2, [_user("hi"), _assistant("a"), _user("more")], [_assistant("b")]),
        ]
    )
    imported = importers.read(dumps(export))
    assert [(m.role, m.blocks[0]["text"]) for m in imported.messages] == [
        ("user", "hi"),
        ("assistant", "a"),
        ("user", "more"),
        ("assistant", "b"),
    ]
    assert imported.messages[1].metadata["gen_ai.request.model"] == "gpt-4o"
    assert imported.messages[1].metadata["gen_ai.usage.input_tokens"] == 3


def test_otel_export_of_one_span_keeps_its_usage_on_its_output_only() -> None:
    """A first span that repeats earlier turns: their usage was other calls', never this
    one's (docs/contract.md §6 rule 4)."""
    history = [_user("a"), _assistant("b"), _user("c"), _assistant("d"), _user("e")]
    export = _export([_span("t", 1, history, [_assistant("f")], model="m", tokens=(140, 9))])
    imported = importers.read(dumps(export))
    carrying = [
        i for i, m in enumerate(imported.messages) if "gen_ai.usage.input_tokens" in m.metadata
    ]
    assert carrying == [5]
    assert imported.messages[5].metadata["gen_ai.request.model"] == "m"
    assert "gen_ai.request.model" not in imported.messages[1].metadata
    assert imported.messages[1].metadata["span"] == "resourceSpans[0].scopeSpans[0].spans[0]"


def test_new_messages_is_what_a_span_adds() -> None:
    first = otel_genai.messages(None, [_user("hi")], [_assistant("a")]).messages
    second = otel_genai.messages(None, [_user("hi"), _assistant("a"), _user("x")], None).messages
    assert [m.blocks[0]["text"] for m in otel_genai.new_messages(first, second)] == ["x"]
    assert otel_genai.new_messages(second, second) == []


# Rule 5: Claude Code specifics.


def line(uuid: str, parent: str | None, kind: str, content: Any, **extra: Any) -> bytes:
    message: dict[str, Any] = {"role": kind, "content": content}
    if "mid" in extra:
        message["id"] = extra.pop("mid")
    return dumps(
        {
            "type": kind,
            "uuid": uuid,
            "parentUuid": parent,
            "sessionId": "s",
            "message": message,
            **extra,
        }
    )


def session(*lines: bytes) -> importers.Imported:
    return importers.read(b"\n".join(lines), "claude-code")


def test_claude_code_follows_the_main_chain_and_counts_abandoned_branches() -> None:
    imported = session(
        line("u1", None, "user", "first"),
        line("a1", "u1", "assistant", [{"type": "text", "text": "old answer"}], mid="m1"),
        line("u2", "u1", "user", "edited prompt"),
        line("a2", "u2", "assistant", [{"type": "text", "text": "new answer"}], mid="m2"),
    )
    assert [m.blocks[0]["text"] for m in imported.messages] == [
        "first",
        "edited prompt",
        "new answer",
    ]
    abandoned = [g for g in imported.gaps if g.kind == "abandoned branch"]
    assert abandoned and "1 lines" in abandoned[0].detail
    assert imported.stats["abandoned_lines"] == 1


def test_claude_code_parallel_calls_and_their_results_stay_on_the_chain() -> None:
    call = lambda i: [{"type": "tool_use", "id": i, "name": "T", "input": {}}]  # noqa: E731
    result = lambda i: [{"type": "tool_result", "tool_use_id": i, "content": i}]  # noqa: E731
    imported = session(
        line("u1", None, "user", "go"),
        line("a1", "u1", "assistant", call("c1"), mid="m"),
        line("a2", "a1", "assistant", call("c2"), mid="m"),
        line("r2", "a2", "user", result("c2")),
        line("r1", "a1", "user", result("c1")),
        line("a3", "r1", "assistant", [{"type": "text", "text": "done"}], mid="n"),
    )
    assert kinds(imported) == [
        ("user", ["text"]),
        ("assistant", ["tool_use", "tool_use"]),
        ("user", ["tool_result", "tool_result"]),
        ("assistant", ["text"]),
    ]
    assert [b["name"] for b in imported.messages[2].blocks] == ["T", "T"]


def test_claude_code_compact_boundary_is_a_marker_on_the_next_message() -> None:
    imported = importers.read((REAL / "claude_code_compact_boundary.jsonl").read_bytes())
    marked = [i for i, m in enumerate(imported.messages) if "compact_boundary" in m.metadata]
    assert len(marked) == 1
    message = imported.messages[marked[0]]
    assert message.metadata.get("isCompactSummary") is True
    assert message.metadata["compact_boundary"]["trigger"] == "manual"
    assert imported.metadata["compact_boundaries"] == [
        {**message.metadata["compact_boundary"], "seq": marked[0]}
    ]
    # Not a block: the boundary's text is nowhere in the record.
    assert not [
        b for m in imported.messages for b in m.blocks if b.get("text") == "Conversation compacted"
    ]
    # The chain runs through logicalParentUuid back to the first lines.
    assert imported.messages[3].blocks[0]["text"] == "how are you doing"


def test_claude_code_summary_gives_the_title_and_sidechains_are_linked() -> None:
    imported = session(
        line("u1", None, "user", "main"),
        line("s1", "u1", "user", "task", isSidechain=True, agentId="ag"),
        line(
            "s2",
            "s1",
            "assistant",
            [{"type": "text", "text": "sub"}],
            mid="x",
            isSidechain=True,
            agentId="ag",
        ),
        line("a1", "u1", "assistant", [{"type": "text", "text": "answer"}], mid="y"),
        dumps({"type": "summary", "summary": "A title", "leafUuid": "a1"}),
    )
    assert imported.title == "A title"
    assert [m.blocks[0]["text"] for m in imported.messages] == ["main", "answer"]
    (side,) = imported.linked
    assert [m.blocks[0]["text"] for m in side.messages] == ["task", "sub"]
    assert side.metadata["agentId"] == "ag"


def test_claude_code_non_message_lines_are_counted() -> None:
    imported = importers.read(
        (REAL / "claude_code_tool_heavy_parallel_interrupts.jsonl").read_bytes()
    )
    assert imported.stats["ignored:progress"] == 10
    assert imported.stats["ignored:queue-operation"] == 2
    assert imported.stats["ignored:file-history-snapshot"] == 3


def test_the_mapper_is_incremental() -> None:
    mapper = claude_code.SessionMapper()
    first = mapper.feed(
        json.loads(line("a1", None, "assistant", [{"type": "text", "text": "x"}], mid="m")),
        "line 1",
    )
    second = mapper.feed(
        json.loads(line("a2", "a1", "assistant", [{"type": "text", "text": "y"}], mid="m")),
        "line 2",
    )
    third = mapper.feed({"type": "progress", "uuid": "p"}, "line 3")
    fourth = mapper.feed({"type": "system", "subtype": "compact_boundary", "uuid": "b"}, "line 4")
    assert isinstance(first[0], claude_code.NewMessage) and first[0].index == 0
    assert isinstance(second[0], claude_code.AppendBlocks) and second[0].index == 0
    assert second[0].blocks == [{"type": "text", "text": "y"}]
    assert third == [claude_code.Ignored("progress")]
    assert isinstance(fourth[0], claude_code.Marker)


# Malformed sources name the line or path; detection names the formats tried.


def test_a_bad_line_in_the_middle_of_a_session_file_is_named() -> None:
    raw = (REAL / "claude_code_compact_boundary.jsonl").read_bytes().splitlines()
    raw[6] = b'{"type": "user", "message": '
    with pytest.raises(ImportFormatError) as caught:
        importers.read(b"\n".join(raw))
    assert caught.value.where == "line 7"


def test_bad_json_names_its_line_and_column() -> None:
    with pytest.raises(ImportFormatError) as caught:
        importers.read(b'{"messages": [\n  {"role": "user",, }]}', "anthropic")
    assert caught.value.where.startswith("line 2, column")


@pytest.mark.parametrize(
    ("format", "body", "where"),
    [
        ("anthropic", {"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        (
            "anthropic",
            {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
            "messages[0].content[0].text",
        ),
        (
            "openai-chat",
            {"messages": [{"role": "tool", "content": "x"}]},
            "messages[0].tool_call_id",
        ),
        (
            "openai-responses",
            {"input": [{"type": "function_call", "call_id": "c"}]},
            "input[0].name",
        ),
        (
            "otel-genai",
            {"gen_ai.input.messages": [{"role": "robot", "parts": []}]},
            "gen_ai.input.messages[0].role",
        ),
    ],
)
def test_a_wrong_shape_names_its_json_path(format: str, body: Any, where: str) -> None:
    with pytest.raises(ImportFormatError) as caught:
        importers.read(dumps(body), format)  # type: ignore[arg-type]
    assert caught.value.where == where


def test_a_wrong_format_forced_is_an_error() -> None:
    body = importdata.request_bodies("openai_responses_reasoning_function_call_output.json")[-1]
    with pytest.raises(ImportFormatError) as caught:
        importers.read(body, "anthropic")
    # The content shows openai-responses (its `input`): the named format is refused.
    assert caught.value.where == "input" and caught.value.format == "anthropic"
    assert "shows openai-responses content, not anthropic" in caught.value.message


def test_an_ambiguous_body_names_the_formats_tried() -> None:
    with pytest.raises(ImportFormatError) as caught:
        importers.detect(dumps({"messages": [{"role": "user", "content": "hi"}]}))
    assert "tried anthropic, openai-chat, openai-responses, claude-code, otel-genai" in str(
        caught.value
    )


def test_an_unknown_body_names_the_formats_tried() -> None:
    with pytest.raises(ImportFormatError) as caught:
        importers.detect(b"hello")
    assert "tried anthropic" in str(caught.value)


# OTLP builders.


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "content": text}]}


def _assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "parts": [{"type": "text", "content": text}]}


def _span(
    trace: str,
    start: int,
    inputs: list[Any],
    outputs: list[Any],
    *,
    model: str | None = None,
    tokens: tuple[int, int] | None = None,
) -> dict[str, Any]:
    attributes = [
        {"key": "gen_ai.input.messages", "value": {"stringValue": json.dumps(inputs)}},
        {"key": "gen_ai.output.messages", "value": {"stringValue": json.dumps(outputs)}},
    ]
    if model:
        attributes.append({"key": "gen_ai.request.model", "value": {"stringValue": model}})
    if tokens:
        attributes.append(
            {"key": "gen_ai.usage.input_tokens", "value": {"intValue": str(tokens[0])}}
        )
        attributes.append(
            {"key": "gen_ai.usage.output_tokens", "value": {"intValue": str(tokens[1])}}
        )
    return {
        "traceId": trace,
        "spanId": f"s{start}",
        "startTimeUnixNano": str(start),
        "attributes": attributes,
    }


def _export(spans: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}


# Rule 4 for request bodies and OTel: each message names its source; the body's other keys
# are the conversation's metadata.


@pytest.mark.parametrize(
    ("format", "body", "sources", "metadata"),
    [
        (
            "anthropic",
            {
                "model": "claude-x",
                "max_tokens": 5,
                "system": "S",
                "messages": [{"role": "user", "content": "u"}],
            },
            ["system", "messages[0]"],
            {"model": "claude-x", "max_tokens": 5},
        ),
        (
            "openai-chat",
            {
                "model": "gpt-x",
                "messages": [
                    {"role": "system", "content": "S"},
                    {"role": "user", "content": "u", "name": "ann"},
                ],
            },
            ["messages[0]", "messages[1]"],
            {"model": "gpt-x"},
        ),
        (
            "openai-responses",
            {
                "model": "gpt-x",
                "store": False,
                "instructions": "S",
                "input": [{"role": "user", "content": "u", "id": "msg_1"}],
            },
            ["instructions", "input[0]"],
            {"model": "gpt-x", "store": False},
        ),
        (
            "otel-genai",
            {
                "gen_ai.request.model": "m",
                "gen_ai.system_instructions": [{"type": "text", "content": "S"}],
                "gen_ai.input.messages": [{"role": "user", "parts": []}],
            },
            ["gen_ai.system_instructions", "gen_ai.input.messages[0]"],
            {"gen_ai.request.model": "m"},
        ),
    ],
)
def test_provenance_names_each_source_and_keeps_the_request(
    format: str, body: Any, sources: list[str], metadata: dict[str, Any]
) -> None:
    imported = importers.read(dumps(body), format)  # type: ignore[arg-type]
    assert [m.metadata["source"] for m in imported.messages] == sources
    assert imported.metadata == metadata


def test_the_sdk_types_accept_what_the_importer_must_still_mark() -> None:
    # Why the importers dispatch on `type` themselves: the SDK's request types take an
    # unknown block and drop keys, so they serve as a check, never as the parser.
    from anthropic.types import MessageParam
    from pydantic import TypeAdapter

    messages = [{"role": "user", "content": [{"type": "bogus", "secret": 1}]}]
    TypeAdapter(list[MessageParam]).validate_python(messages)  # no error
    imported = importers.read(dumps({"messages": messages}), "anthropic")
    (block,) = imported.messages[0].blocks
    assert block["text"] == "[bogus: not stored]"
    assert block["origin"] == {"type": "bogus", "secret": 1}
    assert [g.kind for g in imported.gaps] == ["bogus"]


@pytest.mark.parametrize(
    "name", [n for n, f in importdata.REQUEST_FILES.items() if f == "anthropic"]
)
def test_real_anthropic_bodies_pass_the_sdk_check_and_import_whole(name: str) -> None:
    from anthropic.types import MessageParam
    from pydantic import TypeAdapter

    for raw in importdata.request_bodies(name):
        body = json.loads(raw)
        TypeAdapter(list[MessageParam]).validate_python(body["messages"])
        imported = importers.read(raw, "anthropic")
        sources = len(body["messages"]) + (1 if body.get("system") else 0)
        assert len(imported.messages) == sources
