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
from typing import Literal, TypeAlias, TypedDict

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
    """The sockets opened with one share link (SPEC §8)."""
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
_outboxes: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, tuple[asyncio.Queue[tuple[list[str], dict[str, object]]], object]
] = weakref.WeakKeyDictionary()


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
    found = _outboxes.get(loop)
    if found is None:
        queue: asyncio.Queue[tuple[list[str], dict[str, object]]] = asyncio.Queue(OUTBOX_LIMIT)
        found = (queue, loop.create_task(_drain(queue)))  # the task is kept alive here
        _outboxes[loop] = found
    try:
        found[0].put_nowait((groups, message))
    except asyncio.QueueFull:
        log.warning("could not publish %s: %d events wait already", message["type"], OUTBOX_LIMIT)


async def _drain(queue: asyncio.Queue[tuple[list[str], dict[str, object]]]) -> None:
    while True:
        groups, message = await queue.get()
        try:
            await _send(groups, message)
        except Exception as exc:
            _log_failure(message, exc)


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
    """After commit, tell these users' sockets to check their access again (SPEC §4: a
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
