"""Every event on the channel layer has its TypedDict's shape (zulip's `verify_action`):
each service call and signal that publishes is made, what reaches the layer is captured
and checked against the TypedDict its `type` names (keys and types, nothing more), and
every member of `events.Event` is handled by every consumer whose groups hear it."""

from __future__ import annotations

import asyncio
import typing
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.consumer import get_handler_name
from channels.layers import InMemoryChannelLayer, channel_layers
from django.contrib.auth.models import Group, Permission
from django.test import Client

from conversations.alerts.models import Alert
from conversations.alerts.services import alert_acknowledge, alert_rule_create
from conversations.live.conversation import ConversationConsumer
from conversations.live.listing import ListConsumer
from conversations.live.share import ShareConsumer
from conversations.record import events
from conversations.record.models.conversation import Conversation
from conversations.record.notes import services as services_module
from conversations.record.notes.services import note_delete, note_edit
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.services.appending import block_append, message_append
from conversations.record.services.conversations import conversation_create, conversation_delete
from conversations.sharing.services import share_create, share_revoke
from tests.builders import make_user, tool_result
from tests.record.test_bursts import HeldSend
from tests.record.test_events import text

pytestmark = pytest.mark.django_db(transaction=True)

MEMBERS: dict[str, type] = {
    typing.get_args(typing.get_type_hints(member)["type"])[0]: member
    for member in typing.get_args(events.Event)
}


class RecordingLayer(InMemoryChannelLayer):
    """channels' in-memory layer, keeping what each group is sent."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.sent.append((group, dict(message)))
        await super().group_send(group, message)


@pytest.fixture
def layer() -> Iterator[RecordingLayer]:
    recording = RecordingLayer()
    channel_layers.backends = {"default": recording}
    yield recording
    channel_layers.backends = {}


def conforms(value: object, hint: Any) -> bool:
    """Whether `value` is of the annotation `hint` (the few forms events use), exactly:
    no bool for an int, no tuple for a list (the layer sends JSON-like data)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return value in args
    if origin is list:
        return type(value) is list and all(conforms(item, args[0]) for item in value)
    if hint in (int, str):
        return type(value) is hint
    raise AssertionError(f"events use no {hint} yet: teach conforms() about it")


def verify(layer: RecordingLayer, action: Callable[[], object]) -> list[tuple[str, str]]:
    """Run `action`; check every message it sent; return (group, type) of each."""
    before = len(layer.sent)
    action()
    sent = layer.sent[before:]
    assert sent, "the action published nothing"
    for _, message in sent:
        shape = MEMBERS.get(message.get("type"))  # type: ignore[arg-type]
        assert shape is not None, f"{message} is not a member of events.Event"
        keys = shape.__required_keys__ | shape.__optional_keys__  # type: ignore[attr-defined]
        assert set(message) == keys, (message, keys)
        for key, hint in typing.get_type_hints(shape).items():
            assert conforms(message[key], hint), f"{message['type']}.{key}: {message[key]!r}"
        for key, value in message.items():
            assert "<" not in str(value), f"{key} carries markup: events carry ids, not HTML"
    return [(group, message["type"]) for group, message in sent]


