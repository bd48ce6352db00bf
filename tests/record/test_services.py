"""The one write path (docs/contract.md §1 ingest rules): dense seqs, whole-or-nothing appends, tool
name resolution, and events published only after commit."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.db import IntegrityError, transaction
from django.utils import timezone

from conversations.record import events
from conversations.record.errors import IngestError
from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.schemas import BLOCK_ADAPTER, ImageIn
from conversations.record.services.appending import (
    UNKNOWN_TOOL,
    block_append,
    message_append,
    messages_append,
)
from conversations.record.services.conversations import conversation_create

pytestmark = pytest.mark.django_db

PNG_1x1 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAE"
    "hQGAhKmMIQAAAABJRU5ErkJggg=="
)


def block(**fields: Any) -> Any:
    return BLOCK_ADAPTER.validate_python(fields)


def text(value: str = "hi") -> Any:
    return block(type="text", text=value)


def use(call_id: str, name: str) -> Any:
    return block(type="tool_use", id=call_id, name=name, input={})


def result(call_id: str, name: str | None = None) -> Any:
    fields: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": "ok"}
    if name is not None:
        fields["name"] = name
    return block(**fields)


def state() -> tuple[Any, ...]:
    return (
        list(Conversation.objects.order_by("id").values_list("id", "message_count", "updated_at")),
        list(Message.objects.order_by("id").values_list("id", "seq", "role", "block_count")),
        list(Block.objects.order_by("id").values_list()),
    )


def stored_names(conversation: Conversation) -> list[list[str]]:
    return [
        list(m.blocks.order_by("seq").values_list("name", flat=True))
        for m in conversation.messages.order_by("seq")
    ]


@pytest.fixture
def conversation() -> Conversation:
    return conversation_create(title="Services")


# --- conversation_create and message_append ------------------------------------------


def test_conversation_create_stores_title_and_metadata():
    created = conversation_create(title="t", metadata={"a": [1]})
    stored = Conversation.objects.get(pk=created.pk)
    assert (stored.title, stored.metadata, stored.message_count) == ("t", {"a": [1]}, 0)
    assert conversation_create(title="bare").metadata == {}


def test_message_append_gives_dense_seqs_and_counts_blocks(conversation):
    appended = [
        message_append(conversation=conversation, role=role, blocks=blocks)
        for role, blocks in [("system", [text()]), ("user", []), ("assistant", [text(), text()])]
    ]
    assert [m.seq for m, _ in appended] == [0, 1, 2]
    assert [m.block_count for m, _ in appended] == [1, 0, 2]
    assert [b.seq for b in appended[2][1]] == [0, 1]
    assert conversation.message_count == 3
    assert Conversation.objects.get(pk=conversation.pk).message_count == 3


def test_message_append_works_from_a_stale_conversation_object(conversation):
    stale = Conversation.objects.get(pk=conversation.pk)
    message_append(conversation=conversation, role="user", blocks=[])
    message, _ = message_append(conversation=stale, role="user", blocks=[])
    assert message.seq == 1


def test_message_append_moves_the_conversation_to_the_top(conversation):
    other = conversation_create(title="newer")
    assert list(Conversation.objects.order_by("-updated_at"))[0] == other
    message_append(conversation=conversation, role="user", blocks=[])
    assert list(Conversation.objects.order_by("-updated_at"))[0] == conversation


def test_an_append_counts_itself_into_the_conversations_row(conversation):
    """One UPDATE … RETURNING locks, counts and reads the row: the row and the caller's
    object say the same; a conversation that is gone stores nothing."""
    calls = [use("a", "grep"), use("b", "ls")]
    message_append(
        conversation=conversation, role="assistant", blocks=calls, metadata={"model": "m-1"}
    )
    failed = block(type="tool_result", tool_use_id="a", content="no", is_error=True)
    message, _ = message_append(
        conversation=conversation, role="user", blocks=[failed, result("b"), text()]
    )
    assert message.seq == 1
    row = Conversation.objects.get(pk=conversation.pk)
    expected = (2, 5, 1, 0, "m-1")  # messages, blocks, errors, open calls, model
    for held in (row, conversation):
        assert (
            held.message_count,
            held.block_count,
            held.error_count,
            held.unanswered_calls,
            held.model,
        ) == expected
    message_append(conversation=conversation, role="assistant", blocks=[use("c", "x")])
    row.refresh_from_db()
    assert (row.message_count, row.unanswered_calls, row.model) == (3, 1, "m-1")
    before = state()
    with pytest.raises(Conversation.DoesNotExist):
        message_append(conversation=Conversation(), role="user", blocks=[text()])
    assert state() == before


def test_an_append_never_moves_the_conversations_time_back(conversation):
    """The time is taken before the row's lock is: a writer that held the lock meanwhile
    may have stored a later one, which stays."""
    later = timezone.now() + timedelta(minutes=5)
    Conversation.objects.filter(pk=conversation.pk).update(updated_at=later)
    message_append(conversation=conversation, role="user", blocks=[text()])
    assert Conversation.objects.get(pk=conversation.pk).updated_at == later
    Conversation.objects.filter(pk=conversation.pk).update(updated_at=later - timedelta(hours=1))
    message_append(conversation=conversation, role="user", blocks=[text()])
    assert later - timedelta(hours=1) < Conversation.objects.get(pk=conversation.pk).updated_at


@pytest.mark.parametrize("role", ["tool", "User", "", "function"])
def test_message_append_refuses_an_unknown_role(conversation, role):
    before = state()
    with pytest.raises(IngestError) as error:
        message_append(conversation=conversation, role=role, blocks=[text()])
    assert error.value.field == "role"
    assert state() == before


@pytest.mark.parametrize("role", ["assistant", "system"])
def test_an_image_outside_a_user_message_stores_nothing(conversation, role):
    image = block(type="image", media_type="image/png", data=PNG_1x1)
    before = state()
    with pytest.raises(IngestError) as error:
        message_append(conversation=conversation, role=role, blocks=[text(), image])
    assert error.value.field == "blocks[1]"
    assert state() == before


def test_an_image_in_a_user_message_is_stored(conversation):
    image = block(type="image", media_type="image/png", data=PNG_1x1)
    _, rows = message_append(conversation=conversation, role="user", blocks=[image])
    assert (rows[0].media_type, rows[0].data) == ("image/png", PNG_1x1)


def test_a_database_failure_midway_stores_nothing(conversation):
    message_append(conversation=conversation, role="user", blocks=[text("first")])
    # Bypass validation so that the block insert, after the message insert, breaks a
    # database constraint: the message row must go with it.
    bad = ImageIn.model_construct(type="image", media_type="image/bmp", data="Qk0=")
    before = state()
    with pytest.raises(IntegrityError):
        message_append(conversation=conversation, role="user", blocks=[text(), bad])
    assert state() == before
    assert conversation.message_count == 1
    following, _ = message_append(conversation=conversation, role="user", blocks=[])
    assert following.seq == 1


def test_a_failed_block_append_stores_nothing(conversation):
    message, _ = message_append(conversation=conversation, role="user", blocks=[text()])
    bad = ImageIn.model_construct(type="image", media_type="text/plain", data="eA==")
    before = state()
    with pytest.raises(IntegrityError):
        block_append(message=message, block=bad)
    assert state() == before
    assert block_append(message=message, block=text()).seq == 1


# --- block_append ----------------------------------------------------------------------


def test_block_append_goes_to_the_end_of_an_earlier_message(conversation):
    first, _ = message_append(conversation=conversation, role="assistant", blocks=[text(), text()])
    last, _ = message_append(conversation=conversation, role="user", blocks=[text()])
    updated = Conversation.objects.get(pk=conversation.pk).updated_at
    row = block_append(message=first, block=block(type="reasoning", text="late"))
    assert (row.message_id, row.seq) == (first.pk, 2)
    assert first.block_count == 3
    assert Message.objects.get(pk=first.pk).block_count == 3
    assert Message.objects.get(pk=last.pk).block_count == 1
    assert list(first.blocks.values_list("seq", "type")) == [
        (0, "text"),
        (1, "text"),
        (2, "reasoning"),
    ]
    touched = Conversation.objects.get(pk=conversation.pk)
    assert touched.updated_at > updated
    assert touched.message_count == 2


def test_block_append_from_a_stale_message_object_keeps_seqs_dense(conversation):
    message, _ = message_append(conversation=conversation, role="user", blocks=[])
    stale = Message.objects.get(pk=message.pk)
    block_append(message=message, block=text())
    assert block_append(message=stale, block=text()).seq == 1


def test_block_append_refuses_an_image_outside_a_user_message(conversation):
    message, _ = message_append(conversation=conversation, role="assistant", blocks=[])
    before = state()
    with pytest.raises(IngestError) as error:
        block_append(
            message=message, block=block(type="image", media_type="image/png", data=PNG_1x1)
        )
    assert error.value.field == "block"
    assert state() == before


# --- tool_result name resolution (docs/contract.md §1) --------------------------------------------


def test_a_result_takes_the_name_of_a_call_earlier_in_the_same_message(conversation):
    _, rows = message_append(
        conversation=conversation, role="assistant", blocks=[use("c1", "search"), result("c1")]
    )
    assert rows[1].name == "search"
    assert stored_names(conversation) == [["search", "search"]]


def test_a_result_takes_the_name_of_a_call_in_an_earlier_message(conversation):
    message_append(conversation=conversation, role="assistant", blocks=[use("c1", "a")])
    _, rows = message_append(conversation=conversation, role="user", blocks=[result("c1")])
    assert rows[0].name == "a"


def test_the_latest_earlier_call_wins_across_messages(conversation):
    for call_id, name in [("c", "first"), ("c", "second"), ("d", "other")]:
        message_append(conversation=conversation, role="assistant", blocks=[use(call_id, name)])
    _, rows = message_append(conversation=conversation, role="user", blocks=[result("c")])
    assert rows[0].name == "second"


def test_the_latest_earlier_call_wins_within_a_message(conversation):
    message_append(conversation=conversation, role="assistant", blocks=[use("c", "old")])
    _, rows = message_append(
        conversation=conversation,
        role="assistant",
        blocks=[use("c", "x"), use("c", "y"), result("c"), use("c", "z")],
    )
    assert rows[2].name == "y"


def test_a_call_later_in_the_same_message_is_not_used(conversation):
    message_append(conversation=conversation, role="assistant", blocks=[use("c", "bef")])
    _, rows = message_append(
        conversation=conversation, role="assistant", blocks=[result("c"), use("c", "after")]
    )
    assert rows[0].name == "bef"


def test_a_call_in_a_later_message_is_not_used_for_a_block_on_an_earlier_one(conversation):
    early, _ = message_append(conversation=conversation, role="user", blocks=[text()])
    message_append(conversation=conversation, role="assistant", blocks=[use("c", "late")])
    row = block_append(message=early, block=result("c"))
    assert row.name == UNKNOWN_TOOL == "unknown"


def test_a_block_on_an_earlier_message_takes_the_latest_call_up_to_that_message(conversation):
    message_append(conversation=conversation, role="assistant", blocks=[use("c", "one")])
    middle, _ = message_append(
        conversation=conversation, role="assistant", blocks=[use("c", "two")]
    )
    message_append(conversation=conversation, role="assistant", blocks=[use("c", "three")])
    row = block_append(message=middle, block=result("c"))
    assert row.name == "two"
    assert Block.objects.get(pk=row.pk).name == "two"


def test_another_conversations_call_is_not_used(conversation):
    other = conversation_create(title="other")
    message_append(conversation=other, role="assistant", blocks=[use("c", "theirs")])
    _, rows = message_append(conversation=conversation, role="user", blocks=[result("c")])
    assert rows[0].name == "unknown"


def test_a_result_without_any_call_is_named_unknown(conversation):
    _, rows = message_append(
        conversation=conversation, role="user", blocks=[use("other", "t"), result("nowhere")]
    )
    assert rows[1].name == "unknown"
    rows = rows[1:]
    assert rows[0].name == "unknown"
    assert Block.objects.get(pk=rows[0].pk).name == "unknown"


def test_an_explicit_name_is_kept(conversation):
    message_append(conversation=conversation, role="assistant", blocks=[use("c", "real")])
    _, rows = message_append(
        conversation=conversation, role="user", blocks=[result("c", name="given")]
    )
    assert rows[0].name == "given"


def test_an_earlier_result_is_not_taken_for_a_call(conversation):
    message_append(conversation=conversation, role="user", blocks=[result("c", name="from-result")])
    _, rows = message_append(conversation=conversation, role="user", blocks=[result("c")])
    assert rows[0].name == "unknown"


# --- events after commit -------------------------------------------------------------


def listen(conversation_id: Any, action: Callable[[], Any], wait: float = 0.3) -> list[dict]:
    """Run `action` while a channel listens on the conversation's group; what it received.

    Everything runs in one event loop, since the in-memory layer's queues bind to one.
    """

    async def run() -> list[dict]:
        layer = get_channel_layer()
        group = events.conversation_group(str(conversation_id))
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        try:
            await sync_to_async(action)()
            received = []
            while True:
                try:
                    received.append(await asyncio.wait_for(layer.receive(channel), wait))
                except TimeoutError:
                    return received
        finally:
            await layer.group_discard(group, channel)

    return async_to_sync(run)()


def test_message_added_is_published_when_the_transaction_commits(
    conversation, django_capture_on_commit_callbacks
):
    def action() -> None:
        with django_capture_on_commit_callbacks(execute=True):
            message_append(conversation=conversation, role="user", blocks=[text(), text()])

    assert listen(conversation.pk, action) == [
        {
            "type": "conversation.message_added",
            "conversation_id": str(conversation.pk),
            "message_seq": 0,
            "block_count": 2,
        }
    ]


def test_block_added_is_published_when_the_transaction_commits(
    conversation, django_capture_on_commit_callbacks
):
    message, _ = message_append(conversation=conversation, role="user", blocks=[text()])

    def action() -> None:
        with django_capture_on_commit_callbacks(execute=True):
            block_append(message=message, block=text())

    assert listen(conversation.pk, action) == [
        {
            "type": "conversation.block_added",
            "conversation_id": str(conversation.pk),
            "message_seq": 0,
            "block_seq": 1,
        }
    ]


def test_nothing_is_published_before_commit(conversation, django_capture_on_commit_callbacks):
    pending: list[Callable[[], Any]] = []

    def uncommitted() -> None:
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            message_append(conversation=conversation, role="user", blocks=[])
        pending.extend(callbacks)

    assert listen(conversation.pk, uncommitted) == []
    # The publish waits for the commit, with the append's other after-commit work
    # (metrics, alert evaluation).
    assert any(getattr(c, "func", None) is events.publish for c in pending)

    def commit() -> None:
        for callback in pending:
            callback()

    assert [e["type"] for e in listen(conversation.pk, commit)] == ["conversation.message_added"]


def test_nothing_is_published_from_a_rolled_back_append(
    conversation, django_capture_on_commit_callbacks
):
    message, _ = message_append(conversation=conversation, role="user", blocks=[])

    def action() -> None:
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            try:
                with transaction.atomic():
                    message_append(conversation=conversation, role="user", blocks=[])
                    block_append(message=message, block=text())
                    raise RuntimeError("abort")
            except RuntimeError:
                pass
        assert callbacks == []

    assert listen(conversation.pk, action) == []
    assert Message.objects.filter(conversation=conversation).count() == 1


@pytest.mark.django_db(transaction=True)
def test_events_follow_real_commits_and_not_rollbacks():
    conversation = conversation_create(title="committed")

    def action() -> None:
        try:
            with transaction.atomic():
                message_append(conversation=conversation, role="user", blocks=[text()])
                raise RuntimeError("abort")
        except RuntimeError:
            pass
        with transaction.atomic():
            message_append(conversation=conversation, role="assistant", blocks=[])

    received = listen(conversation.pk, action)
    assert [(e["type"], e["message_seq"], e["block_count"]) for e in received] == [
        ("conversation.message_added", 0, 0),
    ]


def test_conversation_created_is_published_to_the_list_group(django_capture_on_commit_callbacks):
    created: list[Conversation] = []

    async def run() -> list[dict]:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(events.LIST_GROUP, channel)
        try:

            def action() -> None:
                with django_capture_on_commit_callbacks(execute=True):
                    created.append(conversation_create(title="listed"))

            await sync_to_async(action)()
            received = []
            while True:
                try:
                    received.append(await asyncio.wait_for(layer.receive(channel), 0.3))
                except TimeoutError:
                    return received
        finally:
            await layer.group_discard(events.LIST_GROUP, channel)

    received = async_to_sync(run)()
    assert {"type": "conversation.created", "conversation_id": str(created[0].pk)} in received


def test_the_conversation_keeps_its_block_total_through_every_append(conversation):
    """The page's totals read Conversation.block_count (O(1)); it is the sum of its messages'."""
    from django.db.models import Sum

    from conversations.record.schemas import MessageIn

    message_append(conversation=conversation, role="user", blocks=[text(), text()])
    messages_append(
        conversation=conversation,
        messages=[
            MessageIn(role="assistant", blocks=[text("a")]),
            MessageIn(role="user", blocks=[]),
            MessageIn(role="assistant", blocks=[text("b"), text("c")]),
        ],
    )
    block_append(message=Message.objects.get(conversation=conversation, seq=1), block=text())
    conversation.refresh_from_db()
    summed = Message.objects.filter(conversation=conversation).aggregate(n=Sum("block_count"))
    assert conversation.block_count == summed["n"] == 6
