"""Share links (docs/contract.md §8, docs/guide/share-links.md): the API, the share site's scope,
revocation and expiry.

Every share endpoint is tried inside and outside its link's scope, and the table at the
bottom lists what a share token reaches and what it must not.
"""

from __future__ import annotations

import hashlib
import math
import re
from datetime import timedelta
from typing import Any

import orjson
import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from conversations.record.models.conversation import Conversation
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.services.api_tokens import token_digest
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_create
from conversations.sharing.models import ShareLink
from conversations.sharing.services import share_create, share_revoke
from tests.builders import make_user, png, text

pytestmark = pytest.mark.django_db

SHARE_HEADERS = {
    "Referrer-Policy": "no-referrer",
    "X-Robots-Tag": "noindex",
    "Cache-Control": "no-store",
}


def conversation_with(n: int, *, image_at: int | None = None, title: str = "Run") -> Conversation:
    conversation = conversation_create(title=title)
    for seq in range(n):
        blocks = [text(f"message number {seq}")]
        if seq == image_at:
            blocks.append(png())
        message_append(
            conversation=conversation,
            role="user" if seq % 2 == 0 else "assistant",
            blocks=[BLOCK_ADAPTER.validate_python(b) for b in blocks],
        )
    conversation.refresh_from_db()
    return conversation


def share(conversation: Conversation, **options: Any) -> tuple[ShareLink, str]:
    return share_create(conversation=conversation, **options)


def path(token: str, rest: str = "") -> str:
    return f"/s/{token}/{rest}"


def sharer(username: str = "sharer") -> Client:
    user = make_user(username)
    user.user_permissions.add(
        Permission.objects.get(
            codename="share_conversation", content_type__app_label="conversations"
        )
    )
    client = Client()
    client.force_login(user)
    return client


# -- the API -----------------------------------------------------------------------------------


def test_api_creates_a_link_whose_token_is_only_in_the_url(api: Any) -> None:
    conversation = conversation_with(45)
    response = api.post(
        f"/api/conversations/{conversation.id}/shares", {"up_to_seq": 39, "images": False}
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) >= {"id", "url", "expires_at", "up_to_seq", "images", "view_count"}
    assert body["up_to_seq"] == 39 and body["images"] is False and body["vision"] is None
    token = re.fullmatch(r"http://testserver/s/([A-Za-z0-9_-]+)/", body["url"]).group(1)
    expires = ShareLink.objects.get().expires_at
    # Default: 7 days.
    assert abs((expires - timezone.now()) - timedelta(days=7)) < timedelta(minutes=1)
    listed = api.get(f"/api/conversations/{conversation.id}/shares").json()["results"]
    assert [link["id"] for link in listed] == [body["id"]]
    assert token not in orjson.dumps(listed).decode()
    assert "url" not in listed[0]
    assert Client().get(path(token)).status_code == 200


def test_the_done_criterion_first_40_messages_expiring_friday(api: Any) -> None:
    # "An operator can send a stakeholder without an account a link to the first 40
    # messages of a run that expires Friday."
    conversation = conversation_with(60)
    now = timezone.now()
    friday = (now + timedelta(days=(4 - now.weekday()) % 7 or 7)).replace(hour=17, minute=0)
    seconds = math.ceil((friday - now).total_seconds())
    body = api.post(
        f"/api/conversations/{conversation.id}/shares",
        {"up_to_seq": 39, "expires_in": seconds},
    ).json()
    stakeholder = Client()  # no account, no session
    html = stakeholder.get(body["url"]).content.decode()
    seqs = [int(s) for s in re.findall(r'<article id="m-(\d+)"', html)]
    assert seqs == list(range(40))
    assert "message number 39" in html and "message number 40" not in html
    assert friday.strftime("%Y-%m-%d") in html
    payload = orjson.loads(stakeholder.get(path(body["url"].split("/")[-2], "replay.json")).content)
    assert len(payload["messages"]) == 40


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"up_to_seq": 5}, "up_to_seq"),
        ({"up_to_seq": -1}, "up_to_seq"),
        ({"expires_in": 0}, "expires_in"),
        ({"expires_in": 30 * 86400 + 1}, "expires_in"),
        ({"expires_in": "1h"}, "expires_in"),
        ({"shape": "gemini"}, "shape"),
        ({"vision": True, "images": False}, "images"),
        ({"token": "mine"}, "token"),
    ],
)
def test_api_refuses_bad_scopes_naming_the_field(
    api: Any, body: dict[str, Any], field: str
) -> None:
    conversation = conversation_with(3)
    response = api.post(f"/api/conversations/{conversation.id}/shares", body)
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]
    assert not ShareLink.objects.exists()