def test_every_publishing_service_and_signal_sends_its_typed_event(
    layer: RecordingLayer, settings: Any
) -> None:
    conversation: Conversation = conversation_create(title="Shapes")
    cid = str(conversation.id)
    page, listing = events.conversation_group(cid), events.LIST_GROUP

    def create() -> None:
        conversation_create(title="<b>Another</b>")

    told = verify(layer, create)
    assert [kind for _, kind in told] == ["conversation.created"] * 2
    assert told[1][0] == listing

    holder: dict[str, Any] = {}

    def append() -> None:
        holder["message"], _ = message_append(
            conversation=conversation, role="user", blocks=[text("<p>one</p>")]
        )

    assert verify(layer, append) == [
        (page, "conversation.message_added"),
        (listing, "conversation.message_added"),
    ]
    assert verify(layer, lambda: block_append(message=holder["message"], block=text("2"))) == [
        (page, "conversation.block_added"),
        (listing, "conversation.block_added"),
    ]
    # Notes (docs/contract.md §10): added, edited and deleted, each told as note_changed.
    note_changed = [(page, "conversation.note_changed"), (listing, "conversation.note_changed")]
    writer = make_user("writer")

    def note_add() -> None:
        holder["note"] = services_module.note_add(
            conversation=conversation, message_seq=0, text="<i>n</i>", user=writer
        )

    assert verify(layer, note_add) == note_changed
    assert verify(layer, lambda: note_edit(note=holder["note"], text="m")) == note_changed
    assert verify(layer, lambda: note_delete(note=holder["note"])) == note_changed
    link, _ = share_create(conversation=conversation)
    assert verify(layer, lambda: share_revoke(link=link)) == [
        (events.share_group(link.pk), "share.revoked")
    ]

    user = make_user("shaped")
    client = Client()
    client.force_login(user)
    assert verify(layer, client.logout) == [(events.user_group(user.pk), "session.logged_out")]

    def deactivate() -> None:
        user.is_active = False
        user.save()

    assert verify(layer, deactivate) == [(events.user_group(user.pk), "user.access_changed")]
    group = Group.objects.create(name="watchers")
    group.user_set.add(user)
    permission = Permission.objects.get(codename="view_conversation")
    assert verify(layer, lambda: group.permissions.add(permission)) == [
        (events.user_group(user.pk), "user.access_changed")
    ]
    alert_rule_create(kind="tool_error")  # docs/contract.md §11

    def error() -> None:
        message_append(
            conversation=conversation,
            role="user",
            blocks=[BLOCK_ADAPTER.validate_python(tool_result("t", "boom", is_error=True))],
        )

    assert verify(layer, error) == [
        (page, "conversation.message_added"),
        (listing, "conversation.message_added"),
        (page, "conversation.alerts_changed"),
        (listing, "conversation.alerts_changed"),
    ]
    alert = Alert.objects.get(conversation=conversation)
    assert verify(layer, lambda: alert_acknowledge(alert=alert, by="ops")) == [
        (page, "conversation.alerts_changed"),
        (listing, "conversation.alerts_changed"),
    ]
    assert verify(layer, lambda: conversation_delete(conversation=conversation)) == [
        (page, "conversation.deleted"),
        (listing, "conversation.deleted"),
    ]
    # Every event but the outbox's own (the test below) was published and checked.
    seen = {message["type"] for _, message in layer.sent}
    assert seen == set(MEMBERS) - {"conversation.changed"}


def test_adds_told_together_are_a_typed_changed_event(
    layer: RecordingLayer, monkeypatch: Any
) -> None:
    conversation = conversation_create(title="Burst shape")
    held = HeldSend(monkeypatch)  # the outbox is behind its first send: the rest queue

    def burst() -> None:
        for n in range(3):
            message_append(conversation=conversation, role="user", blocks=[text(f"{n}")])

    async def body() -> None:
        held.gate = asyncio.Event()
        channel = await layer.new_channel()
        await layer.group_add(events.conversation_group(str(conversation.id)), channel)
        await sync_to_async(burst)()  # through the outbox of this loop
        held.release()
        async with asyncio.timeout(5):
            while (await layer.receive(channel))["type"] != "conversation.changed":
                pass

    def told() -> None:
        async_to_sync(body)()

    kinds = [kind for _, kind in verify(layer, told)]
    assert kinds.count("conversation.changed") == 2  # the page's group and the list's


# Which consumers hear which events: the groups each one joins.
HEARD_BY: dict[str, list[type]] = {
    "conversation.created": [ConversationConsumer, ListConsumer, ShareConsumer],
    "conversation.message_added": [ConversationConsumer, ListConsumer, ShareConsumer],
    "conversation.block_added": [ConversationConsumer, ListConsumer, ShareConsumer],
    "conversation.changed": [ConversationConsumer, ListConsumer, ShareConsumer],
    "conversation.deleted": [ConversationConsumer, ListConsumer, ShareConsumer],
    "conversation.note_changed": [ConversationConsumer, ListConsumer, ShareConsumer],
    "conversation.alerts_changed": [ConversationConsumer, ListConsumer, ShareConsumer],
    "session.logged_out": [ConversationConsumer, ListConsumer],
    "user.access_changed": [ConversationConsumer, ListConsumer],
    "share.revoked": [ShareConsumer],
}


def test_every_event_has_a_handler_named_after_its_type_in_every_consumer_that_hears_it() -> None:
    assert set(HEARD_BY) == set(MEMBERS), "a new event: say which consumers hear it"
    for kind, consumers in HEARD_BY.items():
        handler = get_handler_name({"type": kind})
        for consumer in consumers:
            assert callable(getattr(consumer, handler, None)), f"{consumer.__name__}.{handler}"


def test_the_shape_check_refuses_what_does_not_conform() -> None:
    assert conforms([[0, 1]], list[list[int]])
    assert not conforms([[0, True]], list[list[int]])
    assert not conforms(((0, 1),), list[list[int]])
    assert not conforms("3", int)
    assert not conforms("conversation.gone", typing.Literal["conversation.deleted"])
