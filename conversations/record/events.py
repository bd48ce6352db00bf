"""What changed in the record, told to the channel layer after commit.

Events are small typed dicts that carry ids and sequence numbers, never HTML or model
instances; a consumer loads what it needs through the selectors and renders it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
import weakref
from collections.abc import Iterable
from functools import partial
from typing import Literal, TypeAlias, TypedDict, cast

from asgiref.sync import SyncToAsync, async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)

LIST_GROUP = "conversations"


def conversation_group(conversation_id: str) -> str:
    return f"conversation.{conversation_id}"


def user_group(user_id: object) -> str:
    return f"user.{user_id}"


def share_group(share_id: object) -> str:
    """The sockets opened with one share link (docs/contract.md §8)."""
    return f"share.{share_id}"


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


class ConversationDeleted(TypedDict):
    type: Literal["conversation.deleted"]
    conversation_id: str


class LoggedOut(TypedDict):
    type: Literal["session.logged_out"]


class AccessChanged(TypedDict):
    """The user's account, permissions or groups changed: their sockets check again.

    `change` names this change, so that one user's sockets share one check of it.
    """

    type: Literal["user.access_changed"]
    change: str


class Changed(TypedDict):
    """A burst of messages and blocks added to one conversation, told once: where each
    message that changed now ends, as `[message seq, block count]` pairs in seq order
    (at most `BURST_POSITIONS`, the latest; a watcher missing earlier ones resyncs)."""

    type: Literal["conversation.changed"]
    conversation_id: str
    positions: list[list[int]]


Event: TypeAlias = ConversationCreated | MessageAdded | BlockAdded | ConversationDeleted


class ShareRevoked(TypedDict):
    """A share link was revoked: its sockets check it again and close."""

    type: Literal["share.revoked"]
    share_id: int


def publish_on_commit(event: Event) -> None:
    """The one place services announce a change: after the transaction commits, never before."""
    transaction.on_commit(partial(publish, event))


def publish(event: Event) -> None:
    """Send the event to the list group and the conversation's group.

    In a server (a sync view under the ASGI event loop) the send is handed to that loop's
    outbox and the request goes on at once: fan-out is never on the request's path. Elsewhere
    (commands, shells) it is sent before returning. The channel layer is a hint, not the
    record: a refused or hanging layer is logged after REPLAY_BROADCAST_TIMEOUT seconds and
    ingest goes on; watchers resync later.
    """
    # The conversation's watchers first: their frames are the ones waited for.
    groups = [conversation_group(event["conversation_id"]), LIST_GROUP]
    message = dict(event)
    loop = _server_loop()
    if loop is not None:
        loop.call_soon_threadsafe(_post, loop, groups, message)
        return
    try:
        async_to_sync(_send)(groups, message)
    except Exception as exc:
        _log_failure(message, exc)


# Events waiting for their loop's sender, in order; past this many the oldest wait and
# newer ones are dropped (logged): watchers resync from the database at the next event.
OUTBOX_LIMIT = 10_000
# Events of one conversation closer together than this are a burst (an agent streaming
# or flushing): its watchers get at most one frame per REPLAY_LIVE_BURST_MS, carrying
# everything since, rather than one frame per event. Slower conversations are told each
# event at once.
BURST_GAP = 0.05
BURST_POSITIONS = 300  # the most positions one `conversation.changed` carries
Item: TypeAlias = tuple[list[str], dict[str, object]]
_outboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Outbox] = (
    weakref.WeakKeyDictionary()
)


def _position(message: dict[str, object]) -> tuple[int, int] | None:
    """(message seq, block count) an add event names; None for other events."""
    match message["type"]:
        case "conversation.message_added":
            return int(cast(int, message["message_seq"])), int(cast(int, message["block_count"]))
        case "conversation.block_added":
            return int(cast(int, message["message_seq"])), int(cast(int, message["block_seq"])) + 1
        case _:
            return None


class Outbox:
    """One event loop's sender: events go out in order, one at a time, and a bursting
    conversation's adds are held for a moment and told as one `conversation.changed`."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[Item | str] = asyncio.Queue(OUTBOX_LIMIT)
        self.last_event: dict[str, float] = {}  # conversation → when its last add came
        self.last_sent: dict[str, float] = {}  # conversation → when its last add went out
        self.held: dict[str, dict[int, int]] = {}  # conversation → positions not yet told
        self.timers: dict[str, asyncio.TimerHandle] = {}  # conversation → when it is told
        self.task = loop.create_task(self.drain())  # kept alive by this outbox

    def put(self, item: Item) -> None:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            log.warning(
                "could not publish %s: %d events wait already", item[1]["type"], OUTBOX_LIMIT
            )

    def due(self, conversation_id: str) -> None:
        """A held burst's time has come: queued behind what waits (order is kept); a full
        queue tries again shortly rather than leave the burst untold."""
        try:
            self.queue.put_nowait(conversation_id)
        except asyncio.QueueFull:
            self.timers[conversation_id] = self.loop.call_later(
                BURST_GAP, self.due, conversation_id
            )

    async def drain(self) -> None:
        while True:
            item = await self.queue.get()
            try:
                if isinstance(item, str):  # a held burst is due
                    await self.flush(item)
                else:
                    await self.take(*item)
            except Exception as exc:
                if isinstance(item, str):
                    item = ([], {"type": "conversation.changed", "conversation_id": item})
                _log_failure(item[1], exc)

    async def take(self, groups: list[str], message: dict[str, object]) -> None:
        conversation_id = str(message.get("conversation_id", ""))
        position = _position(message)
        window = settings.REPLAY_LIVE_BURST_MS / 1000
        if position is None or window <= 0:
            await self.flush_first(conversation_id)  # what was held goes first: order is kept
            await _send(groups, message)
            return
        now = self.loop.time()
        burst = now - self.last_event.get(conversation_id, -window) < BURST_GAP
        self.last_event[conversation_id] = now
        held = self.held.get(conversation_id)
        if held is None and not burst:
            self.last_sent[conversation_id] = now
            await _send(groups, message)
            self.forget_quiet(now)
            return
        if held is None:
            held = self.held[conversation_id] = {}
            due = self.last_sent.get(conversation_id, now) + window - now
            self.timers[conversation_id] = self.loop.call_later(
                max(0.0, due), self.due, conversation_id
            )
        seq, blocks = position
        held[seq] = max(held.get(seq, 0), blocks)
        if not burst:
            await self.flush(conversation_id)  # the burst is over: tell it now, with this add

    async def flush_first(self, conversation_id: str) -> None:
        """Tell what is held before another event of the conversation; a layer that fails
        it is logged, and the event behind still goes (watchers resync the gap)."""
        try:
            await self.flush(conversation_id)
        except Exception as exc:
            _log_failure({"type": "conversation.changed", "conversation_id": conversation_id}, exc)

    async def flush(self, conversation_id: str) -> None:
        timer = self.timers.pop(conversation_id, None)
        if timer is not None:
            timer.cancel()  # a later burst gets a window of its own, not this one's end
        held = self.held.pop(conversation_id, None)
        if not held:
            return
        self.last_sent[conversation_id] = self.loop.time()
        event: Changed = {
            "type": "conversation.changed",
            "conversation_id": conversation_id,
            "positions": [[seq, held[seq]] for seq in sorted(held)[-BURST_POSITIONS:]],
        }
        await _send([conversation_group(conversation_id), LIST_GROUP], dict(event))

    def forget_quiet(self, now: float) -> None:
        """Drop the times of conversations quiet for a while (bounded memory)."""
        if len(self.last_event) < 1_000:
            return
        window = settings.REPLAY_LIVE_BURST_MS / 1000
        for conversation_id, when in list(self.last_event.items()):
            if now - when > max(window, BURST_GAP) and conversation_id not in self.held:
                del self.last_event[conversation_id]
                self.last_sent.pop(conversation_id, None)


