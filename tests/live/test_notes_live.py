"""Notes live (docs/contract.md §10): a note added, edited or deleted reaches every open page of
its conversation as the message's `notes` partial, through the real ASGI application, and
equals what a fresh page load shows; the list's rows and share links' pages follow."""

from __future__ import annotations

import re
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User

from conversations.dashboard import socket_urls
from conversations.record.models.conversation import Conversation
from conversations.record.models.notes import Note
from conversations.record.notes.services import note_add, note_delete, note_edit
from tests.builders import make_user, text
from tests.live.test_consumers import (
    QUIET,
    TOGGLES,
    add_block,
    append,
    articles,
    conversation_path,
    create,
    detail_page,
    frame,
    in_loop,
    rows,
    signed_in,
    socket,
)
from tests.sharing.test_share_consumers import make_share, share_page, share_path, share_socket

pytestmark = pytest.mark.django_db(transaction=True)

NOTES = re.compile(r'<div class="notes" id="notes-(\d+)".*?</ul>', re.S)
HOSTILE = '<script>alert(1)</script><b hx-get="/x" hx-trigger="load">bold</b>'


@pytest.fixture(autouse=True)
def plain_static_storage(settings: Any) -> None:
    settings.STORAGES = settings.STORAGES | {
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}
    }


def notes_of(html: str) -> dict[int, str]:
    """Message seq → its notes list, as printed (the add form below it is the page's own)."""
    return {int(m.group(1)): m.group(0) for m in NOTES.finditer(html)}


def add(conversation_id: Any, seq: int, user: User, note_text: str, **extra: Any) -> Note:
    return note_add(
        conversation=Conversation.objects.get(pk=conversation_id),
        message_seq=seq,
        text=note_text,
        user=user,
        **extra,
    )


@pytest.fixture
def writer(transactional_db: None) -> User:
    return make_user("writer")


@in_loop
async def test_a_note_reaches_every_open_page_as_a_fresh_load_shows_it(writer: User) -> None:
    client = await sync_to_async(signed_in)(writer)
    conversation = await sync_to_async(create)("Noted")
    cid = conversation.id
    await sync_to_async(append)(cid, "user", [text("hello")])
    await sync_to_async(append)(cid, "assistant", [text("hi"), text("there")])
    async with (
        socket(conversation_path(cid, *TOGGLES[0]), client) as ws0,
        socket(conversation_path(cid, *TOGGLES[3]), client) as ws1,
    ):
        note = await sync_to_async(add)(cid, 1, writer, HOSTILE, labels=["bug"], block_seq=1)
        for ws, (vision, shape) in ((ws0, TOGGLES[0]), (ws1, TOGGLES[3])):
            pushed = await frame(ws)
            assert pushed.lstrip().startswith('<div class="notes" id="notes-1"')
            fresh = await sync_to_async(detail_page)(client, cid, vision, shape)
            assert notes_of(pushed)[1] == notes_of(fresh)[1]
            assert "<script>alert" not in pushed and "<b hx-get" not in pushed
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pushed
            assert f'data-user="{writer.pk}"' in pushed and "block 1" in pushed
        await sync_to_async(note_edit)(note=note, text="edited text")
        for ws in (ws0, ws1):
            assert "edited text" in await frame(ws)
        await sync_to_async(note_delete)(note=note)
        for ws in (ws0, ws1):
            emptied = await frame(ws)
            assert notes_of(emptied)[1].endswith('<ul class="note-list"></ul>')
            assert await ws.receive_nothing(QUIET)


@in_loop
async def test_a_message_frame_after_a_note_carries_it(writer: User) -> None:
    """The message frames rendered before the note (cached for other sockets) are not
    reused after it: a page that catches up on the message gets it with its note."""
    client = await sync_to_async(signed_in)(writer)
    conversation = await sync_to_async(create)("Grows")
    cid = conversation.id
    await sync_to_async(append)(cid, "user", [text("one")])
    async with socket(conversation_path(cid), client) as ws:
        await sync_to_async(add_block)(cid, 0, text("two"))
        assert "noted" not in articles(await frame(ws))[0]  # rendered, and cached
        await sync_to_async(add)(cid, 0, writer, "noted after it grew")
        assert "noted after it grew" in await frame(ws)
        async with socket(conversation_path(cid), client) as late:
            # A page that holds the message with one block catches up on it.
            await late.send_to(
                text_data='{"type": "resume", "from": 0, "counts": [1], "tail": true}'
            )
            pushed = articles(await frame(late))[0]
            assert "noted after it grew" in pushed
            fresh = await sync_to_async(detail_page)(client, cid, True, "openai")
            assert pushed == articles(fresh)[0]


@in_loop
async def test_the_list_row_shows_a_new_label_live(writer: User) -> None:
    client = await sync_to_async(signed_in)(writer)
    conversation = await sync_to_async(create)("Listed")
    await sync_to_async(append)(conversation.id, "user", [text("one")])
    async with socket(socket_urls.list_socket_url(), client) as ws:
        await sync_to_async(add)(conversation.id, 0, writer, "x", labels=["needs-review"])
        row = rows(await frame(ws))[str(conversation.id)]
        assert "needs-review" in row


@in_loop
async def test_share_pages_get_notes_only_from_links_made_with_notes(writer: User) -> None:
    conversation = await sync_to_async(create)("Shared")
    cid = conversation.id
    await sync_to_async(append)(cid, "user", [text("one")])
    _, with_notes = await sync_to_async(make_share)(cid, notes=True)
    _, without = await sync_to_async(make_share)(cid)
    async with (
        share_socket(share_path(with_notes)) as shown,
        share_socket(share_path(without)) as hidden,
    ):
        await sync_to_async(add)(cid, 0, writer, "for the share")
        pushed = await shown.receive_from(timeout=5)
        assert "for the share" in pushed
        assert "note-edit" not in pushed and "hx-post" not in pushed and "note-add" not in pushed
        assert notes_of(pushed)[0] == notes_of(await sync_to_async(share_page)(with_notes))[0]
        assert await hidden.receive_nothing(QUIET)
        await sync_to_async(add_block)(cid, 0, text("two"))
        assert "for the share" not in await hidden.receive_from(timeout=5)
        assert "for the share" in await shown.receive_from(timeout=5)


@in_loop
async def test_a_note_elsewhere_reaches_nobody_here(writer: User) -> None:
    client = await sync_to_async(signed_in)(writer)
    watched, other = await sync_to_async(create)("Watched"), await sync_to_async(create)("Other")
    await sync_to_async(append)(other.id, "user", [text("one")])
    async with socket(conversation_path(watched.id), client) as ws:
        await sync_to_async(add)(other.id, 0, writer, "not yours")
        assert await ws.receive_nothing(QUIET)
