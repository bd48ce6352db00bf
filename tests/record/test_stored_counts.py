"""Stored token counts (docs/contract.md §7): each block counted once when it is stored, each
message's figures kept, and every count read back from them equal to counting the record
afresh, for every toggle pair, as of any message, after any append."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conversations.core import replay
from conversations.core.blocks import kind_of
from conversations.core.counting import compact, stored_counts, tokens
from conversations.core.counting import next_request as nr
from conversations.core.options import ReplayOptions
from conversations.record.counting import preview_counts, token_counts
from conversations.record.models.conversation import Message
from conversations.record.reads import selectors
from conversations.record.reads.rows import stored_messages
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.services.appending import block_append, messages_append
from conversations.record.services.conversations import conversation_create
from tests import replay_strategies as s
from tests.builders import png, stored, text, tool_result, tool_use

TOGGLES = [ReplayOptions(v, sh) for v, sh in stored_counts.TOGGLES]


def facts_of(message: replay.StoredMessage) -> list[stored_counts.StoredFacts]:
    out = []
    for b in message.blocks:
        own = tokens.block_tokens(b, vision=True, shape="openai")
        media, width, height = "", None, None
        if isinstance(b, replay.ImageBlock):
            media, width, height = b.media_type, b.width, b.height
        out.append(
            stored_counts.StoredFacts(kind_of(b), own, tokens.blank(b), media, width, height)
        )
    return out


@settings(max_examples=150, deadline=None)
@given(s.stored_messages(), st.sampled_from(stored_counts.TOGGLES))
def test_a_message_counts_from_its_stored_figures_as_counted_afresh(message, toggles) -> None:
    vision, shape = toggles
    fresh = tokens.message_count(message, vision=vision, shape=shape)
    facts = facts_of(message)
    exact = stored_counts.exact_count(message.role, facts, vision=vision, shape=shape)
    assert exact == fresh
    read = stored_counts.count(
        message.role, stored_counts.figures(message.role, facts), vision=vision, shape=shape
    )
    assert (read.tokens, read.framing, read.by_kind) == (fresh.tokens, fresh.framing, fresh.by_kind)
    assert stored_counts.heaviest(message.role, facts) == max(
        tokens.message_count(message, vision=True, shape="openai").sent, default=0
    )


def record() -> Any:
    usage = {"model": "claude-sonnet-4-5", "usage": {"input_tokens": 1200, "output_tokens": 40}}
    return stored(
        "stored counts",
        ("system", [text("You are careful."), text("Answer briefly.")], {}),
        ("user", [text("  "), png(), text("what is this?"), png()], {}),
        (
            "assistant",
            [{"type": "reasoning", "text": "looking"}, tool_use("c1", "grep", q="x")],
            {**usage, "id": "r1"},
        ),
        ("user", [tool_result("c1", "found it " * 50)], {}),
        ("assistant", [text("It is a red square.")], {**usage, "id": "r2"}),
        ("user", [text(" \n ")], {}),
        ("user", [], {}),
    )


def fresh(conversation: Any, options: ReplayOptions, upto: int | None = None) -> Any:
    rows = selectors.message_rows(conversation)
    if upto is not None:
        rows = rows[: upto + 1]
    messages = stored_messages(rows)
    return messages, tokens.payload_count(messages, vision=options.vision, shape=options.shape)


def check(conversation: Any) -> None:
    """Every figure read back equals the record counted afresh, for every toggle pair."""
    conversation.refresh_from_db()
    token_counts.pressure_cache.clear()
    for options in TOGGLES:
        for upto in (None, *range(conversation.message_count)):
            query = {} if upto is None else {"upto": str(upto)}
            p = token_counts.pressure(conversation, options, query=query)
            messages, counted = fresh(conversation, options, upto)
            assert p.total == counted.total, (options, upto)
            assert p.payload.by_kind() == counted.by_kind(), (options, upto)
            assert p.message_total == len(messages)
        p = token_counts.pressure(conversation, options)
        rows = selectors.preview_rows(conversation, range(conversation.message_count))
        shown = token_counts.counted_shown(conversation, p, rows)
        _, counted = fresh(conversation, options)
        assert [shown[r.seq].count.tokens for r in rows] == [m.tokens for m in counted.messages]
        data = preview_counts.context_data(conversation, p)
        running = counted.overhead
        for item, m in zip(data["messages"], counted.messages, strict=True):
            running += m.tokens
            assert (item["tokens"], item["cumulative"]) == (m.tokens, running)
        # The ten heaviest blocks, as counted afresh.
        every = [b for seq, m in enumerate(counted.messages) for b in nr.heavy_blocks(seq, m)]
        heaviest = sorted(every, key=lambda b: (-b.tokens, b.seq, b.block))[: nr.LARGEST]
        assert list(p.headline.largest) == heaviest, options


@pytest.mark.sqlite
@pytest.mark.django_db
def test_every_figure_read_back_equals_a_fresh_count_for_every_toggle_pair() -> None:
    check(record())


@pytest.mark.sqlite
@pytest.mark.django_db
def test_a_block_appended_anywhere_moves_the_figures_of_its_message_and_all_later(
    blocks_counted,
) -> None:
    conversation = record()
    messages = {m.seq: m for m in Message.objects.filter(conversation=conversation)}
    before = blocks_counted.n
    for seq, block in (
        (6, text("   ")),  # an empty message gets a blank block: still "[Empty message]"
        (6, text("now it says something")),  # … and now its blank block crosses too
        (1, png()),  # an image into a message with images, before the last
        (3, tool_result("c9", "late result")),  # into a message before the last
        (5, text("more")),  # a blank message is blank no more
        (0, text("   ")),  # the system message
    ):
        block_append(message=messages[seq], block=BLOCK_ADAPTER.validate_python(block))
        check(conversation)
    assert blocks_counted.n == before + 6  # each block counted once


@pytest.mark.django_db
def test_the_trigger_is_reached_where_a_fresh_running_total_reaches_it() -> None:
    conversation = record()
    for options in TOGGLES:
        messages, counted = fresh(conversation, options)
        running = counted.overhead
        totals = []
        for m in counted.messages:
            running += m.tokens
            totals.append(running)
        for trigger in (1, totals[2], totals[2] + 1, totals[-1], totals[-1] + 1):
            policy = compact.Policy("clear_tool_uses", trigger=trigger)
            token_counts.pressure_cache.clear()
            p = token_counts.pressure(conversation, options, policy=policy)
            expected = next((i for i, t in enumerate(totals) if t >= trigger), None)
            assert p.trigger_seq == expected, (options, trigger)


@pytest.mark.django_db
def test_a_page_read_counts_nothing_and_reads_no_block_text(
    operator_client, blocks_counted
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    conversation = record()
    token_counts.pressure_cache.clear()
    before = blocks_counted.n
    for path in ("", "context", "context?upto=3", "diff?b_compact=microcompact"):
        with CaptureQueriesContext(connection) as queries:
            response = operator_client.get(f"/c/{conversation.pk}/{path}")
        assert response.status_code == 200, path
        for q in queries.captured_queries:
            # What is read (the select list; a marker compared in WHERE is not read).
            sql = q["sql"].split(" FROM ", 1)[0]
            if '"conversations_block"."text"' in sql:
                assert "SUBSTR" in sql.upper(), (path, sql)  # cut in SQL, never whole
    assert blocks_counted.n == before


@pytest.mark.sqlite
@pytest.mark.django_db
def test_the_turns_summed_in_sql_equal_the_turns_read_one_by_one(monkeypatch) -> None:
    def said(n: int, response: str) -> dict[str, Any]:
        return {"id": response, "usage": {"input_tokens": n, "output_tokens": 9}}

    turns: list[tuple[str, list[dict[str, Any]], dict[str, Any]]] = [
        ("user", [text("start " * 40)], {})
    ]
    inputs = [3000, 3400, 3300, 5200, 5900, 5900, 9000, 8000, 12000]
    for i, n in enumerate(inputs):
        response = f"r{i // 2}"  # responses stored in two pieces, a result between them
        turns.append(
            ("assistant", [tool_use(f"c{i}", "grep", q="x" * (i * 40))], said(n, response))
        )
        turns.append(("user", [tool_result(f"c{i}", "found " * (i * 30))], {}))
    conversation = stored("turns", *turns)
    for latest in (nr.CALIBRATION_MESSAGES, 3):  # … and on only the latest measured ones
        monkeypatch.setattr(nr, "CALIBRATION_MESSAGES", latest)
        for start in (0, 5, 9):
            for last in (4, 11, conversation.message_count - 1):
                reader = token_counts.Stored(conversation, ReplayOptions(), last)
                rows = reader.measured_rows(start, last, latest=True)
                sums = nr.calibration(nr.turns_of(rows))
                assert reader.calibration(start) == sums, (latest, start, last)
                every = reader.measured_rows(start, last)
                basis = nr.turns_of(every)[-1] if every else None
                assert reader.basis(start) == basis, (start, last)


def measured_batch(turns: int, offset: int = 0) -> list[Any]:
    from conversations.record.schemas import MessageIn

    usage = {"input_tokens": 900, "output_tokens": 10}
    return [
        MessageIn.model_validate(
            {
                "role": "assistant",
                "blocks": [text(f"turn {n}")],
                "metadata": {"id": f"msg_{offset + n}", "usage": usage},
            }
        )
        for n in range(turns)
    ]


@pytest.mark.django_db
def test_a_batch_reads_the_turn_before_it_once_however_many_responses_it_holds() -> None:
    """A 10,000-message import asked the database once per response id it held (2,356
    queries, a third of its time): what it asked is the same for every message of a batch."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    conversation = conversation_create(title="turns")
    messages_append(conversation=conversation, messages=measured_batch(1))
    counts = []
    for turns, offset in ((2, 100), (40, 200)):
        with CaptureQueriesContext(connection) as captured:
            messages_append(conversation=conversation, messages=measured_batch(turns, offset))
        counts.append(len(captured.captured_queries))
    assert counts[0] == counts[1], counts
    starts = list(Message.objects.order_by("seq").values_list("seq", "turn_start", "measured"))
    assert starts == [(seq, seq, 900) for seq in range(43)]  # each its own response