def test_api_refuses_an_idempotency_key_so_no_token_is_ever_stored(api: Any) -> None:
    conversation = conversation_with(1)
    response = api.post(
        f"/api/conversations/{conversation.id}/shares", {}, headers={"Idempotency-Key": "k1"}
    )
    assert response.status_code == 400 and response.json()["field"] == "Idempotency-Key"
    assert not ShareLink.objects.exists()


def test_api_expiry_null_means_none_and_30_days_is_allowed(api: Any) -> None:
    conversation = conversation_with(1)
    never = api.post(f"/api/conversations/{conversation.id}/shares", {"expires_in": None})
    longest = api.post(f"/api/conversations/{conversation.id}/shares", {"expires_in": 30 * 86400})
    assert never.status_code == 201 and never.json()["expires_at"] is None
    assert longest.status_code == 201


def test_api_revokes_with_delete(api: Any) -> None:
    conversation = conversation_with(2)
    link, token = share(conversation)
    response = api.client.delete(
        f"/api/shares/{link.pk}", headers={"Authorization": f"Bearer {api.token}"}
    )
    assert response.status_code == 204
    assert Client().get(path(token)).status_code == 410
    again = api.client.delete(
        f"/api/shares/{link.pk}", headers={"Authorization": f"Bearer {api.token}"}
    )
    assert again.status_code == 204  # revoking twice changes nothing
    missing = api.client.delete(
        "/api/shares/999999", headers={"Authorization": f"Bearer {api.token}"}
    )
    assert missing.status_code == 404


def test_api_shares_need_a_token(anonymous_api: Any, operator_client: Client) -> None:
    conversation = conversation_with(1)
    link, _ = share(conversation)
    url = f"/api/conversations/{conversation.id}/shares"
    assert anonymous_api.post(url, {}).status_code == 401
    assert anonymous_api.get(url).status_code == 401
    assert anonymous_api.client.delete(f"/api/shares/{link.pk}").status_code == 401
    # A session is not an API credential (docs/contract.md §3).
    assert operator_client.get(url).status_code == 401
    assert operator_client.delete(f"/api/shares/{link.pk}").status_code == 401
    assert ShareLink.objects.get().revoked_at is None


def test_api_unknown_conversation_is_404(api: Any) -> None:
    response = api.post("/api/conversations/00000000-0000-0000-0000-000000000000/shares", {})
    assert response.status_code == 404


# -- tokens --------------------------------------------------------------------------------


def test_tokens_carry_256_random_bits_and_only_their_digest_is_stored() -> None:
    conversation = conversation_with(1)
    tokens = [share(conversation)[1] for _ in range(20)]
    assert len(set(tokens)) == 20
    for token in tokens:
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", token)  # 32 bytes of secrets.token_urlsafe
        digest = hashlib.sha256(token.encode()).hexdigest()
        assert ShareLink.objects.filter(digest=digest).exists()
    stored = orjson.dumps(list(ShareLink.objects.values())).decode()
    assert not any(token in stored for token in tokens)


def test_a_guessed_or_truncated_token_is_404() -> None:
    conversation = conversation_with(1)
    _, token = share(conversation)
    assert Client().get(path(token[:-1])).status_code == 404
    assert Client().get(path("x" * 43)).status_code == 404
    assert Client().get(path(hashlib.sha256(token.encode()).hexdigest())).status_code == 404


# -- the share page and its scope ---------------------------------------------------------


def test_share_page_shows_record_beside_projection_read_only() -> None:
    conversation = conversation_with(3)
    _, token = share(conversation)
    response = Client().get(path(token))
    html = response.content.decode()
    assert response.status_code == 200
    assert html.count('class="record"') == 3 and html.count('class="projection"') == 3
    assert f'ws-connect="/ws/s/{token}/?vision=1&amp;shape=openai&amp;report=1"' in html
    assert 'id="share-notice"' in html and "(live)" in html
    assert "Share links" not in html and "Sign out" not in html
    # Every URL the page builds stays inside the link.
    for url in re.findall(r'(?:href|src|data-url|hx-get)="(/[^"]*)"', html):
        assert url.startswith((f"/s/{token}/", "/static/")), url


