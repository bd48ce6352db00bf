"""Notes on a message of 400,000 blocks (docs/contract.md §4 Bounds, §10): the page stays
within 2 MB with a note form that still names any block (a number field, checked by the
server), and a note's live frame stays within 256 KB and reaches an open page's real socket
through daphne."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User

from conversations.record.models.conversation import Conversation
from conversations.record.models.notes import Note
from conversations.record.schemas import TextIn
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_create
from tests.conftest import Server
from tests.live.test_live_e2e import open_socket, operator_cookie
from tests.record.notes.test_notes import client_of, grant

BLOCKS = 400_000
PAGE_BYTES = 2 * 1024 * 1024  # docs/contract.md §4 Bounds
FRAME_BYTES = 256 * 1024
FORM = re.compile(r'<form class="note-form" method="post" action="([^"]+)".*?</form>', re.S)
BLOCK_FIELD = re.compile(r'<input type="number" name="block" min="0" max="(\d+)"')


def huge_message() -> Conversation:
    """One conversation: a message of BLOCKS short text blocks, stored through the service
    (its inserts are bounded, docs/contract.md §4). The blocks are built unvalidated: they
    are valid, and validating 400,000 of them is not what this tests."""
    conversation = conversation_create(title="Huge")
    blocks = [TextIn.model_construct(type="text", text=f"b{i}") for i in range(BLOCKS)]
    message_append(conversation=conversation, role="assistant", blocks=blocks)
    return conversation


@pytest.fixture
def watcher(daphne: Server, transactional_db: None) -> Iterator[tuple[Conversation, Any]]:
    """The huge conversation and a real socket on its page, as a signed-in operator's."""
    huge = huge_message()
    url = daphne.url.replace("http://", "ws://", 1) + f"/ws/conversations/{huge.pk}/"
    ws = open_socket(url, {"Cookie": f"sessionid={operator_cookie()}", "Origin": daphne.url})
    yield huge, ws
    ws.close()


@pytest.mark.live
def test_a_message_of_400000_blocks_keeps_its_page_and_its_notes_frame_small(
    daphne: Server, token: str, operator: User, watcher: tuple[Conversation, Any]
) -> None:
    """One test, for the record takes most of a minute to store on a loaded machine."""
    huge, ws = watcher
    writer = client_of(grant(operator, "add_note"))
    response = writer.get(f"/c/{huge.pk}/")
    assert response.status_code == 200
    assert len(response.content) <= PAGE_BYTES, len(response.content)
    form = FORM.search(response.content.decode())
    assert form is not None
    field = BLOCK_FIELD.search(form.group(0))
    assert field is not None and int(field.group(1)) == BLOCKS - 1

    def post(block: str) -> Any:
        return writer.post(
            form.group(1),
            {"text": "the last one", "labels": "", "block": block},
            headers={"HX-Request": "true"},
        )

    added = post(str(BLOCKS - 1))  # the page's form, as a browser submits it
    assert added.status_code == 200
    assert len(added.content) <= FRAME_BYTES, len(added.content)
    assert f"block {BLOCKS - 1}" in added.content.decode()
    assert Note.objects.get().block_seq == BLOCKS - 1
    for refused in (str(BLOCKS), "-1", "1e3", "x"):  # the server checks what the field limits
        answer = post(refused)
        assert answer.status_code == 400, refused
        assert len(answer.content) <= FRAME_BYTES
    assert Note.objects.count() == 1

    # A note made through the real server reaches the open page's real socket.
    with daphne.client(token) as client:
        answer = client.post(
            f"/api/conversations/{huge.pk}/messages/0/notes",
            json={"text": "seen live", "block": BLOCKS - 1},
        )
    assert answer.status_code == 201, answer.text
    deadline = time.monotonic() + 15
    frame = ""
    while 'id="notes-0"' not in frame:  # recv raises TimeoutError, or ConnectionClosed
        frame = ws.recv(timeout=max(0.01, deadline - time.monotonic()))
        assert isinstance(frame, str)
    assert len(frame.encode()) <= FRAME_BYTES, len(frame.encode())
    assert "seen live" in frame and "the last one" in frame
    field = BLOCK_FIELD.search(frame)
    assert field is not None and int(field.group(1)) == BLOCKS - 1
