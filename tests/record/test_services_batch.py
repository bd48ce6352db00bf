"""services.messages_append: many messages in one transaction, bulk inserts, one event."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from django.db import IntegrityError, connection
from django.test.utils import CaptureQueriesContext

from conversations.record.errors import IngestError
from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.schemas import ImageIn, MessageIn
from conversations.record.services import inserts
from conversations.record.services.appending import message_append, messages_append
from conversations.record.services.conversations import conversation_create
from tests.builders import png, text, tool_result, tool_use
from tests.record.test_services import listen, state, stored_names

pytestmark = pytest.mark.django_db


def message(role: str = "user", *blocks: dict[str, Any], **metadata: Any) -> MessageIn:
    return MessageIn.model_validate({"role": role, "blocks": list(blocks), "metadata": metadata})


@pytest.fixture
def conversation() -> Conversation:
    return conversation_create(title="Batch")


def test_a_batch_gets_dense_seqs_after_what_is_stored(conversation):
    message_append(conversation=conversation, role="system", blocks=[])
    stored = messages_append(
        conversation=conversation,
        messages=[message("user", text("a"), text("b")), message("assistant"), message()],
    )
    assert [m.seq for m, _ in stored] == [1, 2, 3]
    assert [[b.seq for b in rows] for _, rows in stored] == [[0, 1], [], []]
    rows = Message.objects.filter(conversation=conversation).order_by("seq")
    assert list(rows.values_list("seq", "role", "block_count")) == [
        (0, "system", 0),
        (1, "user", 2),
        (2, "assistant", 0),
        (3, "user", 0),
    ]
    conversation.refresh_from_db()
    assert conversation.message_count == 4
    following, _ = message_append(conversation=conversation, role="user", blocks=[])
    assert following.seq == 4


def test_metadata_and_origin_are_stored(conversation):
    block = text("x") | {"origin": {"type": "document", "title": "spec.pdf"}}
    messages_append(
        conversation=conversation, messages=[message("user", block, model="m-1", usage={"in": 3})]
    )
    stored = Message.objects.get(conversation=conversation)
    assert stored.metadata == {"model": "m-1", "usage": {"in": 3}}
    assert Block.objects.get(message=stored).origin == {"type": "document", "title": "spec.pdf"}


def test_names_resolve_across_the_batch_and_earlier_messages(conversation):
    message_append(
        conversation=conversation,
        role="assistant",
        blocks=[
            services_block(tool_use("c1", "stored_tool")),
            services_block(tool_use("c2", "old_name")),
        ],
    )
    messages_append(
        conversation=conversation,
        messages=[
            message("user", tool_result("c1"), tool_result("c2")),
            message("assistant", tool_use("c2", "new_name"), tool_result("c3")),
            message("user", tool_result("c2"), tool_result("c3"), tool_result("c9")),
            message("assistant", tool_use("c3", "late")),
        ],
    )
    assert stored_names(conversation)[1:] == [
        ["stored_tool", "old_name"],
        ["new_name", "unknown"],  # a call later in the batch is not used
        ["new_name", "unknown", "unknown"],
        ["late"],
    ]


def test_a_batch_names_as_the_same_messages_one_at_a_time_would(conversation):
    other = conversation_create(title="One by one")
    history = [
        message("assistant", tool_use("a", "one"), tool_result("a"), tool_use("a", "two")),
        message("user", tool_result("a"), tool_result("b")),
        message("assistant", tool_use("b", "three"), tool_result("b", name="explicit")),
        message("user", tool_result("b"), tool_result("a")),
    ]
    messages_append(conversation=conversation, messages=history)
    for item in history:
        message_append(conversation=other, role=item.role, blocks=item.blocks)
    assert stored_names(conversation) == stored_names(other)


def test_many_messages_take_a_bounded_number_of_queries(conversation):
    message_append(conversation=conversation, role="user", blocks=[])

    def queries(count: int) -> int:
        batch = [message("user", text(f"m{i}"), tool_result(f"x{i}")) for i in range(count)]
        with CaptureQueriesContext(connection) as captured:
            messages_append(conversation=conversation, messages=batch)
        return len(captured)

    if connection.vendor == "postgresql":
        # Each table's rows in one COPY (not a query the capture sees), the messages' and
        # blocks' ids read from their sequences first: the same statements for any batch.
        assert queries(3) == 8
        assert queries(2000) == 8
        return
    # The conversation's row locked, counted and read in one UPDATE … RETURNING; with the
    # search entries, one insert; one read of the previous message's running token totals
    # (docs/contract.md §7: each batch's counts continue them); the finder marks, one
    # statement (results unmark).
    assert queries(3) == 9
    # 2,000 messages of 2 blocks: inserts of at most 1,000 rows each (the statements'
    # size is bounded too): 2 of messages, 4 of blocks, 4 of search entries.
    assert queries(2000) == 9 + 1 + 3 + 3


def test_an_image_outside_a_user_message_names_its_path_and_stores_nothing(conversation):
    before = state()
    with pytest.raises(IngestError) as caught:
        messages_append(
            conversation=conversation,
            messages=[message("user", png()), message("assistant", text("x"), png())],
        )
    assert caught.value.field == "messages[1].blocks[1]"
    assert state() == before


def test_a_database_failure_midway_stores_nothing(conversation):
    message_append(conversation=conversation, role="user", blocks=[])
    bad = ImageIn.model_construct(type="image", media_type="image/bmp", data="Qk0=", origin=None)
    broken = MessageIn.model_construct(role="user", blocks=[bad], metadata={})
    before = state()
    with pytest.raises(IntegrityError):
        messages_append(conversation=conversation, messages=[message(), broken])
    assert state() == before
    assert conversation.message_count == 1


def test_an_empty_batch_is_refused(conversation):
    with pytest.raises(IngestError):
        messages_append(conversation=conversation, messages=[])


def test_a_batch_publishes_one_event_for_its_last_message(
    conversation, django_capture_on_commit_callbacks
):
    def action() -> None:
        with django_capture_on_commit_callbacks(execute=True):
            messages_append(
                conversation=conversation,
                messages=[message("user", text("a")) for _ in range(50)]
                + [message("assistant", text("b"), text("c"))],
            )

    assert listen(conversation.pk, action) == [
        {
            "type": "conversation.message_added",
            "conversation_id": str(conversation.pk),
            "message_seq": 50,
            "block_count": 2,
        }
    ]


def services_block(fields: dict[str, Any]) -> Any:
    from conversations.record.schemas import BLOCK_ADAPTER

    return BLOCK_ADAPTER.validate_python(fields)


@pytest.mark.sqlite(only=True)
def test_rows_over_the_parameter_limit_go_in_several_statements_and_keep_their_ids(
    conversation,
):
    # SQLite's own limit, lowered for this connection: 2 or 3 rows a statement, and a
    # statement over it fails in the library itself.
    limit = sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER
    connection.ensure_connection()
    was = connection.connection.setlimit(limit, 40)
    try:
        assert inserts.param_limit(connection) == 40
        batch = [message("user", text(f"{i}.a"), text(f"{i}.b"), n=i) for i in range(7)]
        stored = messages_append(conversation=conversation, messages=batch)
    finally:
        connection.connection.setlimit(limit, was)
    for i, (row, blocks) in enumerate(stored):
        assert Message.objects.get(pk=row.pk).metadata == {"n": i}
        assert [Block.objects.get(pk=b.pk).text for b in blocks] == [f"{i}.a", f"{i}.b"]
        assert {b.message_id for b in blocks} == {row.pk}


@pytest.mark.sqlite
def test_a_message_of_many_blocks_goes_in_inserts_of_bounded_size(conversation):
    """A statement's size does not grow with the message (docs/contract.md §4 Bounds): the
    driver's cost of one statement grows faster than its rows."""
    bound = 1000  # rows of one INSERT (services/inserts.py ROWS_PER_STATEMENT)
    count = 2 * bound + 5
    blocks = [services_block(text(str(i))) for i in range(count)]
    with CaptureQueriesContext(connection) as queries:
        _, stored = message_append(conversation=conversation, role="user", blocks=blocks)
    head = 'INSERT INTO "conversations_block"'
    inserts = [q["sql"] for q in queries if q["sql"].startswith(head)]
    if connection.vendor == "postgresql":
        assert inserts == []  # one COPY of the rows, streamed: no statement holds them
    else:
        assert len(inserts) >= 3
        assert all(sql.count("), (") < bound for sql in inserts)
    assert [Block.objects.get(pk=b.pk).text for b in stored] == [str(i) for i in range(count)]