def test_share_page_counts_views() -> None:
    conversation = conversation_with(1)
    link, token = share(conversation)
    client = Client()
    client.get(path(token))
    client.get(path(token))
    client.get(path(token, "replay.json"))  # a download is not a view
    link.refresh_from_db()
    assert link.view_count == 2 and link.last_viewed_at is not None


def test_frozen_link_shows_nothing_past_up_to_seq() -> None:
    conversation = conversation_with(50, image_at=44)
    _, token = share(conversation, up_to_seq=39)
    client = Client()
    html = client.get(path(token)).content.decode()
    assert "ws-connect" not in html and 'data-state="frozen"' in html
    # Nothing about messages past SEQ: no pressure of the whole, no operator tools.
    assert 'id="pressure"' not in html and "context-link" not in html
    assert "40 messages" in html
    assert "message number 40" not in html
    # Windows, payload, images and a deep page past SEQ.
    window = client.get(path(token, f"c/{conversation.id}/messages?before=50&from=0"))
    assert window.status_code == 200 and "message number 40" not in window.content.decode()
    payload = orjson.loads(client.get(path(token, "replay.json")).content)
    assert len(payload["messages"]) == 40
    assert client.get(path(token, f"c/{conversation.id}/m/44/b/1/image")).status_code == 404
    for rest in ["m/44/b/0/text", "m/40/wire", "m/49/wire?vision=0"]:
        assert client.get(path(token, f"c/{conversation.id}/{rest}")).status_code == 404, rest
    assert client.get(path(token, f"c/{conversation.id}/m/39/wire")).status_code == 200
    later = client.get(path(token, f"c/{conversation.id}/messages?after=35")).content.decode()
    assert "message number 39" in later and "message number 40" not in later
    around = client.get(path(token, f"c/{conversation.id}/messages?around=45")).content.decode()
    assert "message number 40" not in around
    # Messages added later are not shown either.
    message_append(
        conversation=conversation, role="user", blocks=[BLOCK_ADAPTER.validate_python(text("late"))]
    )
    assert "late" not in client.get(path(token)).content.decode()


def test_load_the_rest_stays_inside_the_link() -> None:
    conversation = conversation_create(title="Long")
    long = "x" * 70_000 + "THE END"
    message_append(
        conversation=conversation, role="user", blocks=[BLOCK_ADAPTER.validate_python(text(long))]
    )
    _, token = share(conversation)
    client = Client()
    html = client.get(path(token)).content.decode()
    assert "THE END" not in html
    rests = re.findall(r'class="load-rest" data-url="([^"]+)"', html)
    assert rests and all(url.startswith(f"/s/{token}/c/{conversation.id}/m/0/") for url in rests)
    for url in rests:
        rest = client.get(url.replace("&amp;", "&"))
        assert rest.status_code == 200 and rest.content.decode().endswith("THE END")
        assert rest["Referrer-Policy"] == "no-referrer"


def test_images_are_served_only_when_the_link_includes_them() -> None:
    conversation = conversation_with(2, image_at=0)
    image = f"c/{conversation.id}/m/0/b/1/image"
    _, with_images = share(conversation)
    _, without = share(conversation, images=False)
    client = Client()
    served = client.get(path(with_images, image))
    assert served.status_code == 200 and served["Content-Type"] == "image/png"
    assert served["Content-Security-Policy"] == "default-src 'none'; sandbox"
    assert client.get(path(without, image)).status_code == 404
    html = client.get(path(without)).content.decode()
    assert "/image" not in html and "not included in this shared view" in html
    # The projection shown is the one of what is shown: vision off, the image's marker.
    assert "[Image (image/png): not seen — this model cannot view images]" in html
    assert 'data-group="vision"' not in html  # no vision toggles
    payload = client.get(path(without, "replay.json?vision=1")).content.decode()
    assert "base64" not in payload and "not seen" in payload
    wire = client.get(path(without, f"c/{conversation.id}/m/0/wire?vision=1")).content.decode()
    assert "not seen" in wire


def test_fixed_toggles_are_fixed() -> None:
    conversation = conversation_with(2, image_at=0)
    _, token = share(conversation, vision=False, shape="anthropic")
    client = Client()
    html = client.get(path(token, "?vision=1&shape=openai")).content.decode()
    assert 'class="toggles"' in html
    assert 'data-group="vision"' not in html and 'data-group="shape"' not in html
    assert "not seen" in html
    payload = orjson.loads(client.get(path(token, "replay.json?vision=1&shape=openai")).content)
    assert "system" in payload or payload["messages"][0]["content"].endswith("images]")
    assert payload["messages"][0]["content"].endswith("cannot view images]")


