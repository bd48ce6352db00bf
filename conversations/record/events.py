"""What changed, told to the channel layer after commit (docs/contract.md §4).

Events are small typed dicts (`Event`, one TypedDict per dotted type; a consumer's handler
is named after it) that carry ids and sequence numbers, never HTML or model instances; a
consumer loads what it needs through the selectors and renders it.

There is one way out: every event is handed over after commit (`publish_on_commit`,
`close_user_sockets`, `access_changed_on_commit`, `share_revoked_on_commit`) to
`_hand_over`, which in a server gives it to the event loop's outbox, so the request never
waits on the channel layer, and elsewhere (commands, shells) sends it before returning.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import weakref
from collections.abc import Iterable
from functools import partial
from typing import Literal, TypeAlias, TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction

from conversations.core import bursts
from conversations.record import metrics
from conversations.record.server_loop import server_loop

log = logging.getLogger(__name__)

LIST_GROUP = "conversations"


def conversation_group(conversation_id: str) -> str:
    return f"conversation.{conversation_id}"


def user_group(user_id: object) -> str:
    return f"user.{user_id}"


def share_group(share_id: object) -> str:
    """The sockets opened with one share link (docs/contract.md §8)."""
    return f"share.{share_id}"


# -- the events --------------------------------------------------------------------------------


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


class Changed(TypedDict):
    """Adds to one conversation that queued while the outbox was busy, told as one event:
    where each message that changed now ends, as `[message seq, block count]` pairs in seq
    order (at most `bursts.POSITIONS`, the latest; a watcher missing earlier ones resyncs)."""

    type: Literal["conversation.changed"]
    conversation_id: str
    positions: list[list[int]]


class NoteChanged(TypedDict):
    """A note on one message was added, edited or deleted (docs/contract.md §10): open pages
    of the conversation render that message's notes again. `change` names this change, so
    one rendering of it serves every socket."""

    type: Literal["conversation.note_changed"]
    conversation_id: str
    message_seq: int
    change: str


class AlertsChanged(TypedDict):
    """An alert of the conversation fired, was acknowledged or went with its rule
    (docs/contract.md §11): its badges are rendered again."""

    type: Literal["conversation.alerts_changed"]
    conversation_id: str
    alert_id: int
    change: Literal["fired", "acknowledged", "deleted"]


class ConversationDeleted(TypedDict):
    type: Literal["conversation.deleted"]
    conversation_id: str


class LoggedOut(TypedDict):
    """The user signed out: their sockets close with 4401 (sent to the user's group)."""

    type: Literal["session.logged_out"]


class AccessChanged(TypedDict):
    """The user's account, permissions or groups changed: their sockets check again.

    `change` names this change, so that one user's sockets share one check of it.
    """

    type: Literal["user.access_changed"]
    change: str


class ShareRevoked(TypedDict):
    """A share link was revoked: its sockets check it again and close."""

    type: Literal["share.revoked"]
    share_id: int


# What the conversation's group and the list group hear (services publish all but Changed).
ConversationEvent: TypeAlias = (
    ConversationCreated
    | MessageAdded
    | BlockAdded
    | Changed
    | ConversationDeleted
    | NoteChanged
    | AlertsChanged
)
# Every event on the layer; tests/record/test_events.py checks each one's shape and handlers.
Event: TypeAlias = ConversationEvent | LoggedOut | AccessChanged | ShareRevoked


# -- handing events over after commit -----------------------------------------------------------


def publish_on_commit(event: ConversationEvent) -> None:
    """The one place services announce a change: after the transaction commits, never before."""
    transaction.on_commit(partial(publish, event))


def publish(event: ConversationEvent) -> None:
    """Tell the conversation's group and the list group (the conversation's watchers
    first: their frames are the ones waited for)."""
    conversation_id = event["conversation_id"]
    _hand_over([conversation_group(conversation_id), LIST_GROUP], event, conversation_id)


def close_user_sockets(user_id: object) -> None:
    """Close every live socket of this user (on logout), once the logout commits."""
    event: LoggedOut = {"type": "session.logged_out"}
    transaction.on_commit(partial(_hand_over, [user_group(user_id)], event))


def access_changed_on_commit(user_ids: Iterable[object]) -> None:
    """After commit, tell these users' sockets to check their access again (docs/contract.md §4:
    a user who is deactivated, loses the permission or changes password loses them; the
    sockets' periodic refresh is the fallback for an event the layer loses)."""
    ids = sorted({str(user_id) for user_id in user_ids})
    if ids:
        transaction.on_commit(partial(_access_changed, ids))


def _access_changed(user_ids: list[str]) -> None:
    # A new name per change, made when it is told: checks made before it are not reused.
    event: AccessChanged = {"type": "user.access_changed", "change": uuid.uuid4().hex}
    _hand_over([user_group(user_id) for user_id in user_ids], event)


def share_revoked_on_commit(share_id: int) -> None:
    """After commit, tell the link's open sockets (they also check every few seconds)."""
    event: ShareRevoked = {"type": "share.revoked", "share_id": share_id}
    transaction.on_commit(partial(_hand_over, [share_group(share_id)], event))


def _hand_over(groups: list[str], event: Event, conversation_id: str | None = None) -> None:
    """Send `event` to `groups`, after whatever was handed over before it.

    In a server (a sync view under the ASGI event loop) it goes to that loop's outbox and
    the request goes on at once: fan-out is never on the request's path. Elsewhere
    (commands, shells, sync tests) it is sent before returning. The channel layer is a
    hint, not the record: a refused or hanging layer is logged after
    REPLAY_BROADCAST_TIMEOUT seconds and the caller goes on; watchers resync later.
    """
    loop = server_loop()
    if loop is not None:
        loop.call_soon_threadsafe(_post, loop, (groups, event, conversation_id))
        return
    try:
        async_to_sync(_send)(groups, event)
    except Exception as exc:
        _log_failure(event, exc)


# -- the outbox --------------------------------------------------------------------------------

# Events waiting for their loop's sender, in order; past this many the oldest wait and
# newer ones are dropped (logged): watchers resync from the database at the next event.
OUTBOX_LIMIT = 10_000
# Groups, the event, and the conversation it is about (None: a user's or a link's).
Item: TypeAlias = tuple[list[str], Event, str | None]
_outboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Outbox] = (
    weakref.WeakKeyDictionary()
)


