"""The context API and compacted replays (docs/contract.md §7): counts by message and kind, the
window, the threshold, policies and their parameters, measured usage beside the estimate."""

from __future__ import annotations

import orjson
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations.core import replay
from conversations.core.counting import compact, tokens
from conversations.core.replay import StoredMessage, TextBlock, ToolResultBlock, ToolUseBlock
from tests import builders as b
from tests.conftest import ApiClient
from tests.sdk_types import validate_payload

LIST = "/api/conversations"


def create(api: ApiClient, title: str = "Context", metadata: dict | None = None) -> str:
    response = api.post(LIST, {"title": title, "metadata": metadata or {}})
    assert response.status_code == 201, response.content
    return response.json()["id"]


def append(api: ApiClient, cid: str, role: str, blocks: list, metadata: dict | None = None):
    body = {"role": role, "blocks": blocks, "metadata": metadata or {}}
    response = api.post(f"{LIST}/{cid}/messages", body)
    assert response.status_code == 201, response.content
    return response.json()


def context(api: ApiClient, cid: str, **params) -> dict:
    response = api.get(f"{LIST}/{cid}/context", **params)
    assert response.status_code == 200, response.content
    return response.json()


@pytest.fixture
def agent(api: ApiClient) -> str:
    """A conversation with every kind, four tool rounds and a model in the metadata."""
    cid = create(api, metadata={"model": "claude-sonnet-4-5-20250929"})
    append(api, cid, "system", [b.text("You are terse.")])
    append(api, cid, "user", [b.text("Look:"), b.png()])
    for i in range(4):
        append(
            api,
            cid,
            "assistant",
            [
                {"type": "reasoning", "text": f"step {i}"},
                b.tool_use(f"c{i}", "read", path=f"/f{i}"),
            ],
            metadata={"usage": {"input_tokens": 100 + i, "output_tokens": 20}},
        )
        append(api, cid, "user", [b.tool_result(f"c{i}", f"file {i} " * 40, name="read")])
    return cid


def test_context_counts_every_message_by_kind(api, agent) -> None:
    data = context(api, agent)
    assert data["tokenizer"] == "o200k_base" and data["estimated"] is True
    assert data["window"] == 200_000 and data["model"] == "claude-sonnet-4-5-20250929"
    assert data["total"] == data["overhead"] + sum(m["tokens"] for m in data["messages"])
    for m in data["messages"]:
        assert sum(m["by_kind"].values()) == m["tokens"] - m["framing"]
    assert [m["seq"] for m in data["messages"]] == list(range(10))
    assert set(data["messages"][0]["by_kind"]) == {"system"}
    assert data["messages"][1]["by_kind"]["image"] == 85 + 170  # 3×2 px, one tile
    assert data["by_kind"]["tool_result"] == sum(
        m["by_kind"].get("tool_result", 0) for m in data["messages"]
    )
    assert data["threshold"] == {"tokens": 100_000, "seq": None}


def test_context_counts_equal_the_tokenizer_on_the_wire_text(api, agent) -> None:
    """A one-block message counts its wire content exactly, plus the envelope."""
    payload = api.get(f"{LIST}/{agent}/replay", vision="0").json()
    data = context(api, agent, vision="0")
    for wire, m in zip(payload["messages"], data["messages"], strict=True):
        if m["role"] == "user" and m["seq"] > 1:
            assert m["tokens"] == 3 + tokens.count_text(wire["content"])
    assert data["messages"][1]["by_kind"]["image"] == tokens.count_text(
        replay.image_marker("image/png")
    )


def test_measured_usage_is_shown_beside_the_estimate(api, agent) -> None:
    data = context(api, agent)
    first = data["messages"][2]
    assert first["usage"]["input"] == 100
    assert first["usage"]["input_estimate"] == data["messages"][1]["cumulative"]
    assert first["usage"]["input_ratio"] == round(100 / first["usage"]["input_estimate"], 2)
    assert first["usage"]["output"] == 20
    assert "usage" not in data["messages"][1]