def test_free_toggles_follow_the_query_and_bad_ones_are_400() -> None:
    conversation = conversation_with(2, image_at=0)
    _, token = share(conversation)
    client = Client()
    html = client.get(
        path(token, f"c/{conversation.id}/?vision=0&shape=anthropic")
    ).content.decode()
    assert "not seen" in html and 'data-group="vision"' in html
    bad = client.get(path(token, "?shape=<b>x</b>"))
    assert bad.status_code == 400 and "<b>x</b>" not in bad.content.decode()


def test_share_headers_on_every_share_response() -> None:
    conversation = conversation_with(2, image_at=0)
    link, token = share(conversation)
    _, revoked = share(conversation)
    share_revoke(link=ShareLink.objects.get(digest=token_digest(revoked)))
    client = Client()
    for url in [
        path(token),
        path(token, "replay.json"),
        path(token, f"c/{conversation.id}/"),
        path(token, f"c/{conversation.id}/messages?before=1"),
        path(token, f"c/{conversation.id}/m/0/b/1/image"),
        path(token, "admin/"),
        path(token, "?vision=maybe"),
        path(revoked),
        path("unknown-token-unknown-token-unknown-token00"),
    ]:
        response = client.get(url)
        for name, value in SHARE_HEADERS.items():
            assert response[name] == value, (url, name)
        if response["Content-Type"].startswith("text/html"):
            assert "script-src 'self'" in response["Content-Security-Policy"], url


def test_share_site_is_read_only() -> None:
    conversation = conversation_with(1)
    _, token = share(conversation)
    for rest in ["", "replay.json", f"c/{conversation.id}/"]:
        response = Client().post(path(token, rest))
        assert response.status_code == 405 and response["Referrer-Policy"] == "no-referrer"


