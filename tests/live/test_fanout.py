"""One process's fan-out (docs/contract.md §4, Live delivery; docs/architecture.md): a
conversation's group has one member per process however many sockets watch; each change is rendered
once per view and every socket of the view gets the same frame; a socket that is busy catches up on
its own, in order; changes that come while a delivery is under way go out together, after it.

Driven in-process through the real ASGI application and the in-memory layer, as
tests/live/test_consumers.py; the same over real daphne processes and Redis is in
tests/live/test_live_e2e.py and tests/live/test_scale_out.py.
"""

from __future__ import annotations

import asyncio
import re
import threading
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test import Client

from conversations.live import fanout, fragments
from conversations.live.conversation import ConversationConsumer
from conversations.record import events
from conversations.record.reads import selectors
from tests.builders import text
from tests.live.test_consumers import (
    QUIET,
    add_block,
    append,
    article_order,
    conversation_path,
    create,
    frame,
    fresh_channel_layer,
    group_members,
    in_loop,
    operator,
    plain_static_storage,
    socket,
)

__all__ = ["fresh_channel_layer", "operator", "plain_static_storage"]

pytestmark = [pytest.mark.sqlite, pytest.mark.django_db(transaction=True)]


def sockets_here(conversation_id: Any) -> list[ConversationConsumer]:
    """The sockets this loop's fan-out delivers the conversation to."""
    audience = fanout.fanout().audiences.get(str(conversation_id))
    return [] if audience is None else audience.sockets()


