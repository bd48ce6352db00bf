"""Compaction previews (docs/contract.md §7): each policy rule by rule, the parser, and the payload
after a policy still validating against the SDKs' request types."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conversations.core import replay
from conversations.core.counting import compact, tokens
from conversations.core.counting.compact import Policy
from conversations.core.options import OptionError
from conversations.core.replay import (
    ReasoningBlock,
    StoredMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from tests import replay_strategies as s
from tests.sdk_types import validate_payload


def call(i: int, name: str = "read") -> ToolUseBlock:
    return ToolUseBlock.of(f"c{i}", name, {"path": f"/f{i}"})


def result(i: int, name: str = "read", content: str | None = None) -> ToolResultBlock:
    return ToolResultBlock(f"c{i}", name, content or f"contents of file {i} " * 50)


def rounds(n: int, name: str = "read") -> list[StoredMessage]:
    """A user asks, then n rounds of an assistant call and a user message with its result."""
    record = [StoredMessage("user", (TextBlock("go"),))]
    for i in range(n):
        record.append(StoredMessage("assistant", (call(i, name),)))
        record.append(StoredMessage("user", (result(i, name),)))
    return record


def policy(**query: str) -> Policy:
    parsed = Policy.from_query(query)
    assert parsed is not None
    return parsed


def results_of(record) -> list[str]:
    return [b.content for m in record for b in m.blocks if isinstance(b, ToolResultBlock)]


# The parser.


def test_no_policy_without_compact() -> None:
    assert Policy.from_query({}) is None
    assert Policy.from_query({"compact": "none"}) is None


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"compact": "shrink"}, "compact"),
        ({"compact": "microcompact", "keep": "-1"}, "keep"),
        ({"compact": "microcompact", "keep": "three"}, "keep"),
        ({"compact": "clear_tool_uses", "trigger": "1e5"}, "trigger"),
        ({"compact": "clear_tool_uses", "clear_at_least": ""}, "clear_at_least"),
        ({"compact": "microcompact", "trigger": "5"}, "trigger"),
        ({"compact": "boundary", "keep": "1"}, "keep"),
        ({"keep": "2"}, "keep"),
        ({"compact": "clear_tool_uses", "exclude_tools": ",".join(["x"] * 101)}, "exclude_tools"),
    ],
)
def test_a_bad_parameter_is_named(query, field) -> None:
    with pytest.raises(OptionError) as caught:
        Policy.from_query(query)
    assert caught.value.field == field
    assert field in caught.value.message


def test_defaults_and_round_trip() -> None:
    p = policy(compact="clear_tool_uses")
    assert (p.keep, p.trigger, p.clear_at_least, p.exclude_tools, p.clear_tool_inputs) == (
        3, 100_000, 0, frozenset(), False,
    )  # fmt: skip
    assert policy(compact="clear_thinking").keep == 1
    full = policy(compact="clear_tool_uses", keep="5", trigger="10", clear_at_least="7",
                  exclude_tools="a, b", clear_tool_inputs="true")  # fmt: skip
    assert Policy.from_query(full.query()) == full
    named = policy(compact="clear_tool_uses", clear_tool_inputs="a,b")
    assert named.clear_tool_inputs == {"a", "b"}


# microcompact


def test_microcompact_keeps_the_n_most_recent_results() -> None:
    record = rounds(5)
    out = compact.compact(record, policy(compact="microcompact"))
    contents = results_of(out.messages)
    assert contents[:2] == [compact.CLEARED_RESULT] * 2
    assert contents[2:] == results_of(record)[2:]
    assert out.changed == {(2, 0), (4, 0)}
    cleared = out.messages[2].blocks[0]
    assert (cleared.name, cleared.is_error, cleared.tool_use_id) == ("read", False, "c0")
    assert replay.prose(cleared) == "Result (read): [Old tool result content cleared]"
    assert [m.role for m in out.messages] == [m.role for m in record]


def test_microcompact_keep_zero_clears_all_and_keep_more_clears_none() -> None:
    record = rounds(2)
    none_kept = compact.compact(record, policy(compact="microcompact", keep="0"))
    assert results_of(none_kept.messages) == [compact.CLEARED_RESULT] * 2
    out = compact.compact(record, policy(compact="microcompact", keep="9"))
    assert out.messages == tuple(record) and not out.changed and out.note


def test_microcompact_clears_results_without_their_call_and_keeps_errors_flag() -> None:
    record = [
        StoredMessage("user", (ToolResultBlock("gone", "read", "orphan", True),)),
        StoredMessage("user", (result(1),)),
    ]
    out = compact.compact(record, policy(compact="microcompact", keep="1"))
    cleared = ToolResultBlock("gone", "read", compact.CLEARED_RESULT, True)
    assert out.messages[0].blocks[0] == cleared
    assert out.changed == {(0, 0)}


# clear_tool_uses


def test_clear_tool_uses_does_nothing_under_the_trigger() -> None:
    record = rounds(6)
    total = tokens.payload_count(record, vision=True, shape="openai").total
    under = compact.compact(record, policy(compact="clear_tool_uses", trigger=str(total + 1)))
    assert under.messages == tuple(record) and "trigger" in under.note
    at = compact.compact(record, policy(compact="clear_tool_uses", trigger=str(total)))
    assert len(at.changed) == 3


def test_clear_tool_uses_keeps_the_n_most_recent_uses() -> None:
    record = rounds(6)
    out = compact.compact(record, policy(compact="clear_tool_uses", trigger="0", keep="2"))
    assert results_of(out.messages) == [compact.CLEARED_TOOL_RESULT] * 4 + results_of(record)[4:]
    # Inputs stay unless asked.
    assert [b for m in out.messages for b in m.blocks if isinstance(b, ToolUseBlock)] == [
        call(i) for i in range(6)
    ]


def test_clear_tool_uses_excludes_tools() -> None:
    record = rounds(2, "read") + rounds(2, "write")[1:]
    out = compact.compact(
        record, policy(compact="clear_tool_uses", trigger="0", keep="0", exclude_tools="write")
    )
    assert results_of(out.messages)[:2] == [compact.CLEARED_TOOL_RESULT] * 2
    assert results_of(out.messages)[2:] == results_of(record)[2:]


def test_clear_tool_uses_clears_inputs_when_asked() -> None:
    record = rounds(3)
    out = compact.compact(
        record, policy(compact="clear_tool_uses", trigger="0", keep="1", clear_tool_inputs="true")
    )
    calls = [b for m in out.messages for b in m.blocks if isinstance(b, ToolUseBlock)]
    assert [c.input_json for c in calls] == ["{}", "{}", call(2).input_json]
    assert replay.prose(calls[0]) == "Tool use: read({})"
    assert (1, 0) in out.changed and (5, 0) not in out.changed
    named = compact.compact(
        record, policy(compact="clear_tool_uses", trigger="0", keep="1", clear_tool_inputs="ls")
    )
    assert all(c == call(i) for i, c in enumerate(
        b for m in named.messages for b in m.blocks if isinstance(b, ToolUseBlock)))  # fmt: skip


def test_clear_at_least_clears_nothing_when_too_little_would_go() -> None:
    record = rounds(4)
    freed = sum(tokens.count_text(replay.prose(result(i))) for i in range(1)) - tokens.count_text(
        replay.prose(ToolResultBlock("c0", "read", compact.CLEARED_TOOL_RESULT))
    )  # fmt: skip
    enough = compact.compact(
        record, policy(compact="clear_tool_uses", trigger="0", keep="3", clear_at_least=str(freed))
    )
    assert len(enough.changed) == 1
    too_much = compact.compact(
        record,
        policy(compact="clear_tool_uses", trigger="0", keep="3", clear_at_least=str(freed + 1)),
    )
    assert not too_much.changed and "clear_at_least" in too_much.note


def test_clear_tool_uses_with_an_unanswered_call_and_an_orphan_result() -> None:
    record = [
        StoredMessage("user", (ToolResultBlock("lost", "grep", "orphan " * 20),)),
        StoredMessage("assistant", (call(1),)),
        StoredMessage("user", (result(1),)),
        StoredMessage("assistant", (call(2),)),  # killed mid-round: no result
    ]
    out = compact.compact(
        record, policy(compact="clear_tool_uses", trigger="0", keep="1", clear_tool_inputs="true")
    )
    # Three uses (the orphan counts as one); the newest (unanswered) is kept.
    assert out.messages[0].blocks[0].content == compact.CLEARED_TOOL_RESULT
    assert out.messages[1].blocks[0].input_json == "{}"
    assert out.messages[2].blocks[0].content == compact.CLEARED_TOOL_RESULT
    assert out.messages[3].blocks[0] == call(2)


# clear_thinking


def test_clear_thinking_keeps_the_last_assistant_turns_reasoning() -> None:
    record = [
        StoredMessage("assistant", (ReasoningBlock("first"), TextBlock("a"))),
        StoredMessage("user", (ReasoningBlock("user-side?"),)),
        StoredMessage("assistant", (ReasoningBlock("second"),)),
        StoredMessage("assistant", (ReasoningBlock("last"), TextBlock("b"))),
    ]
    out = compact.compact(record, policy(compact="clear_thinking"))
    assert out.changed == {(0, 0), (1, 0), (2, 0)}
    assert out.messages[3] == record[3]
    assert out.messages[0].blocks == (ReasoningBlock("[Reasoning cleared]"), TextBlock("a"))
    two = compact.compact(record, policy(compact="clear_thinking", keep="2"))
    assert two.changed == {(0, 0), (1, 0)}


# boundary


def test_boundary_keeps_the_record_from_the_last_boundary_on() -> None:
    record = rounds(3)
    out = compact.compact(record, policy(compact="boundary"), boundaries=[2, 4])
    assert out.seqs == (4, 5, 6) and out.messages == tuple(record[4:]) and out.dropped == 4
    none = compact.compact(record, policy(compact="boundary"))
    assert none.messages == tuple(record) and none.note


def test_boundary_seqs_read_conversation_metadata() -> None:
    meta = {compact.BOUNDARIES_KEY: [{"seq": 3, "trigger": "auto"}, {"seq": "x"}, 7, True]}
    assert compact.boundary_seqs(meta) == [3, 7]
    assert compact.boundary_seqs({}) == [] and compact.boundary_seqs(None) == []


# Every policy on any record: the payload after it still validates.

policies = st.sampled_from(
    [
        {"compact": "microcompact", "keep": "1"},
        {"compact": "clear_tool_uses", "trigger": "0", "keep": "0", "clear_tool_inputs": "true"},
        {"compact": "clear_thinking", "keep": "0"},
        {"compact": "boundary"},
    ]
)


@given(s.records, policies, st.booleans(), st.sampled_from(replay.SHAPES))
def test_compacted_payload_validates_against_the_sdk_types(record, query, vision, shape) -> None:
    out = compact.compact(
        record, policy(**query), boundaries=[len(record) // 2], vision=vision, shape=shape
    )
    assert len(out.messages) == len(out.seqs)
    payload = replay.project(out.messages, vision=vision, shape=shape)
    if any(m.role != "system" for m in out.messages) or shape == "openai":
        validate_payload(payload, shape)
    # Only the blocks it says it changed differ.
    kept = dict(zip(range(len(record)), record, strict=True))
    for seq, message in zip(out.seqs, out.messages, strict=True):
        for j, block in enumerate(message.blocks):
            assert (block == kept[seq].blocks[j]) == ((seq, j) not in out.changed)