def test_expired_link_is_410_on_the_next_request() -> None:
    conversation = conversation_with(1)
    link, token = share(conversation, expires_in=timedelta(hours=1))
    client = Client()
    assert client.get(path(token)).status_code == 200
    ShareLink.objects.filter(pk=link.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    for rest in ["", "replay.json", f"c/{conversation.id}/messages?before=1"]:
        gone = client.get(path(token, rest))
        assert gone.status_code == 410
        assert "expired" in gone.content.decode()


def test_revoked_link_is_410_on_the_next_request() -> None:
    conversation = conversation_with(1)
    link, token = share(conversation)
    share_revoke(link=link)
    gone = Client().get(path(token))
    assert gone.status_code == 410 and "revoked" in gone.content.decode()
    assert "<script" not in gone.content.decode()


def test_deleting_the_conversation_deletes_its_links() -> None:
    conversation = conversation_with(1)
    _, token = share(conversation)
    Conversation.objects.filter(pk=conversation.pk).delete()
    assert not ShareLink.objects.exists()
    assert Client().get(path(token)).status_code == 404


def test_sharing_off_turns_off_pages_api_and_form(settings: Any, api: Any) -> None:
    conversation = conversation_with(1)
    link, token = share(conversation)
    settings.REPLAY_SHARING = False
    assert Client().get(path(token)).status_code == 404
    assert Client().get(path(token, "replay.json")).status_code == 404
    assert api.post(f"/api/conversations/{conversation.id}/shares", {}).status_code == 404
    assert api.get(f"/api/conversations/{conversation.id}/shares").status_code == 404
    client = sharer()
    assert "Share links" not in client.get(f"/c/{conversation.id}/").content.decode()
    assert client.post(f"/c/{conversation.id}/shares", {"expires_in": "3600"}).status_code == 404


# -- the dashboard's form and list -------------------------------------------------------------


def test_form_needs_share_permission(operator_client: Client, outsider_client: Client) -> None:
    conversation = conversation_with(1)
    assert "Share links" not in operator_client.get(f"/c/{conversation.id}/").content.decode()
    url = f"/c/{conversation.id}/shares"
    assert operator_client.post(url, {"expires_in": "3600"}).status_code == 403
    assert outsider_client.post(url, {"expires_in": "3600"}).status_code == 403
    anonymous = Client().post(url, {"expires_in": "3600"})
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    assert not ShareLink.objects.exists()


def test_form_creates_shows_the_url_once_lists_and_revokes() -> None:
    conversation = conversation_with(45)
    client = sharer()
    page = client.get(f"/c/{conversation.id}/").content.decode()
    assert "Share links" in page and 'name="up_to_seq"' in page
    friday = (timezone.now() + timedelta(days=3)).strftime("%Y-%m-%dT17:00")
    response = client.post(
        f"/c/{conversation.id}/shares",
        {"up_to_seq": "39", "expires_in": "604800", "expires_at": friday, "images": "1"},
        headers={"HX-Request": "true"},
    )
    html = response.content.decode()
    assert response.status_code == 200
    url = re.search(r'id="new-share-url" value="([^"]+)"', html).group(1)
    token = url.rstrip("/").split("/")[-1]
    link = ShareLink.objects.get()
    assert link.up_to_seq == 39 and link.expires_at.strftime("%Y-%m-%dT%H:%M") == friday
    assert link.created_by is not None
    assert "frozen, #0 to #39" in html
    # Shown once: the page afterwards lists the link without its token.
    again = client.get(f"/c/{conversation.id}/").content.decode()
    assert token not in again and "frozen, #0 to #39" in again
    assert Client().get(path(token)).status_code == 200
    revoked = client.post(
        f"/c/{conversation.id}/shares/{link.pk}/revoke", headers={"HX-Request": "true"}
    )
    assert revoked.status_code == 200 and 'data-state="revoked"' in revoked.content.decode()
    assert Client().get(path(token)).status_code == 410


@pytest.mark.parametrize(
    ("form", "error"),
    [
        ({"up_to_seq": "x"}, "Up to message"),
        ({"up_to_seq": "99"}, "up_to_seq"),
        ({"expires_at": "2020-01-01T00:00"}, "1 hour to 30 days"),
        ({"expires_in": "60"}, "1 hour to 30 days"),
        ({"expires_at": "<script>"}, "date and time"),
        ({"vision": "maybe"}, "Vision and shape"),
    ],
)
def test_form_errors_are_named_and_nothing_is_stored(form: dict[str, str], error: str) -> None:
    conversation = conversation_with(2)
    response = sharer().post(f"/c/{conversation.id}/shares", form, headers={"HX-Request": "true"})
    html = response.content.decode()
    assert error in html and "<script>" not in html
    assert not ShareLink.objects.exists()


def test_revoking_another_conversations_link_is_404() -> None:
    one, other = conversation_with(1), conversation_with(1)
    link, token = share(other)
    response = sharer().post(f"/c/{one.id}/shares/{link.pk}/revoke")
    assert response.status_code == 404
    assert Client().get(path(token)).status_code == 200


# -- what a share token reaches, and what it must not --------------------------------------

REACHABLE = [
    "",
    "?vision=0&shape=anthropic",
    "replay.json",
    "c/{id}/",
    "c/{id}/messages?before=2",
    "c/{id}/replay.json",
    "c/{id}/m/0/b/1/image",
    "c/{id}/m/0/b/0/text",  # "load the rest" of a block
    "c/{id}/m/1/wire",  # … and of a projection
    "c/{id}/m/1/projection.json",  # "Copy projection"
    "c/{id}/m/0/blocks?from=0",  # "Load more blocks" of a message
    "c/{id}/messages?around=1",
    "c/{id}/messages?after=0",
    "c/{id}/find?kind=problem",  # the finder: n / N, filters' "find more", tool rounds
    "c/{id}/find?kind=text&q=message&after=0",  # … and search within the conversation
]
NOT_REACHABLE = [
    "c/{other}/",  # another conversation, by path under this link
    "c/{other}/messages?before=1",
    "c/{other}/replay.json",
    "c/{other}/m/0/b/1/image",  # another conversation's image, by id
    "c/{other}/m/0/b/0/text",
    "c/{other}/m/1/wire",
    "c/{other}/m/1/projection.json",
    "c/{other}/m/0/blocks?from=0",
    "c/{id}/m/1/record.json",  # "Copy record JSON" is the operator's: the whole record
    "c/{other}/find?kind=text&q=message",
    "c/{id}/shares",  # the sharing form
    "c/{id}/context",  # the compaction preview and the diff are the operator's tools
    "c/{id}/diff",
    "admin/",
    "api/conversations",
    "api/conversations/{id}",
    "ws/conversations/",
    "accounts/login/",
    "../../",  # the list, by climbing out
]


@pytest.mark.parametrize("rest", REACHABLE)
def test_share_token_reaches(rest: str) -> None:
    conversation = conversation_with(3, image_at=0)
    _, token = share(conversation)
    response = Client().get(path(token, rest.format(id=conversation.id)))
    assert response.status_code == 200, rest


@pytest.mark.parametrize("rest", NOT_REACHABLE)
def test_share_token_does_not_reach(rest: str) -> None:
    conversation = conversation_with(3, image_at=0)
    other = conversation_with(3, image_at=0, title="Other")
    _, token = share(conversation)
    response = Client().get(path(token, rest.format(id=conversation.id, other=other.id)))
    assert response.status_code in {302, 404}, rest
    body = response.content.decode(errors="replace")
    assert "Other" not in body and "message number" not in body


@pytest.mark.parametrize(
    "url",
    [
        "/",
        "/c/{id}/",
        "/c/{id}/replay.json",
        "/c/{id}/m/0/b/1/image",
        "/admin/",
        "/api/conversations",
        "/api/conversations/{id}",
        "/api/conversations/{id}/replay",
        "/api/conversations/{id}/shares",
    ],
)
def test_the_token_is_no_credential_elsewhere(url: str) -> None:
    # Sent as a bearer token, a cookie-less visitor's only secret opens nothing else.
    conversation = conversation_with(1, image_at=0)
    _, token = share(conversation)
    response = Client().get(
        url.format(id=conversation.id), headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code in {302, 401}, url


# -- the admin -------------------------------------------------------------------------------

SHARES_ADMIN = "/admin/conversations/sharelink/"


def test_admin_lists_links_with_scope_expiry_and_views(admin_client: Client) -> None:
    conversation = conversation_with(45, title="Quarterly <run>")
    link, token = share(conversation, up_to_seq=39, images=False)
    Client().get(path(token))
    page = admin_client.get(SHARES_ADMIN).content.decode()
    assert "Quarterly &lt;run&gt;" in page and "frozen, #0 to #39" in page
    assert "no images" in page and "active" in page
    assert re.search(r'field-view_count">1<', page)
    assert token not in page and link.digest not in page
    assert admin_client.get(f"{SHARES_ADMIN}add/").status_code == 403


def test_admin_revoke_action_takes_effect_on_the_next_request(admin_client: Client) -> None:
    conversation = conversation_with(1)
    link, token = share(conversation)
    response = admin_client.post(
        SHARES_ADMIN, {"action": "revoke", "_selected_action": [link.pk]}, follow=True
    )
    assert "Revoked 1 share link(s)." in response.content.decode()
    assert Client().get(path(token)).status_code == 410


def test_share_permission_is_a_real_permission() -> None:
    assert Permission.objects.filter(
        codename="share_conversation", content_type__app_label="conversations"
    ).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
@pytest.mark.parametrize("rest", ["", "c/", "nowhere/"])
def test_every_response_under_a_link_carries_the_share_headers(method: str, rest: str) -> None:
    # A write is refused by CSRF (403) or by the view (405) before any share view runs.
    _, token = share(conversation_with(2))
    response = getattr(Client(enforce_csrf_checks=True), method)(path(token, rest))
    assert response.status_code in (403, 404, 405)
    for name, value in SHARE_HEADERS.items():
        assert response[name] == value, (name, response.status_code)
    assert "Content-Security-Policy" in response


def without_csrf(response: Any) -> str:
    return re.sub(r'"X-CSRFToken": "[^"]*"', "", response.content.decode())


@pytest.mark.parametrize(
    "rest", ["c/not-a-uuid/", "c/{upper}/", "c/{id}x/", "c/not-a-uuid/m/0/wire", "c/1234/find"]
)
def test_a_malformed_conversation_id_answers_as_another_conversation_does(rest: str) -> None:
    # The paths take `<uuid:…>`: an id that is no UUID (or not in its canonical form) falls
    # to the share site's catch-all, which answers as a path to another conversation does.
    conversation = conversation_with(2)
    other = conversation_with(1, title="Other")
    link, token = share(conversation)
    url = path(token, rest.format(id=conversation.id, upper=str(conversation.id).upper()))
    expected = Client().get(path(token, f"c/{other.id}/"))
    for method, status in (("get", 404), ("post", 405)):
        response = getattr(Client(), method)(url)
        assert response.status_code == status, (method, url)
        for name, value in SHARE_HEADERS.items():
            assert response[name] == value, name
    assert without_csrf(Client().get(url)) == without_csrf(expected)
    share_revoke(link=link)
    assert Client().get(url).status_code == 410
