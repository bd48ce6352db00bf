"""What changed in the record, told to the channel layer after commit.

Events are small typed dicts that carry ids and sequence numbers, never HTML or model
instances; a consumer loads what it needs through the selectors and renders it.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Literal, TypeAlias, TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

LIST_GROUP = "conversations"


def conversation_group(conversation_id: str) -> str:
    return f"conversation.{conversation_id}"


class ConversationCreated(TypedDict):
    type: Literal["conversation.created"]
    conversation_id: str


class MessageAdded(TypedDict):
    type: Literal["conversation.message_added"]
    conversation_id: str
    message_seq: int
    block_count: int


class BlockAdded(TypedDict):
    type: Literal["conversation.block_added"]
    conversation_id: str
    message_seq: int
    block_seq: int


Event: TypeAlias = ConversationCreated | MessageAdded | BlockAdded


def publish_on_commit(event: Event) -> None:
    """The one place services announce a change: after the transaction commits, never before."""
    transaction.on_commit(partial(publish, event))


def publish(event: Event) -> None:
    """Send the event to the conversation's group and the list group.

    The channel layer is a hint, not the record: a failure is logged and ingest goes on.
    """
    layer = get_channel_layer()
    if layer is None:
        return
    groups = [LIST_GROUP, conversation_group(event["conversation_id"])]
    try:
        for group in groups:
            async_to_sync(layer.group_send)(group, dict(event))
    except Exception:
        log.exception("could not publish %s for %s", event["type"], event["conversation_id"])