def _position(event: Event) -> tuple[int, int] | None:
    """(message seq, block count) an add event names; None for other events."""
    if event["type"] == "conversation.message_added":
        return event["message_seq"], event["block_count"]
    if event["type"] == "conversation.block_added":
        return event["message_seq"], event["block_seq"] + 1
    return None


class Held:
    """One conversation's adds that queued while the sender was busy: told as one event."""

    def __init__(self, groups: list[str], event: Event) -> None:
        self.groups = groups
        self.first = event
        self.positions = bursts.Positions()
        self.count = 0

    def add(self, position: tuple[int, int]) -> None:
        self.positions.add([position])
        self.count += 1

    def event(self, conversation_id: str) -> Event:
        """The one add as it was, or a `conversation.changed` naming where each ends."""
        if self.count == 1:
            return self.first
        return _changed(conversation_id, [list(p) for p in self.positions.take()])


class Outbox:
    """One event loop's sender: events go out in order, one at a time. An add is sent at
    once (the leading edge); adds that queued while an earlier send was under way go out
    together, one `conversation.changed` per conversation (`conversations/core/bursts.py`):
    the outbox coalesces only while it is behind, never on a timer."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[Item] = asyncio.Queue(OUTBOX_LIMIT)
        self.task = loop.create_task(self.drain())  # kept alive by this outbox

    def put(self, item: Item) -> None:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            log.warning(
                "could not publish %s: %d events wait already", item[1]["type"], OUTBOX_LIMIT
            )

    async def drain(self) -> None:
        me = asyncio.current_task()
        while True:
            items = [await self.queue.get()]
            while not self.queue.empty():  # what queued while the last send was under way
                items.append(self.queue.get_nowait())
            await self.tell(items)
            # A layer client may swallow the cancellation of a send (the loop closing), or
            # turn it into an error of its own: the cancellation still stands.
            if me is not None and me.cancelling():
                raise asyncio.CancelledError

    async def tell(self, items: list[Item]) -> None:
        """Send `items` in order, each conversation's consecutive adds as one event; any
        other event first sends the adds held before it."""
        held: dict[str, Held] = {}
        for groups, event, conversation_id in items:
            position = _position(event)
            if conversation_id is not None and position is not None:
                if conversation_id not in held:
                    held[conversation_id] = Held(groups, event)
                held[conversation_id].add(position)
                continue
            await self.flush(held)
            await self.send(groups, event)
        await self.flush(held)

    async def flush(self, held: dict[str, Held]) -> None:
        for conversation_id, adds in held.items():
            await self.send(adds.groups, adds.event(conversation_id))
        held.clear()

    async def send(self, groups: list[str], event: Event) -> None:
        """One event; a layer that fails it is logged, and the events behind still go
        (watchers resync the gap)."""
        try:
            await _send(groups, event)
        except Exception as exc:
            _log_failure(event, exc)


def _changed(conversation_id: str, positions: list[list[int]]) -> Changed:
    return {
        "type": "conversation.changed",
        "conversation_id": conversation_id,
        "positions": positions,
    }


def _post(loop: asyncio.AbstractEventLoop, item: Item) -> None:
    """On the loop: queue the event for the loop's one sender, which keeps their order."""
    outbox = _outboxes.get(loop)
    if outbox is None:
        outbox = _outboxes[loop] = Outbox(loop)
    outbox.put(item)


def _about(event: Event) -> str:
    """What an event is about, for the log."""
    if event["type"] == "session.logged_out":
        return "a user's sockets"
    if event["type"] == "user.access_changed":
        return f"change {event['change']}"
    if event["type"] == "share.revoked":
        return f"share link {event['share_id']}"
    return event["conversation_id"]


def _log_failure(event: Event, exc: Exception) -> None:
    metrics.BROADCAST_FAILURES.inc()
    if isinstance(exc, TimeoutError):
        log.warning(
            "could not publish %s for %s: the channel layer did not answer in %d ms",
            event["type"],
            _about(event),
            settings.REPLAY_BROADCAST_TIMEOUT * 1000,
        )
    else:  # the layer's failures are many and all mean the same
        log.warning(
            "could not publish %s for %s: %s: %s",
            event["type"],
            _about(event),
            type(exc).__name__,
            exc,
        )


async def _send(groups: list[str], event: Event) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    message = dict(event)
    async with asyncio.timeout(settings.REPLAY_BROADCAST_TIMEOUT):
        for group in groups:
            await layer.group_send(group, message)