def test_a_large_batch_stores_the_token_figures_one_message_at_a_time_would(conversation):
    # A batch of much text is counted in another thread, each distinct text once; the
    # figures stored are those of the same messages appended one by one.
    from conversations.record.services import token_figures

    words = " ".join(f"word{i} line\n" for i in range(4000))
    history = [
        message("user", text(words), text("hello"), png()),
        message("assistant", tool_use("a", "grep", q=words[:5000]), text(words)),
        message("user", tool_result("a", content=words[::-1]), text("hello")),
        message("assistant", text(words), text(" ")),
    ]
    assert 4 * len(words) > token_figures.AT_ONCE_CHARS
    other = conversation_create(title="One by one")
    messages_append(conversation=conversation, messages=history)
    for item in history:
        message_append(conversation=other, role=item.role, blocks=item.blocks)

    def figures(of: Conversation) -> list[Any]:
        messages = Message.objects.filter(conversation=of).order_by("seq")
        blocks = Block.objects.filter(message__conversation=of).order_by("message__seq", "seq")
        return [
            list(messages.values_list("tokens", "cumulative", "counts", "varies", "heaviest")),
            list(blocks.values_list("tokens", flat=True)),
        ]

    assert figures(conversation) == figures(other)
    assert all(figures(conversation)[1])


def test_calls_are_marked_unanswered_unless_a_stored_result_answers_them(conversation, monkeypatch):
    """The finder's marks ask in the statement that inserts them whether a result stored in
    the conversation answers each call; any number of calls, in statements of bounded size."""
    from conversations.record.models.search import FinderMark
    from conversations.record.services import finder_marks

    monkeypatch.setattr(finder_marks, "ROWS_PER_STATEMENT", 2)
    other = conversation_create(title="Other")
    messages_append(conversation=other, messages=[message("user", tool_result("b"))])
    messages_append(
        conversation=conversation,
        messages=[message("user", tool_result("a")), message("user", text("no call yet"))],
    )
    messages_append(
        conversation=conversation,
        messages=[
            message("assistant", tool_use("a"), tool_use("b"), tool_use("c")),
            message("assistant", tool_use("d"), tool_use("a"), tool_use("e")),
            message("user", tool_result("e", is_error=True)),
        ],
    )

    def marks(of: Conversation) -> list[tuple[int, int, str, str]]:
        rows = FinderMark.objects.filter(conversation=of).order_by("message_seq", "block_seq")
        return list(rows.values_list("message_seq", "block_seq", "kind", "call_id"))

    # "a" was answered before it was called; "b" only in another conversation; "e" later
    # in the same batch.
    assert marks(conversation) == [
        (2, 1, "unanswered", "b"),
        (2, 2, "unanswered", "c"),
        (3, 0, "unanswered", "d"),
        (4, 0, "error", "e"),
    ]
    assert marks(other) == []
