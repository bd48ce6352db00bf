"""Reads compiled once (conversations/record/reads/compiled.py): the same rows as the ORM's own
query, on SQLite and PostgreSQL alike, for every shape; built once per shape; and a build
function whose SQL cannot be reused is run as built."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db.models import QuerySet

from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.reads import compiled, selectors
from tests.builders import png, stored, text, tool_result, tool_use

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]


def orm_previews(conversation: Conversation, seqs: Any, blocks_from: int = 0) -> list[Any]:
    """preview_rows as the ORM reads it, query by query: the reference."""
    messages = Message.objects.filter(conversation=conversation)
    if isinstance(seqs, range):
        messages = messages.filter(seq__gte=seqs.start, seq__lt=seqs.stop)
    else:
        messages = messages.filter(seq__in=list(seqs))
    found = list(messages.order_by("seq").values_list(*selectors.MESSAGE_PREVIEW))
    ids = [row[0] for row in found]
    blocks = list(selectors._block_previews.build(ids, blocks_from, blocks_from + 100))
    return [found, blocks]


@pytest.fixture
def conversation() -> Conversation:
    """Every kind of block, JSON metadata, an error result, unicode, a long text."""
    found: Conversation = stored(
        "compiled",
        ("user", [text("Look at this: é ✓ " + "x" * 5_000), png()], {"source_id": "u1"}),
        ("assistant", [text("Checking."), tool_use("c1", "lookup", q="é")], {"model": "m"}),
        ("user", [tool_result("c1", "boom", is_error=True)], {}),
        ("assistant", [{"type": "reasoning", "text": "hm"}, text("Done.")], {"n": [1, 2]}),
    )
    return found


@pytest.mark.parametrize("seqs", [range(0, 4), range(1, 3), range(5, 9), [3], [0, 2], [3, 1], []])
def test_preview_rows_are_what_the_orm_reads(conversation: Conversation, seqs: Any) -> None:
    rows = selectors.preview_rows(conversation, seqs)
    messages, blocks = orm_previews(conversation, seqs)
    assert [(r.id, r.seq, r.role, r.created_at, r.metadata, r.block_count, r.counts)
            for r in rows] == messages  # fmt: skip
    assert [tuple(b) for r in rows for b in r.blocks] == blocks
    for block in (b for r in rows for b in r.blocks):  # converted as the ORM converts
        assert isinstance(block.is_error, bool)
    assert all(r.created_at.tzinfo is not None for r in rows)


def test_preview_rows_of_an_unknown_conversation_are_none(conversation: Conversation) -> None:
    assert selectors.preview_rows(uuid.uuid4(), range(0, 4)) == []
    assert selectors.preview_rows(uuid.uuid4(), [0, 1]) == []


def test_a_conversation_and_whether_it_holds_notes(conversation: Conversation) -> None:
    from conversations.record.notes.services import note_add

    found = selectors.conversation_noted(conversation.pk)
    assert found is not None
    row, noted = found
    assert (row.pk, row.title, row.message_count, row.metadata) == (
        conversation.pk, conversation.title, conversation.message_count, conversation.metadata
    )  # fmt: skip
    assert row.updated_at == conversation.updated_at and noted is False
    note_add(conversation=conversation, message_seq=1, text="why?", token_label="ci")
    assert selectors.conversation_noted(str(conversation.pk)) == (row, True)
    assert selectors.conversation_noted(uuid.uuid4()) is None
    assert selectors.conversation_noted("not a uuid") is None


def test_each_shape_is_built_once(conversation: Conversation) -> None:
    builds: list[tuple[Any, ...]] = []

    @compiled.read(Message, uuid.UUID, list)
    def seqs_of(pk: uuid.UUID, seqs: list[int]) -> QuerySet[Message, Any]:
        builds.append((pk, seqs))
        return Message.objects.filter(conversation_id=pk, seq__in=seqs).values_list("seq")

    assert seqs_of.values(conversation.pk, [0, 1]) == [(0,), (1,)]
    assert seqs_of.values(conversation.pk, [2, 3]) == [(2,), (3,)]
    assert seqs_of.values(conversation.pk, [3, 2]) == [(2,), (3,)]
    assert len(builds) == 1  # one shape: two seqs
    assert seqs_of.values(conversation.pk, [1]) == [(1,)]
    assert len(builds) == 2  # another shape


def test_a_value_computed_from_an_argument_is_never_frozen_into_the_sql(
    conversation: Conversation,
) -> None:
    builds = 0

    @compiled.read(Block, int)
    def from_(start: int) -> QuerySet[Block, Any]:
        nonlocal builds
        builds += 1
        return Block.objects.filter(seq__gte=start, seq__lt=start + 1).values_list("seq")

    assert sorted(from_.values(0)) == [(0,)] * 4
    assert sorted(from_.values(1)) == [(1,)] * 3  # not the first call's bound
    assert builds == 4  # refused, so built (and compiled) on every call


@pytest.mark.django_db(transaction=True)
def test_threads_share_one_statement_and_none_of_their_connections_is_kept() -> None:
    """Under ASGI every request thread has a connection of its own: a read compiled in one
    runs in the others (their rows converted for their own connection), and the read keeps
    no connection of theirs alive."""
    import gc
    import threading
    import weakref

    from django.db import connection as main_connection
    from django.db import connections

    conversation = stored("threads", ("user", [text("hello")], {"k": "v"}))
    builds = 0

    @compiled.read(Message, uuid.UUID)
    def first(pk: uuid.UUID) -> QuerySet[Message, Any]:
        nonlocal builds
        builds += 1
        return Message.objects.filter(conversation_id=pk).values_list("seq", "metadata")

    assert first.values(conversation.pk) == [(0, {"k": "v"})]
    seen: list[Any] = []
    theirs: list[weakref.ref[Any]] = []

    def in_thread() -> None:
        seen.append(first.values(conversation.pk))
        theirs.append(weakref.ref(connections["default"]))
        assert connections["default"] is not main_connection
        connections.close_all()

    for _ in range(4):
        worker = threading.Thread(target=in_thread)
        worker.start()
        worker.join()
    assert seen == [[(0, {"k": "v"})]] * 4
    assert builds == 1 and len(first.statements) == 1
    gc.collect()
    assert all(ref() is None for ref in theirs)  # no thread's connection is kept