def _server_loop() -> asyncio.AbstractEventLoop | None:
    """The running event loop that called this sync thread (asgiref's), if any."""
    if getattr(SyncToAsync.threadlocal, "main_event_loop_pid", None) != os.getpid():
        return None
    loop: asyncio.AbstractEventLoop | None = getattr(
        SyncToAsync.threadlocal, "main_event_loop", None
    )
    if loop is None or not loop.is_running() or loop.is_closed():
        return None
    return loop


def _post(loop: asyncio.AbstractEventLoop, groups: list[str], message: dict[str, object]) -> None:
    """On the loop: queue the event for the loop's one sender, which keeps their order."""
    outbox = _outboxes.get(loop)
    if outbox is None:
        outbox = _outboxes[loop] = Outbox(loop)
    outbox.put((groups, message))


def _log_failure(message: dict[str, object], exc: Exception) -> None:
    if isinstance(exc, TimeoutError):
        log.warning(
            "could not publish %s for %s: the channel layer did not answer in %d ms",
            message["type"],
            message["conversation_id"],
            settings.REPLAY_BROADCAST_TIMEOUT * 1000,
        )
    else:  # the layer's failures are many and all mean the same
        log.warning(
            "could not publish %s for %s: %s: %s",
            message["type"],
            message["conversation_id"],
            type(exc).__name__,
            exc,
        )


def close_user_sockets(user_id: object) -> None:
    """Close every live socket of this user (on logout)."""
    message: LoggedOut = {"type": "session.logged_out"}
    try:
        async_to_sync(_send)([user_group(user_id)], dict(message))
    except Exception as exc:
        log.warning("could not close the sockets of user %s: %s", user_id, exc)


def access_changed_on_commit(user_ids: Iterable[object]) -> None:
    """After commit, tell these users' sockets to check their access again (docs/contract.md §4: a
    user who is deactivated, loses the permission or changes password loses them)."""
    ids = sorted({str(user_id) for user_id in user_ids})
    if ids:
        transaction.on_commit(partial(_access_changed, ids))


def _access_changed(user_ids: list[str]) -> None:
    message: AccessChanged = {"type": "user.access_changed", "change": uuid.uuid4().hex}
    try:
        async_to_sync(_send)([user_group(user_id) for user_id in user_ids], dict(message))
    except Exception as exc:
        # The sockets' periodic refresh checks access too: they close later, not never.
        log.warning("could not tell %d user(s) of an access change: %s", len(user_ids), exc)


def share_revoked_on_commit(share_id: int) -> None:
    """After commit, tell the link's open sockets (they also check every few seconds)."""
    transaction.on_commit(partial(_share_revoked, share_id))


def _share_revoked(share_id: int) -> None:
    message: ShareRevoked = {"type": "share.revoked", "share_id": share_id}
    try:
        async_to_sync(_send)([share_group(share_id)], dict(message))
    except Exception as exc:
        # The sockets' own periodic check closes them within REPLAY_SHARE_RECHECK_SECONDS.
        log.warning("could not tell the sockets of share link %s: %s", share_id, exc)


async def _send(groups: list[str], message: dict[str, object]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    async with asyncio.timeout(settings.REPLAY_BROADCAST_TIMEOUT):
        for group in groups:
            await layer.group_send(group, message)