def test_window_from_the_view_the_conversation_and_the_table(api, agent) -> None:
    assert context(api, agent, window="5000")["window"] == 5000
    by_model = context(api, agent, model="gpt-4o")
    assert (by_model["window"], by_model["window_source"]) == (128_000, "table")
    assert context(api, agent, model="no-such-model-x")["window"] is None
    cid = create(api, metadata={"context_window": 32_000})
    assert context(api, cid)["window"] == 32_000
    assert context(api, cid)["window_source"] == "conversation"
    bare = create(api)
    append(api, bare, "assistant", [b.text("hi")], metadata={"model": "gpt-4o-2024-08-06"})
    assert context(api, bare)["window"] == 128_000


def test_threshold_marks_the_message_where_the_trigger_is_reached(api, agent) -> None:
    data = context(api, agent, compact="clear_tool_uses", trigger="400", keep="9")
    crossing = next(m for m in data["messages"] if m["cumulative"] >= 400)
    assert data["threshold"] == {"tokens": 400, "seq": crossing["seq"]}


def test_compacted_context_gives_before_after_and_what_changed(api, agent) -> None:
    full = context(api, agent)
    data = context(api, agent, compact="microcompact", keep="1")
    assert data["compact"]["before"] == full["total"]
    assert data["compact"]["after"] == data["total"] < full["total"]
    assert data["compact"]["changed"] == [{"seq": s, "block": 0} for s in (3, 5, 7)]
    assert data["compact"]["parameters"] == {"compact": "microcompact", "keep": "1"}
    payload = api.get(f"{LIST}/{agent}/replay", compact="microcompact", keep="1").json()
    expected = f"Result (read): {compact.CLEARED_RESULT}"
    assert [payload["messages"][s]["content"] for s in (3, 5, 7)] == [expected] * 3
    assert payload["messages"][9]["content"].startswith("Result (read): file 3")
    validate_payload(payload, "openai")


@pytest.mark.parametrize("shape", ["openai", "anthropic"])
def test_compacted_replay_is_the_projection_of_the_compacted_record(api, agent, shape) -> None:
    response = api.get(
        f"{LIST}/{agent}/replay",
        compact="clear_tool_uses",
        trigger="0",
        keep="2",
        clear_tool_inputs="true",
        shape=shape,
        vision="0",
    )
    assert response.status_code == 200
    payload = orjson.loads(response.content)
    validate_payload(payload, shape)
    text = orjson.dumps(payload).decode()
    assert text.count(compact.CLEARED_TOOL_RESULT) == 2
    assert text.count("Tool use: read({})") == 2


def test_boundary_replays_from_the_stored_boundary(api) -> None:
    cid = create(api, metadata={compact.BOUNDARIES_KEY: [{"seq": 2}]})
    for word in ["old", "older", "summary", "new"]:
        append(api, cid, "user", [b.text(word)])
    payload = api.get(f"{LIST}/{cid}/replay", compact="boundary").json()
    assert [m["content"] for m in payload["messages"]] == ["summary", "new"]
    data = context(api, cid, compact="boundary")
    assert [m["seq"] for m in data["messages"]] == [2, 3]
    assert data["compact"]["dropped"] == 2


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"compact": "squash"}, "compact"),
        ({"compact": "microcompact", "keep": "x"}, "keep"),
        ({"compact": "microcompact", "exclude_tools": "a"}, "exclude_tools"),
        ({"compact": "clear_tool_uses", "clear_tool_inputs": ""}, "clear_tool_inputs"),
        ({"window": "0"}, "window"),
        ({"window": "lots"}, "window"),
        ({"vision": "maybe"}, "vision"),
    ],
)
@pytest.mark.parametrize("endpoint", ["context", "replay"])
def test_bad_parameters_are_a_400_naming_them(api, agent, params, field, endpoint) -> None:
    if endpoint == "replay" and field == "window":
        return  # the replay takes no window
    response = api.get(f"{LIST}/{agent}/{endpoint}", **params)
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field
    assert field in response.json()["error"]


