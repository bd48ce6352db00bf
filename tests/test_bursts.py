"""Bursts (issue 8 §4): adds to one conversation that come faster than 20 a second are told
as one `conversation.changed` per REPLAY_LIVE_BURST_MS, carrying where every message that
changed now ends; slower adds are told one by one, at once. Order is kept: what a burst
held goes out before any later event of that conversation.

When a burst is held and told is decided by `conversations.core.bursts`, tested on a fake
clock in tests/test_socket_state.py (quiet adds, the bound, a burst after a burst); these
tests drive the outbox end to end through the services and a real channel layer."""

from __future__ import annotations

import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from conversations.core import bursts
from conversations.record import events, services
from tests.test_events import Member, append, fresh_channel_layer, text

__all__ = ["fresh_channel_layer"]  # the layer of each test, from test_events

pytestmark = pytest.mark.django_db(transaction=True)

WINDOW_MS = 1500
GAP = 0.8  # seconds; wide, so that a slow database's appends still make a burst


@pytest.fixture(autouse=True)
def burst_window(settings: Any, monkeypatch: Any) -> None:
    settings.REPLAY_LIVE_BURST_MS = WINDOW_MS
    monkeypatch.setattr(events, "BURST_GAP", GAP)


def test_a_burst_is_told_once_per_window_with_every_position() -> None:
    conversation = services.conversation_create(title="Burst")
    cid = str(conversation.id)

    async def body() -> None:
        page = await Member.join(events.conversation_group(cid))
        everything = await Member.join(events.LIST_GROUP)
        started = time.monotonic()

        def burst() -> None:
            first = append(conversation, "0")
            services.block_append(message=first, block=text("0.1"))
            for n in range(1, 12):
                append(conversation, f"{n}", f"{n}.1")

        await sync_to_async(burst)()
        # The first add is told at once, as any add after a quiet moment is.
        first = await page.next()
        assert first["type"] == "conversation.message_added"
        assert (first["message_seq"], first["block_count"]) == (0, 1)
        # The rest: one event when the window since the first has passed, naming each
        # message's last position in order (message 0 grew to 2 blocks meanwhile).
        held = await page.next(seconds=5)
        waited = time.monotonic() - started
        assert held == {
            "type": "conversation.changed",
            "conversation_id": cid,
            "positions": [[0, 2]] + [[n, 2] for n in range(1, 12)],
        }
        assert waited >= WINDOW_MS / 1000 * 0.9
        assert await page.nothing()
        # The list group is told the same, once.
        assert [await everything.next(), await everything.next()] == [first, held]
        assert await everything.nothing()

    async_to_sync(body)()


def test_what_a_burst_held_goes_out_before_the_conversations_deletion() -> None:
    conversation = services.conversation_create(title="Deleted mid-burst")
    cid = str(conversation.id)

    async def body() -> None:
        page = await Member.join(events.conversation_group(cid))

        def burst_then_delete() -> None:
            for n in range(4):
                append(conversation, f"{n}")
            services.conversation_delete(conversation=conversation)

        await sync_to_async(burst_then_delete)()
        told = [await page.next() for _ in range(3)]
        assert [e["type"] for e in told] == [
            "conversation.message_added",
            "conversation.changed",
            "conversation.deleted",
        ]
        assert told[1]["positions"] == [[1, 1], [2, 1], [3, 1]]
        assert await page.nothing()

    async_to_sync(body)()


def test_a_layer_failing_a_held_burst_does_not_lose_the_event_behind_it(
    monkeypatch: Any,
) -> None:
    conversation = services.conversation_create(title="Failing layer")
    cid = str(conversation.id)
    send = events._send

    async def refusing_bursts(groups: list[str], message: dict[str, Any]) -> None:
        if message["type"] == "conversation.changed":
            raise TimeoutError
        await send(groups, message)

    monkeypatch.setattr(events, "_send", refusing_bursts)

    async def body() -> None:
        page = await Member.join(events.conversation_group(cid))

        def burst_then_delete() -> None:
            for n in range(3):
                append(conversation, f"{n}")
            services.conversation_delete(conversation=conversation)

        await sync_to_async(burst_then_delete)()
        told = [await page.next(), await page.next()]
        assert [e["type"] for e in told] == ["conversation.message_added", "conversation.deleted"]

    async_to_sync(body)()


def test_the_outbox_times_bursts_by_the_settings_and_its_bounds(monkeypatch: Any) -> None:
    monkeypatch.setattr(events, "BURST_POSITIONS", 5)
    assert events._policy() == bursts.Policy(window=WINDOW_MS / 1000, gap=GAP, positions=5)
