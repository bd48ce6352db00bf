"""One process's fan-out (docs/architecture.md, The path of one new block): a change to a
conversation reaches this process once, is rendered once per view, and the same frame goes
to every socket of that view.

A conversation's sockets do not join its channel-layer group one by one: the process joins
it once, with a channel of its own, and hands what it hears to them (`Fanout`). A view is
what a frame's bytes depend on (`ConversationConsumer.view_key`: the conversation, the
toggles, the pressure view's overrides, a share link's scope); the sockets of one view that
hold the same positions get the same frame, rendered once (`render_cache.batches`).

A change is delivered at once (the leading edge). Changes that arrive while the previous one
is still being rendered or sent wait, merged (`core/bursts.py`), and go out together when it
is done; and while the process is saturated with requests and its fan-out has taken its
share of the time (`bursts.Budget`, 5 %), changes wait for the requests: coalescing only
while this process is behind, never on a fixed timer. A socket that is itself
behind (busy with a resume or a resync, still opening, missing an earlier message) is
left out of the shared frame and takes its own path under its lock: the positions it
missed, or a resync from the database.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Coroutine, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from channels.layers import BaseChannelLayer, get_channel_layer

from conversations.core import bursts
from conversations.core.socket_window import HeldWindow
from conversations.live.internals import Shared
from conversations.record import events

if TYPE_CHECKING:
    from conversations.live.fragments import Frame


class ConversationConsumer(Protocol):
    """What the fan-out needs of a conversation socket (`live/conversation.py`'s consumer),
    so that the socket imports the fan-out and never the reverse."""

    conversation_id: str
    closing: bool
    window: HeldWindow
    lock: asyncio.Lock

    def view_key(self) -> Hashable: ...

    def ready(self) -> bool: ...

    def fall_behind(self, positions: Sequence[tuple[int, int]]) -> None: ...

    async def frames(self, wanted: Sequence[tuple[int, int]]) -> list[Frame]: ...

    def push_now(self, frame: Frame, shared: Shared) -> bool: ...

    async def push(self, frame: Frame, shared: Shared | None = None) -> None: ...


log = logging.getLogger(__name__)
RETRY_SECONDS = 1.0  # after the layer failed a receive (Redis down): try again this soon
RECHECK_SECONDS = 0.05  # while changes wait for the requests: whether they still should
# This process's HTTP requests in flight, counted by the ASGI entry (replaysite/asgi.py):
# the fan-out yields to them once it has had its share.
serving = bursts.Serving(time.monotonic)
ADDS = ("conversation.message_added", "conversation.block_added", "conversation.changed")


def positions_of(message: dict[str, Any]) -> list[tuple[int, int]]:
    """(message seq, block count) pairs an add event names, in seq order."""
    if message["type"] == "conversation.message_added":
        return [(int(message["message_seq"]), int(message["block_count"]))]
    if message["type"] == "conversation.block_added":
        return [(int(message["message_seq"]), int(message["block_seq"]) + 1)]
    return [(int(seq), int(blocks)) for seq, blocks in message["positions"]]


class Audience:
    """One conversation's sockets in this process, by view, and what waits for them."""

    def __init__(self) -> None:
        self.views: dict[Hashable, set[ConversationConsumer]] = {}
        self.waiting = bursts.Positions()  # heard while the last change was being delivered
        self.worker: asyncio.Task[None] | None = None

    def sockets(self) -> list[ConversationConsumer]:
        return [socket for members in self.views.values() for socket in members]


class Fanout:
    """This event loop's one member of every watched conversation's group."""

    def __init__(self, layer: BaseChannelLayer) -> None:
        self.layer = layer
        self.channel = ""
        self.audiences: dict[str, Audience] = {}
        self.receiver: asyncio.Task[None] | None = None
        self.tasks: set[asyncio.Task[None]] = set()  # deletions being told
        self.budget = bursts.Budget(time.monotonic)  # the process's, for every conversation
        # Joins and leaves one at a time: a page reloaded joins as its old socket leaves.
        self.membership = asyncio.Lock()

    async def subscribe(self, socket: ConversationConsumer) -> None:
        """Deliver the socket's conversation to it from now on (again: renews the group)."""
        audience = self.audiences.setdefault(socket.conversation_id, Audience())
        audience.views.setdefault(socket.view_key(), set()).add(socket)
        group = events.conversation_group(socket.conversation_id)
        async with self.membership:
            if not self.channel:
                self.channel = await self.layer.new_channel()
            if self.receiver is None or self.receiver.done():
                self.receiver = asyncio.ensure_future(self.receive())
            await self.layer.group_add(group, self.channel)

    async def unsubscribe(self, socket: ConversationConsumer) -> None:
        audience = self.audiences.get(socket.conversation_id)
        if audience is None:
            return
        view = audience.views.get(socket.view_key())
        if view is not None:
            view.discard(socket)
            if not view:
                del audience.views[socket.view_key()]
        if audience.views:
            return
        del self.audiences[socket.conversation_id]
        async with self.membership:
            if socket.conversation_id in self.audiences:
                return  # watched again meanwhile (a page reloaded): stay in the group
            if not self.audiences and self.receiver is not None:
                self.receiver.cancel()  # nothing watched here: no receive left waiting
                self.receiver = None
            group = events.conversation_group(socket.conversation_id)
            await self.layer.group_discard(group, self.channel)

    async def receive(self) -> None:
        """Hear every watched conversation's events on this process's one channel."""
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except Exception as exc:  # the layer is down: sockets resync when it is back
                log.warning("live fan-out could not receive: %s: %s", type(exc).__name__, exc)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            self.heard(message)

    def heard(self, message: dict[str, Any]) -> None:
        audience = self.audiences.get(str(message.get("conversation_id")))
        if audience is None:
            return
        if message["type"] in ADDS:
            audience.waiting.add(positions_of(message))
            if audience.worker is None:
                serving.work_started()  # until deliver_all is done: requests now crowd it
                audience.worker = asyncio.ensure_future(self.deliver_all(audience))
        else:  # deleted, notes, alerts: each socket's own handler, as Channels names it
            self.spawn(tell_each(audience.sockets(), message))

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def turn(self) -> None:
        """Until the fan-out may deliver: at once unless the process is saturated with
        requests and the fan-out has had its share of the time."""
        while True:
            wait = self.budget.wait(serving.saturated())
            if wait <= 0:
                return
            await asyncio.sleep(min(wait, RECHECK_SECONDS))  # saturation may end sooner

    async def deliver_all(self, audience: Audience) -> None:
        """Deliver what waits, then what came meanwhile, until nothing waits. While this
        process is saturated with requests and its fan-out has had its share of the time
        (`bursts.Budget`), what waits keeps waiting, merging with what comes next: ingest
        first, and watchers behind get fewer, larger frames."""
        try:
            while audience.waiting:
                await self.turn()
                positions = audience.waiting.take()
                started = time.monotonic()
                for view in list(audience.views.values()):
                    try:
                        await deliver(list(view), positions)
                    except Exception as exc:
                        log.warning("live fan-out failed: %s: %s", type(exc).__name__, exc)
                        for socket in view:  # each catches up on its own path
                            socket.fall_behind(positions)
                self.budget.spent(time.monotonic() - started)
        finally:
            audience.worker = None
            serving.work_finished()


async def deliver(sockets: list[ConversationConsumer], positions: list[tuple[int, int]]) -> None:
    """One view's sockets: those holding the same positions get one frame, rendered once;
    the others take their own path."""
    alike: dict[tuple[tuple[int, int], ...], list[ConversationConsumer]] = {}
    for socket in sockets:
        if socket.closing or socket.window.reloading:
            continue  # a reloading page hears nothing until it reports its window
        if not socket.ready():
            socket.fall_behind(positions)
            continue
        wanted = socket.window.wanted(positions)
        if wanted is None:  # it misses an earlier message: a resync, on its own path
            socket.fall_behind(positions)
        elif wanted:
            alike.setdefault(tuple(wanted), []).append(socket)
    for shared_positions, members in alike.items():
        frames = await members[0].frames(shared_positions)
        shared = [Shared(frame.html) for frame in frames]  # encoded and framed once
        for socket in members:
            if socket.closing:
                continue
            if not socket.ready():  # it got busy while the frame was rendered
                socket.fall_behind(positions)
                continue
            if len(frames) == 1 and socket.push_now(frames[0], shared[0]):
                continue  # the common case: written at once, nothing awaited
            async with socket.lock:  # free (ready): taken without waiting
                for frame, bytes_ in zip(frames, shared, strict=True):
                    await socket.push(frame, bytes_)


async def tell_each(sockets: list[ConversationConsumer], message: dict[str, Any]) -> None:
    """An event that is not an add (`conversation.deleted`, `.note_changed`,
    `.alerts_changed`): to each socket's handler of that name, in the order heard. Every
    such type has a handler on the consumers (tests/record/test_event_shapes.py)."""
    name = str(message["type"]).replace(".", "_")
    for socket in sockets:
        await getattr(socket, name)(message)


_fanouts: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Fanout] = weakref.WeakKeyDictionary()


def fanout() -> Fanout:
    """This event loop's fan-out, on the current channel layer."""
    loop = asyncio.get_running_loop()
    layer = get_channel_layer()
    assert layer is not None, "live sockets need a channel layer"
    found = _fanouts.get(loop)
    if found is None or found.layer is not layer:
        found = _fanouts[loop] = Fanout(layer)
    return found