def test_context_needs_a_token_and_a_known_conversation(api, agent) -> None:
    assert ApiClient(None).get(f"{LIST}/{agent}/context").status_code == 401
    assert api.get(f"{LIST}/00000000-0000-0000-0000-000000000000/context").status_code == 404


def test_counts_are_cached_per_block_and_a_new_block_is_the_only_recount(
    api, agent, blocks_counted
) -> None:
    context(api, agent)
    before = blocks_counted.n
    with CaptureQueriesContext(connection) as warm:
        context(api, agent)
    assert blocks_counted.n == before
    reads = [q for q in warm.captured_queries if "conversations_block" in q["sql"]]
    assert not [q for q in reads if '"text"' in q["sql"]]  # no block text read when warm
    seq = append(api, agent, "user", [b.text("one more")])["seq"]
    api.post(f"{LIST}/{agent}/messages/{seq}/blocks", b.text("and another"))
    context(api, agent)
    assert blocks_counted.n == before + 2


def test_pure_pressure_equals_the_core_count_of_the_stored_record() -> None:
    record = [
        StoredMessage("user", (TextBlock("q"),)),
        StoredMessage("assistant", (ToolUseBlock.of("c", "x", {}),)),
        StoredMessage("user", (ToolResultBlock("c", "x", "r"),)),
    ]
    counted = tokens.payload_count(record, vision=True, shape="openai")
    each = [3 + tokens.count_text(replay.prose(m.blocks[0])) for m in record]
    assert counted.total == 3 + sum(each)


def test_the_boundary_policy_starts_at_an_imported_claude_code_compaction(api):
    """An imported session's compact_boundary is where `compact=boundary` starts (docs/contract.md
    §6.5, §7)."""
    from tests.realdata import REAL

    raw = (REAL / "claude_code_compact_boundary.jsonl").read_bytes()
    imported = api.post("/api/imports?format=claude-code", raw).json()
    record = api.get(f"/api/conversations/{imported['id']}").json()
    (boundary,) = record["metadata"]["compact_boundaries"]
    full = api.get(f"/api/conversations/{imported['id']}/replay?compact=none").json()["messages"]
    after = api.get(f"/api/conversations/{imported['id']}/replay?compact=boundary").json()
    assert len(after["messages"]) == len(full) - boundary["seq"]
    assert after["messages"] == full[boundary["seq"] :]


def test_counts_of_a_claude_code_import_default_to_the_anthropic_shape(api):
    """A Claude Code session's images are counted by Anthropic's formula unless `?shape=` says
    otherwise; the replay itself keeps the openai default (docs/contract.md §3, §7)."""
    from tests.realdata import REAL

    raw = (REAL / "large/claude_code_screenshot_tool_result_image.jsonl").read_bytes()
    cid = api.post("/api/imports?format=claude-code", raw).json()["id"]
    counted = context(api, cid)
    assert (counted["shape"], counted["shape_source"]) == ("anthropic", "source")
    anthropic = context(api, cid, shape="anthropic")
    assert anthropic["shape_source"] == "query"
    assert counted["by_kind"]["image"] == anthropic["by_kind"]["image"] > 1000
    openai = context(api, cid, shape="openai")
    assert (openai["shape"], openai["shape_source"]) == ("openai", "query")
    assert openai["by_kind"]["image"] < counted["by_kind"]["image"]
    replayed = api.get(f"{LIST}/{cid}/replay").json()
    assert replayed == api.get(f"{LIST}/{cid}/replay", shape="openai").json()


def test_counts_of_a_conversation_without_a_source_stay_openai(api, agent):
    data = context(api, agent)
    assert (data["shape"], data["shape_source"]) == ("openai", "default")
