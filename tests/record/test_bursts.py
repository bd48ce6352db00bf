"""Coalescing only while behind (docs/contract.md §4, Live delivery): the outbox sends an add
at once (the leading edge); adds of one conversation that queue while an earlier send is
under way go out together as one `conversation.changed` naming where each message now
ends; no timer holds anything. Order is kept: what queued before another event of the
conversation goes out before it.

The merging itself (`conversations.core.bursts.Positions`) is tested pure in
tests/core/test_socket_state.py; these drive the outbox end to end through the services and a
real channel layer, with a send held open to put the outbox behind.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from conversations.record import events
from conversations.record.services.appending import block_append
from conversations.record.services.conversations import conversation_create, conversation_delete
from tests.record.test_events import Member, append, fresh_channel_layer, text

__all__ = ["fresh_channel_layer"]  # the layer of each test, from test_events

pytestmark = pytest.mark.django_db(transaction=True)


class HeldSend:
    """`events._send`, with the first send held open until `release()`: the outbox is
    behind meanwhile, as it is behind a slow channel layer."""

    def __init__(self, monkeypatch: Any, fail: str = "") -> None:
        self.send = events._send
        self.fail = fail  # an event type the layer refuses
        self.calls: list[dict[str, Any]] = []
        self.gate: asyncio.Event | None = None
        monkeypatch.setattr(events, "_send", self)

    async def __call__(self, groups: list[str], message: dict[str, Any]) -> None:
        self.calls.append(message)
        if len(self.calls) == 1:
            assert self.gate is not None
            await self.gate.wait()
        if message["type"] == self.fail:
            raise TimeoutError
        await self.send(groups, message)

    def release(self) -> None:
        assert self.gate is not None
        self.gate.set()


def test_the_first_add_goes_at_once_and_what_queued_behind_it_goes_as_one_event(
    monkeypatch: Any,
) -> None:
    conversation = conversation_create(title="Behind")
    cid = str(conversation.id)
    held = HeldSend(monkeypatch)

    async def body() -> None:
        held.gate = asyncio.Event()
        page = await Member.join(events.conversation_group(cid))
        everything = await Member.join(events.LIST_GROUP)
        first = await sync_to_async(append)(conversation, "0")
        await asyncio.sleep(0.1)
        # The leading edge: the first add is being sent already, as it is.
        assert [c["type"] for c in held.calls] == ["conversation.message_added"]

        def more() -> None:
            block_append(message=first, block=text("0.1"))
            for n in range(1, 6):
                append(conversation, f"{n}", f"{n}.1")

        await sync_to_async(more)()
        await asyncio.sleep(0.1)
        assert len(held.calls) == 1, "nothing else is sent while the first send is under way"
        held.release()
        told = [await page.next(), await page.next()]
        assert (told[0]["type"], told[0]["message_seq"], told[0]["block_count"]) == (
            "conversation.message_added",
            0,
            1,
        )
        assert told[1] == {
            "type": "conversation.changed",
            "conversation_id": cid,
            "positions": [[0, 2]] + [[n, 2] for n in range(1, 6)],
        }
        assert await page.nothing()
        assert [await everything.next(), await everything.next()] == told
        # Caught up: the next add goes at once and alone, no window to wait out.
        started = time.monotonic()
        await sync_to_async(append)(conversation, "6")
        alone = await page.next()
        assert (alone["type"], alone["message_seq"]) == ("conversation.message_added", 6)
        assert time.monotonic() - started < 1.0

    async_to_sync(body)()


def test_what_queued_goes_out_before_the_conversations_deletion(monkeypatch: Any) -> None:
    conversation = conversation_create(title="Deleted while behind")
    cid = str(conversation.id)
    held = HeldSend(monkeypatch)

    async def body() -> None:
        held.gate = asyncio.Event()
        page = await Member.join(events.conversation_group(cid))

        def adds_then_delete() -> None:
            for n in range(4):
                append(conversation, f"{n}")
            conversation_delete(conversation=conversation)

        await sync_to_async(adds_then_delete)()
        held.release()
        told = [await page.next() for _ in range(3)]
        assert [e["type"] for e in told] == [
            "conversation.message_added",
            "conversation.changed",
            "conversation.deleted",
        ]
        assert told[1]["positions"] == [[1, 1], [2, 1], [3, 1]]
        assert await page.nothing()

    async_to_sync(body)()


def test_a_layer_failing_a_coalesced_change_does_not_lose_the_event_behind_it(
    monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    conversation = conversation_create(title="Failing layer")
    cid = str(conversation.id)
    held = HeldSend(monkeypatch, fail="conversation.changed")

    async def body() -> None:
        held.gate = asyncio.Event()
        page = await Member.join(events.conversation_group(cid))

        def adds_then_delete() -> None:
            for n in range(3):
                append(conversation, f"{n}")
            conversation_delete(conversation=conversation)

        await sync_to_async(adds_then_delete)()
        held.release()
        told = [await page.next(), await page.next()]
        assert [e["type"] for e in told] == ["conversation.message_added", "conversation.deleted"]

    async_to_sync(body)()
    assert "could not publish conversation.changed" in caplog.text
