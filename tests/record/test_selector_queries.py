"""The hot reads touch messages and blocks only (docs/architecture.md, `record/`): no
join to conversations, which an inherited `Meta.ordering` would add to every unordered query to sort
by `updated_at`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations.record.models.conversation import Conversation
from conversations.record.reads import selectors, shapes
from conversations.record.services.appending import messages_append
from conversations.record.services.conversations import conversation_create
from tests.builders import png, text
from tests.record.test_services_batch import message

pytestmark = pytest.mark.django_db


@pytest.fixture
def conversation() -> Conversation:
    conversation = conversation_create(title="Hot")
    messages_append(
        conversation=conversation,
        messages=[message("user", text("a"), png()), message("assistant", text("b"))],
    )
    return Conversation.objects.get(pk=conversation.pk)


HOT: dict[str, Callable[[Conversation], Any]] = {
    "block_counts": lambda c: selectors.block_counts(c),
    "block_counts from a seq": lambda c: selectors.block_counts(c, start=1),
    "message_rows": lambda c: selectors.message_rows(c),
    "message_rows window": lambda c: selectors.message_rows(c, start=1, stop=2),
    "message_get": lambda c: selectors.message_get(c, 1),
    "image_block": lambda c: selectors.image_block(c, 0, 1),
    "replay_json": lambda c: selectors.replay_json(c, vision=True, shape="openai"),
    "record_data": lambda c: shapes.record_data(c, url="/"),
}


@pytest.mark.parametrize("name", HOT)
def test_a_hot_read_never_joins_conversations(conversation, name):
    with CaptureQueriesContext(connection) as captured:
        HOT[name](conversation)
    assert captured.captured_queries
    for query in captured.captured_queries:
        sql = query["sql"]
        assert '"conversations_conversation"' not in sql, sql
        assert "updated_at" not in sql, sql


def test_block_counts_are_in_seq_order(conversation):
    messages_append(conversation=conversation, messages=[message() for _ in range(30)])
    assert list(selectors.block_counts(conversation)) == list(range(32))
    assert list(selectors.block_counts(conversation, start=20)) == list(range(20, 32))


def test_the_block_total_is_read_from_the_row_without_a_query(conversation):
    with CaptureQueriesContext(connection) as captured:
        assert selectors.block_total(conversation) == 3
    assert not captured.captured_queries


def test_a_live_frame_reads_no_notes_and_no_turns_a_conversation_does_not_hold(conversation):
    """A frame is rendered once per view on every change: its messages and their blocks,
    the conversation's row (which says whether any note is on it), and the pressure's
    running total, latest measured message and heaviest blocks; no notes, turns or figures
    read again when there are none."""
    from conversations.live import fragments

    with CaptureQueriesContext(connection) as captured:
        html = fragments.messages_frame(str(conversation.id), [0, 1], True, "openai").html
    assert html.count("<article ") == 2
    assert len(captured.captured_queries) == 7, [q["sql"] for q in captured.captured_queries]
