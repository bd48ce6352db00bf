"""A number too large for a field, or written in digits that are not ASCII, is a 400 naming
the field (docs/contract.md §3), never a 500: every number a request carries."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from conversations.sharing.models import ShareLink
from conversations.sharing.services import share_create
from tests.builders import make_user
from tests.sharing.test_share import conversation_with

HUGE = "99999999999999999999999"
# Digits str.isdigit() accepts that int() refuses (superscripts), and ones it reads.
NOT_ASCII = ("\u00b2", "\u0663")


@pytest.fixture
def staff(db: None) -> Client:
    user = make_user("staff")
    for codename in ("share_conversation", "add_conversation", "change_conversation", "add_note"):
        user.user_permissions.add(
            Permission.objects.get(codename=codename, content_type__app_label="conversations")
        )
    client = Client()
    client.force_login(user)
    return client


QUERIES = [
    ("/c/{id}/", "from_seq"),
    ("/c/{id}/", "upto"),
    ("/c/{id}/", "window"),
    ("/c/{id}/", "keep"),
    ("/c/{id}/", "trigger"),
    ("/c/{id}/messages", "before"),
    ("/c/{id}/messages", "after"),
    ("/c/{id}/context", "upto"),
    ("/c/{id}/context", "window"),
    ("/c/{id}/context", "from"),
    ("/c/{id}/context", "keep"),
    ("/c/{id}/context?blocks_from=0", "blocks_of"),
    ("/c/{id}/context?blocks_of=0", "blocks_from"),
    ("/c/{id}/diff", "upto"),
    ("/c/{id}/find", "after"),
    ("/c/{id}/m/0/blocks", "from"),
    ("/s/{share}/c/{id}/m/0/blocks", "from"),
    ("/s/{share}/", "upto"),
    ("/", "page"),
    ("/compare/?a={id}&b={id}", "page"),
    ("/api/conversations", "page"),
    ("/api/conversations", "page_size"),
    ("/api/conversations/{id}", "from_seq"),
    ("/api/conversations/{id}", "limit"),
    ("/api/conversations/{id}/context", "upto"),
    ("/api/conversations/{id}/context", "window"),
    ("/api/conversations/{id}/context", "keep"),
    ("/api/conversations/{id}/context", "trigger"),
    ("/api/conversations/{id}/replay", "upto"),
    ("/api/conversations/{id}/notes", "after"),
    ("/api/compare?a={id}&b={id}", "page"),
]


@pytest.mark.parametrize("value", [HUGE, *NOT_ASCII])
@pytest.mark.parametrize(("url", "name"), QUERIES)
def test_a_huge_number_in_a_query_is_never_a_500(
    staff: Client, token: str, url: str, name: str, value: str
) -> None:
    conversation = conversation_with(3)
    _, clear = share_create(conversation=conversation)
    where = url.format(id=conversation.id, share=clear)
    joiner = "&" if "?" in where else "?"
    extra = "&compact=window" if name in ("keep", "trigger") else ""
    response = staff.get(
        f"{where}{joiner}{name}={value}{extra}", headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code < 500, response.content[:300]


PATHS = [
    "/c/{id}/m/{n}/b/0/text",
    "/c/{id}/m/0/b/{n}/image",
    "/c/{id}/m/{n}/wire",
    "/c/{id}/m/{n}/blocks?from=1",
    "/s/{share}/c/{id}/m/{n}/blocks?from=1",
    "/s/{share}/c/{id}/m/{n}/wire",
    "/c/{id}/notes/{n}",
    "/api/conversations/{id}/messages/{n}/blocks",
    "/api/shares/{n}",
    "/api/alert-rules/{n}",
]


@pytest.mark.parametrize("url", PATHS)
def test_a_huge_number_in_a_path_is_a_404(staff: Client, token: str, url: str) -> None:
    conversation = conversation_with(3)
    _, clear = share_create(conversation=conversation)
    response = staff.get(
        url.format(id=conversation.id, n=HUGE, share=clear),
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code in (404, 405), response.content[:300]


@pytest.mark.parametrize("value", [HUGE, *NOT_ASCII])
@pytest.mark.parametrize("name", ["expires_in", "up_to_seq"])
def test_the_share_form_names_a_huge_number(staff: Client, name: str, value: str) -> None:
    conversation = conversation_with(2)
    response = staff.post(
        f"/c/{conversation.id}/shares", {name: value}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 200, response.content[:300]
    html = response.content.decode()
    named = {
        "expires_in": ("1 hour to 30 days", "Expires must"),
        "up_to_seq": ("up_to_seq", "Up to"),
    }
    assert named[name][value != HUGE] in html
    assert not ShareLink.objects.exists()


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/api/conversations/{id}/shares", {"expires_in": int(HUGE)}, "expires_in"),
        ("/api/conversations/{id}/shares", {"up_to_seq": int(HUGE)}, "up_to_seq"),
        ("/api/conversations/{id}/shares", {"expires_in": 1e400}, "expires_in"),
        ("/api/conversations/{id}/messages/0/notes", {"text": "x", "block": int(HUGE)}, "block"),
        ("/api/conversations/{id}/messages/{n}/notes", {"text": "x"}, None),
        ("/api/alert-rules", {"kind": "context", "threshold_percent": int(HUGE)}, "threshold"),
        ("/api/alert-rules", {"kind": "silence", "after_seconds": int(HUGE)}, "after_seconds"),
    ],
)
def test_a_huge_number_in_an_api_body_is_a_400_naming_the_field(
    api: Any, url: str, body: dict[str, Any], field: str | None
) -> None:
    conversation = conversation_with(2)
    raw = json_text(body)
    response = api.post(url.format(id=conversation.id, n=HUGE), raw)
    assert response.status_code in (400, 404), response.content[:300]
    if field is not None:
        assert response.status_code == 400 and field in response.json()["error"]


def json_text(body: dict[str, Any]) -> str:
    """JSON with numbers as written (orjson refuses integers past 64 bits and infinities)."""
    import json

    return json.dumps(body).replace("Infinity", "1e400")


@pytest.mark.parametrize("value", [HUGE, *NOT_ASCII])
def test_the_window_form_names_a_huge_number(staff: Client, value: str) -> None:
    conversation = conversation_with(1)
    response = staff.post(f"/c/{conversation.id}/window", {"context_window": value})
    assert response.status_code == 400
    assert "window" in response.content.decode()


@pytest.mark.parametrize("value", [HUGE, *NOT_ASCII])
def test_the_note_form_names_a_huge_block(staff: Client, value: str) -> None:
    conversation = conversation_with(1)
    response = staff.post(
        f"/c/{conversation.id}/m/0/notes",
        {"text": "x", "block": value},
        headers={"HX-Request": "true"},
    )
    assert response.status_code < 500
    assert "block" in response.content.decode()
