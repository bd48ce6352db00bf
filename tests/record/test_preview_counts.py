"""Compaction previews counted from the stored figures (docs/contract.md §7): for any record,
policy, toggles and `upto`, the preview read without texts equals the whole record
compacted by the pure policy and counted afresh, and a page's window of it is exactly the
compacted record's messages."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conversations.core import replay
from conversations.core.counting import compact, stored_counts, tokens
from conversations.core.counting import next_request as nr
from conversations.core.counting.compact import Policy
from conversations.core.options import ReplayOptions
from conversations.record.counting import policy_reads, preview_counts, token_counts
from conversations.record.reads import selectors
from conversations.record.reads.rows import stored_messages
from tests.builders import png, stored, text, tool_result, tool_use

ids = st.sampled_from(["a", "b", "c", "d"])
names = st.sampled_from(["grep", "read"])
contents = st.sampled_from(
    ["", " ", "ok", "found it " * 30, compact.CLEARED_RESULT, compact.CLEARED_TOOL_RESULT]
)
prose = st.sampled_from(["", "  ", "hello", "a longer thought " * 20])


@st.composite
def blocks_of(draw: st.DrawFn, role: str) -> list[dict[str, Any]]:
    if role == "system":
        kinds = st.sampled_from(["text"])
    elif role == "assistant":
        kinds = st.sampled_from(["text", "reasoning", "tool_use", "tool_use"])
    else:
        kinds = st.sampled_from(["text", "tool_result", "tool_result", "image"])
    out = []
    for kind in draw(st.lists(kinds, max_size=4)):
        match kind:
            case "text":
                out.append(text(draw(prose)))
            case "reasoning":
                value = draw(prose | st.just(compact.CLEARED_REASONING))
                out.append({"type": "reasoning", "text": value})
            case "tool_use":
                query = draw(st.sampled_from(["", "x" * 80]))
                out.append(tool_use(draw(ids), draw(names), q=query))
            case "tool_result":
                out.append(tool_result(draw(ids), draw(contents), is_error=draw(st.booleans())))
            case _:
                out.append(png())
    return out


@st.composite
def records(draw: st.DrawFn) -> list[tuple[str, list[dict[str, Any]], dict[str, Any]]]:
    roles = draw(st.lists(st.sampled_from(["system", "user", "assistant"]), min_size=1,
                          max_size=8))  # fmt: skip
    return [(role, draw(blocks_of(role)), {}) for role in roles]


policies = st.one_of(
    st.builds(Policy, st.just("microcompact"), keep=st.integers(0, 4)),
    st.builds(Policy, st.just("clear_thinking"), keep=st.integers(0, 2)),
    st.just(Policy("boundary", keep=0)),
    st.builds(
        Policy,
        st.just("clear_tool_uses"),
        keep=st.integers(0, 3),
        trigger=st.sampled_from([0, 60, 10**6]),
        clear_at_least=st.sampled_from([0, 5, 400, 10**6]),
        exclude_tools=st.sampled_from([frozenset(), frozenset({"grep"})]),
        clear_tool_inputs=st.sampled_from([False, True, frozenset({"read"})]),
    ),
)


def whole(
    conversation: Any, options: ReplayOptions, policy: Policy, upto: int | None
) -> tuple[compact.Compacted, list[tuple[int, tokens.MessageCount]], tokens.PayloadCount]:
    """The record read whole, compacted by the pure policy and counted afresh (what the
    preview computed before it read stored figures)."""
    rows = selectors.message_rows(conversation)
    messages = stored_messages(rows)
    seqs = [r.seq for r in rows]
    cut = messages if upto is None else messages[: upto + 1]
    before = tokens.payload_count(cut, vision=options.vision, shape=options.shape)
    compacted = compact.compact(
        messages, policy, seqs=seqs, boundaries=compact.boundary_seqs(conversation.metadata),
        vision=options.vision, shape=options.shape, input_tokens=before.total,
    )  # fmt: skip
    counted = [
        (seq, tokens.message_count(m, vision=options.vision, shape=options.shape))
        for seq, m in zip(compacted.seqs, compacted.messages, strict=True)
        if upto is None or seq <= upto
    ]
    return compacted, counted, tokens.total_of([c for _, c in counted], options.shape)


def check(conversation: Any, options: ReplayOptions, policy: Policy, upto: int | None) -> None:
    token_counts.pressure_cache.clear()
    policy_reads.results_cache.clear()
    preview_counts.preview_cache.clear()
    query = {} if upto is None else {"upto": str(upto)}
    found = preview_counts.preview(conversation, options, policy, query=query)
    compacted, counted, payload = whole(conversation, options, policy, upto)
    after = found.after
    assert found.compacted.changed == compacted.changed
    assert found.compacted.dropped == compacted.dropped
    assert found.compacted.note == compacted.note
    assert after.total == payload.total
    assert after.payload.by_kind() == payload.by_kind()
    data = preview_counts.context_data(conversation, after, found)
    assert [(m["seq"], m["tokens"], m["by_kind"], m["framing"]) for m in data["messages"]] == [
        (seq, c.tokens, c.by_kind, c.framing) for seq, c in counted
    ]
    assert data["upto"] == (counted[-1][0] if counted else None)
    running, trigger_seq = payload.overhead, None
    for seq, c in counted:
        running += c.tokens
        if trigger_seq is None and running >= after.trigger:
            trigger_seq = seq
    assert after.trigger_seq == trigger_seq
    boundary = found.before.headline.boundary
    request = [(seq, c) for seq, c in counted if boundary is None or seq >= boundary]
    unrecorded = found.before.headline.unrecorded.tokens or 0
    assert after.headline.next.tokens == (
        payload.overhead + sum(c.tokens for _, c in request) + unrecorded
    )
    assert after.headline.next.basis == "estimated"
    heavy = [b for seq, c in request for b in nr.heavy_blocks(seq, c)]
    assert list(after.headline.largest) == nr.largest(heavy)
    # The diff's count of the messages a policy changes, from each message on.
    result = preview_counts.policy_result(conversation, options, policy, found.before.total)
    for start in range(conversation.message_count + 1):
        expected = {seq for seq, _ in compacted.changed if seq >= start}
        assert result.count_from(start) == len(expected), start
        assert result.changed_from(start) == expected, start
    # A page's window: the stored messages rewritten one by one are the compacted record.
    rewrite = found.rewrite
    assert rewrite is not None
    rows = {r.seq: r for r in selectors.message_rows(conversation)}
    for seq, message in zip(compacted.seqs, compacted.messages, strict=True):
        stored_message = stored_messages([rows[seq]])[0]
        assert rewrite(seq, stored_message, 0) == message, seq
        tail = replay.StoredMessage(stored_message.role, stored_message.blocks[1:])
        assert rewrite(seq, tail, 1).blocks == message.blocks[1:], seq


@pytest.mark.sqlite
@pytest.mark.django_db
@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    records(),
    policies,
    st.sampled_from(stored_counts.TOGGLES),
    st.lists(st.integers(0, 8), max_size=2),
    st.integers(-1, 8),
)
def test_a_preview_from_stored_figures_equals_the_whole_record_compacted_and_counted(
    record, policy, toggles, boundaries, upto
) -> None:
    conversation = stored("preview", *record)
    if boundaries:
        conversation.metadata = {"compact_boundaries": [{"seq": b} for b in sorted(boundaries)]}
        conversation.save(update_fields=["metadata"])
    count = conversation.message_count
    check(conversation, ReplayOptions(*toggles), policy, upto if 0 <= upto < count else None)


@pytest.mark.django_db
def test_a_preview_reads_no_block_text_and_counts_only_the_changed_blocks(blocks_counted) -> None:
    calls = [("assistant", [tool_use(f"c{i}", "grep", q="x")], {}) for i in range(6)]
    results = [("user", [tool_result(f"c{i}", "found " * 200)], {}) for i in range(6)]
    conversation = stored("reads", *[m for pair in zip(calls, results, strict=True) for m in pair])
    token_counts.pressure_cache.clear()
    policy_reads.results_cache.clear()
    preview_counts.preview_cache.clear()
    before = blocks_counted.n
    with CaptureQueriesContext(connection) as queries:
        found = preview_counts.preview(conversation, ReplayOptions(), Policy("microcompact"))
    assert len(found.compacted.changed) == 3
    # One marker, counted once however many blocks it replaces.
    assert blocks_counted.n == before + 1
    for q in queries.captured_queries:
        sql = q["sql"].split(" FROM ", 1)[0]  # what is read (a marker compared is not)
        assert '"conversations_block"."text"' not in sql or "SUBSTR" in sql.upper(), sql
    assert found.after.total < found.before.total