class CountedRenders:
    """fragments.messages_frame, counted; the first `held` calls wait for `release()`."""

    def __init__(self, monkeypatch: Any, held: int = 0) -> None:
        self.render = fragments.messages_frame
        self.calls: list[tuple[Any, ...]] = []
        self.held = held
        self.gate: Any = None  # a threading.Event: renders run in a worker thread
        monkeypatch.setattr(fragments, "messages_frame", self)

    def __call__(self, conversation_id: str, seqs: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((tuple(seqs), *args))
        if len(self.calls) <= self.held:
            assert self.gate is not None and self.gate.wait(10), "the test never released"
        return self.render(conversation_id, seqs, *args, **kwargs)


def append_elsewhere(conversation_id: Any, value: str) -> None:
    """An append from a thread of its own, which closes its connection after."""
    try:
        append(conversation_id, "user", [text(value)])
    finally:
        connection.close()


@in_loop
async def test_a_conversations_group_has_one_member_here_however_many_sockets_watch(
    operator: Client,
) -> None:
    conversation = await sync_to_async(create)()
    group = events.conversation_group(str(conversation.id))
    async with (
        socket(conversation_path(conversation.id), operator),
        socket(conversation_path(conversation.id), operator),
        socket(conversation_path(conversation.id, False, "anthropic"), operator),
    ):
        assert len(sockets_here(conversation.id)) == 3
        assert await group_members(group) == [fanout.fanout().channel]
    assert await group_members(group) == []  # the last one gone, the process leaves
    assert sockets_here(conversation.id) == []


@in_loop
async def test_each_view_renders_a_change_once_and_its_sockets_get_the_same_frame(
    operator: Client, monkeypatch: Any
) -> None:
    conversation = await sync_to_async(create)()
    cid = conversation.id
    renders = CountedRenders(monkeypatch)
    views = [(True, "openai")] * 4 + [(False, "anthropic")] * 2
    async with (
        socket(conversation_path(cid, *views[0]), operator) as a1,
        socket(conversation_path(cid, *views[1]), operator) as a2,
        socket(conversation_path(cid, *views[2]), operator) as a3,
        socket(conversation_path(cid, *views[3]), operator) as a4,
        socket(conversation_path(cid, *views[4]), operator) as b1,
        socket(conversation_path(cid, *views[5]), operator) as b2,
    ):
        for n in range(3):
            before = len(renders.calls)
            await sync_to_async(append)(cid, "user", [text(f"m{n}")])
            got = [await frame(ws) for ws in (a1, a2, a3, a4, b1, b2)]
            assert [article_order(f) for f in got] == [[n]] * 6
            assert len(set(got[:4])) == 1 and len(set(got[4:])) == 1  # the same bytes
            assert got[0] != got[4]  # another view, another rendering
            assert len(renders.calls) - before == 2, renders.calls[before:]  # once per view
        for ws in (a1, b1):
            assert await ws.receive_nothing(QUIET)


@in_loop
async def test_a_busy_socket_catches_up_on_its_own_in_order(operator: Client) -> None:
    conversation = await sync_to_async(create)()
    cid = conversation.id
    async with socket(conversation_path(cid), operator) as free:
        (free_consumer,) = sockets_here(cid)
        async with socket(conversation_path(cid), operator) as busy:
            (busy_consumer,) = [s for s in sockets_here(cid) if s is not free_consumer]
            await busy_consumer.lock.acquire()  # busy: a resume, a resync under way
            try:
                for n in range(3):
                    await sync_to_async(append)(cid, "user", [text(f"m{n}")])
                    assert article_order(await frame(free)) == [n]  # the others go on
                assert await busy.receive_nothing(QUIET)
            finally:
                busy_consumer.lock.release()
            # Then what it missed, once, in order (in one frame: one rendering of the three).
            assert article_order(await frame(busy)) == [0, 1, 2]
            assert await busy.receive_nothing(QUIET)
            await sync_to_async(append)(cid, "user", [text("m3")])
            assert article_order(await frame(busy)) == [3]  # back with the others
            assert article_order(await frame(free)) == [3]
            assert free_consumer.window.held == busy_consumer.window.held


@in_loop
async def test_changes_that_come_during_a_delivery_go_out_together_after_it(
    operator: Client, monkeypatch: Any
) -> None:
    conversation = await sync_to_async(create)()
    cid = conversation.id
    renders = CountedRenders(monkeypatch, held=1)
    renders.gate = threading.Event()
    async with socket(conversation_path(cid), operator) as ws:
        await sync_to_async(append)(cid, "user", [text("first")])
        for _ in range(100):  # the leading edge: the first change is being rendered at once
            if renders.calls:
                break
            await asyncio.sleep(0.02)
        assert renders.calls == [((0,), True, "openai", ())]
        for n in range(1, 4):
            # In a thread of its own: the held rendering keeps the one for sync code busy.
            await sync_to_async(append_elsewhere, thread_sensitive=False)(cid, f"m{n}")
        await asyncio.sleep(0.2)
        assert len(renders.calls) == 1  # the rest wait for the delivery under way
        renders.gate.set()
        assert article_order(await frame(ws)) == [0]
        assert article_order(await frame(ws)) == [1, 2, 3]  # together, one rendering
        assert renders.calls[1] == ((1, 2, 3), True, "openai", ())
        assert await ws.receive_nothing(QUIET)


# -- one state of the record per frame ----------------------------------------------------------

TOTALS_OF = re.compile(r'id="totals" data-messages="(\d+)" data-blocks="(\d+)"')
PRESSURE_OF = re.compile(r'id="pressure" class="pressure" data-messages="(\d+)" data-blocks="(\d+)')
BLOCKS_OF = re.compile(r'<article id="m-(\d+)"[^>]*? data-blocks="(\d+)"')


def test_a_frame_raced_by_an_append_names_one_state_in_its_totals_and_pressure(
    transactional_db: None, monkeypatch: Any
) -> None:
    conversation = create()
    append(conversation.id, "user", [text("first")])
    read = selectors.block_total
    raced: list[int] = []

    def block_total_raced(c: Any) -> int:
        total = read(c)
        if not raced:  # an agent appends between the frame's reads, once
            raced.append(append(conversation.id, "assistant", [text("meanwhile")]))
        return total

    monkeypatch.setattr(selectors, "block_total", block_total_raced)
    html = fragments.messages_frame(str(conversation.id), [0], True, "openai").html
    assert raced == [1]
    totals, pressure = TOTALS_OF.search(html), PRESSURE_OF.search(html)
    assert totals is not None and pressure is not None
    # One state: the stored figures are read as of the conversation's row, so both may name
    # the state before the raced append (its own event brings the next frame), never a mix.
    assert totals.groups() == pressure.groups()
    assert totals.groups() in {("1", "1"), ("2", "2")}


def test_a_frames_totals_are_never_older_than_its_messages(
    transactional_db: None, monkeypatch: Any
) -> None:
    conversation = create()
    append(conversation.id, "user", [text("first")])
    read = selectors.preview_rows
    raced: list[bool] = []

    def preview_rows_raced(c: Any, seqs: Any) -> Any:
        if not raced:  # a block lands just before the frame reads its messages
            raced.append(True)
            add_block(conversation.id, 0, text("second"))
        return read(c, seqs)

    monkeypatch.setattr(selectors, "preview_rows", preview_rows_raced)
    html = fragments.messages_frame(str(conversation.id), [0], True, "openai").html
    (article,) = BLOCKS_OF.findall(html)
    totals = TOTALS_OF.search(html)
    assert article == ("0", "2")
    # A client holding message 0 at 2 blocks skips later frames of it: these totals must
    # count that second block already.
    assert totals is not None and totals.groups() == ("1", "2")


def test_frames_of_one_record_state_render_its_totals_and_pressure_once(
    transactional_db: None, monkeypatch: Any
) -> None:
    """A resync sends each message in a frame of its own, each ending with the same totals
    and pressure: rendered once for that state, and again once the record has moved on."""
    from conversations.dashboard.presenters import pressure as pressure_module

    conversation = create()
    for n in range(3):
        append(conversation.id, "user", [text(f"message {n}")])
    view, calls = pressure_module.pressure_view, []

    def pressure_view(*args: Any) -> Any:
        calls.append(args)
        return view(*args)

    monkeypatch.setattr(fragments, "pressure_view", pressure_view)
    cid = str(conversation.id)
    html = [fragments.messages_frame(cid, [seq], True, "openai").html for seq in range(3)]
    assert len(calls) == 1
    tail = html[0][html[0].index('<p class="totals"') :]
    assert 'data-messages="3"' in tail and all(frame.endswith(tail) for frame in html)
    append(conversation.id, "user", [text("message 3")])
    later = fragments.messages_frame(cid, [3], True, "openai").html
    assert len(calls) == 2 and 'data-messages="4"' in later[later.index('<p class="totals"') :]
