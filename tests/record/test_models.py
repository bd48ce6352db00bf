"""The database holds the record's invariants itself, even against a writer that skips the
services; and a tool_use input keeps its key order on every database (docs/contract.md §1)."""

from __future__ import annotations

import json

import pytest
from django.db import IntegrityError, connection, transaction

from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.reads import selectors
from conversations.record.reads.rows import block_value
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def conversation() -> Conversation:
    return Conversation.objects.create(title="Raw")


@pytest.fixture
def message(conversation: Conversation) -> Message:
    return Message.objects.create(conversation=conversation, seq=0, role="user")


def refused(**fields) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        Block.objects.create(**fields)


def test_a_duplicate_message_seq_in_a_conversation_is_refused(conversation, message):
    with pytest.raises(IntegrityError), transaction.atomic():
        Message.objects.create(conversation=conversation, seq=0, role="assistant")
    assert Message.objects.filter(conversation=conversation).count() == 1


def test_the_same_message_seq_in_another_conversation_is_allowed(message):
    other = Conversation.objects.create(title="Other")
    Message.objects.create(conversation=other, seq=0, role="user")


def test_a_duplicate_block_seq_in_a_message_is_refused(message):
    Block.objects.create(message=message, seq=0, type="text", text="a")
    refused(message=message, seq=0, type="text", text="b")
    assert list(message.blocks.values_list("text", flat=True)) == ["a"]


def test_the_same_block_seq_in_another_message_is_allowed(conversation, message):
    other = Message.objects.create(conversation=conversation, seq=1, role="assistant")
    Block.objects.create(message=message, seq=0, type="text")
    Block.objects.create(message=other, seq=0, type="text")


@pytest.mark.parametrize("role", ["tool", "function", "", "User"])
def test_an_invalid_role_is_refused(conversation, role):
    with pytest.raises(IntegrityError), transaction.atomic():
        Message.objects.create(conversation=conversation, seq=0, role=role)


def test_a_negative_message_seq_is_refused(conversation):
    with pytest.raises(IntegrityError), transaction.atomic():
        Message.objects.create(conversation=conversation, seq=-1, role="user")


def test_a_negative_block_seq_is_refused(message):
    refused(message=message, seq=-1, type="text")


@pytest.mark.parametrize("kind", ["tool", "video", "", "TEXT", "thinking"])
def test_an_invalid_block_type_is_refused(message, kind):
    refused(message=message, seq=0, type=kind, text="x")


@pytest.mark.parametrize("media_type", ["image/bmp", "image/svg+xml", "", "text/plain", "png"])
def test_an_image_with_a_bad_media_type_is_refused(message, media_type):
    refused(message=message, seq=0, type="image", media_type=media_type, data="aGk=")


@pytest.mark.parametrize("media_type", ["image/png", "image/jpeg", "image/gif", "image/webp"])
def test_an_image_with_a_listed_media_type_is_accepted(message, media_type):
    Block.objects.create(message=message, seq=0, type="image", media_type=media_type, data="aGk=")


def test_a_tool_result_without_a_name_is_refused(message):
    refused(message=message, seq=0, type="tool_result", call_id="c1", text="ok", name="")


def test_a_tool_use_without_an_input_is_refused(message):
    refused(message=message, seq=0, type="tool_use", call_id="c1", name="t", input_json="")


def test_is_error_on_anything_but_a_tool_result_is_refused(message):
    refused(message=message, seq=0, type="text", text="x", is_error=True)


def test_deleting_a_conversation_deletes_its_messages_and_blocks(conversation, message):
    Block.objects.create(message=message, seq=0, type="text")
    conversation.delete()
    assert (Message.objects.count(), Block.objects.count()) == (0, 0)


INPUT = (
    '{"zeta":1,"Ärger":"café ☕","alpha":{"y":[3,{"q":null,"b":true}],"b":"日本"},'
    '"10":-2.5,"aa":{},"a":"\\u0000"}'
)


@pytest.mark.sqlite
def test_tool_use_input_keeps_its_key_order_through_the_database():
    conversation = conversation_create(title=f"Order on {connection.vendor}")
    value = json.loads(INPUT)
    tool_use = BLOCK_ADAPTER.validate_python(
        {"type": "tool_use", "id": "c1", "name": "t", "input": value}
    )
    message_append(conversation=conversation, role="assistant", blocks=[tool_use])
    stored = Block.objects.get(message__conversation=conversation)
    assert stored.input_json == INPUT
    (row,) = selectors.message_rows(conversation)
    read = block_value(row.blocks[0])
    assert list(read.input) == ["zeta", "Ärger", "alpha", "10", "aa", "a"]
    assert list(read.input["alpha"]) == ["y", "b"]
    assert read.input == value


def test_a_raw_input_row_comes_back_byte_for_byte(message):
    Block.objects.create(
        message=message, seq=0, type="tool_use", call_id="c", name="t", input_json=INPUT
    )
    assert Block.objects.get(message=message).input_json == INPUT
