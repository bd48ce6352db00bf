"""The dashboard treats model and tool output as hostile (docs/guide/dashboard.md, Live sockets and
security): always escaped, inert under htmx, no inline script, strict headers, CSRF through
hx-headers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils.html import escape

from conversations.record.models.conversation import Conversation
from tests.builders import make_user, png, tool_result, tool_use
from tests.dashboard.test_views import Node, conversation_with, parse

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
HTMX = '<div hx-get="/admin/" hx-trigger="load">x</div>'
HOSTILE = [SCRIPT, IMG, HTMX]
ALL = " ".join(HOSTILE)
TOGGLES = [
    "vision=1&shape=openai",
    "vision=0&shape=openai",
    "vision=1&shape=anthropic",
    "vision=0&shape=anthropic",
]


@pytest.fixture
def hostile(db: None) -> Conversation:
    """Every text-bearing field holds all three payloads."""
    return conversation_with(
        f"Title {ALL}",
        ("system", [{"type": "text", "text": f"system {ALL}"}]),
        ("user", [{"type": "text", "text": f"user {ALL}"}, png()]),
        (
            "assistant",
            [
                {"type": "reasoning", "text": f"reasoning {ALL}"},
                tool_use("call<1>", f"tool {ALL}", query=f"input {ALL}", nested={"k": ALL}),
            ],
        ),
        ("user", [tool_result("call<1>", f"result {ALL}")]),
        ("user", [tool_result("call<1>", f"error {ALL}", is_error=True)]),
        ("assistant", [tool_use("call<2>", "plain", **{f"key {SCRIPT}": 1})]),
    )


def hostile_pages(client: Client, conversation: Conversation) -> dict[str, Any]:
    cid = conversation.id
    urls = {
        **{f"detail {t}": f"/c/{cid}/?{t}" for t in TOGGLES},
        "earlier": f"/c/{cid}/messages?before=6",
        "earlier anthropic": f"/c/{cid}/messages?before=6&vision=0&shape=anthropic",
        "list": "/",
        "list search": "/?q=Title",
    }
    pages = {name: client.get(url) for name, url in urls.items()}
    pages["detail htmx"] = client.get(f"/c/{cid}/?vision=0&shape=anthropic", HTTP_HX_REQUEST="1")
    pages["list htmx"] = client.get("/?q=Title", HTTP_HX_REQUEST="1")
    for name, response in pages.items():
        assert response.status_code == 200, name
    return pages


def assert_inert(root: Node, name: str) -> None:
    """Nothing in the DOM that a payload could have planted."""
    for node in root.iter():
        assert not any(attr.startswith("on") for attr in node.attrs), (name, node.attrs)
        assert node.attrs.get("hx-get") != "/admin/", name
        assert node.attrs.get("hx-trigger") != "load", name
        if node.tag == "script":
            assert node.attrs.get("src"), f"{name}: inline <script>"
        if node.tag == "img":
            assert node.attrs.get("src") != "x", name


def test_hostile_content_is_escaped_on_every_page(
    operator_client: Client, hostile: Conversation
) -> None:
    for name, response in hostile_pages(operator_client, hostile).items():
        html = response.content.decode()
        for payload in HOSTILE:
            assert payload not in html, (name, payload)
        assert_inert(parse(html), name)


def test_hostile_content_is_shown_as_text(operator_client: Client, hostile: Conversation) -> None:
    html = operator_client.get(f"/c/{hostile.id}/?vision=1&shape=openai").content.decode()
    text = parse(html).text
    plain = [
        f"Title {ALL}",
        f"system {ALL}",
        f"user {ALL}",
        f"reasoning {ALL}",
        f"tool {ALL}",
        f"result {ALL}",
        f"error {ALL}",
        "call<1>",
    ]
    for value in plain:
        assert escape(value) in html, value
        assert value in text, value
    # Tool input values are shown inside the pretty-printed JSON, and in the projection's prose.
    for value in (f"input {ALL}", ALL, f"key {SCRIPT}"):
        encoded = json.dumps(value, ensure_ascii=False)
        assert escape(encoded) in html, value
        assert encoded in text, value
    # The projection names the tool and its input verbatim, as the model will read them.
    compact = json.dumps(
        {"query": f"input {ALL}", "nested": {"k": ALL}}, separators=(",", ":"), ensure_ascii=False
    )
    assert f"Tool use: tool {ALL}({compact})" in text


def test_hostile_title_is_escaped_in_the_page_title_and_the_list(
    operator_client: Client, hostile: Conversation
) -> None:
    detail = parse(operator_client.get(f"/c/{hostile.id}/").content)
    assert f"Title {ALL}" in detail.find("title").text
    listing = operator_client.get("/").content.decode()
    assert escape(f"Title {ALL}") in listing


@pytest.mark.parametrize("payload", HOSTILE)
def test_hostile_search_is_echoed_escaped(operator_client: Client, db: None, payload: str) -> None:
    for headers in ({}, {"HTTP_HX_REQUEST": "1"}):
        response = operator_client.get("/", {"q": payload}, **headers)
        html = response.content.decode()
        assert payload not in html
        assert escape(payload) in html
        assert_inert(parse(html), "search")


def test_hostile_next_is_escaped_on_the_login_page(client: Client, db: None) -> None:
    payload = f'"><{SCRIPT[1:]}'
    response = client.get("/accounts/login/", {"next": payload})
    html = response.content.decode()
    assert SCRIPT not in html
    assert payload not in html
    assert_inert(parse(html), "login")


def test_content_regions_carry_hx_disable(operator_client: Client, hostile: Conversation) -> None:
    for name, response in hostile_pages(operator_client, hostile).items():
        if name.startswith("list"):
            continue
        root = parse(response.content)
        regions = root.find_all(cls="record") + root.find_all(cls="projection")
        assert len(regions) == 2 * len(root.find_all("article", "message")) > 0, name
        for region in regions:
            assert "hx-disable" in region.attrs, name
        # Every piece of stored content sits inside one of them.
        for article in root.find_all("article", "message"):
            outside = [c for c in article.children if isinstance(c, str) and c.strip()]
            assert not outside, name
            children = {n.attrs.get("class") for n in article.elements}
            # Notes (docs/contract.md §10) sit beside the record: their forms use htmx, the
            # operators' text in them is in regions that carry hx-disable.
            assert children - {"notes"} == {"record", "projection"}, name
            for text in root.find_all(cls="note-text"):
                assert "hx-disable" in text.attrs, name


# -- headers ---------------------------------------------------------------------------------


def csp(response: Any) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    directives: dict[str, list[str]] = {}
    for directive in header.split(";"):
        name, *values = directive.split()
        directives[name.lower()] = values
    return directives


def every_page(client: Client, conversation: Conversation) -> dict[str, Any]:
    cid = conversation.id
    return {
        "list": client.get("/"),
        "detail": client.get(f"/c/{cid}/"),
        "detail htmx": client.get(f"/c/{cid}/", HTTP_HX_REQUEST="1"),
        "earlier": client.get(f"/c/{cid}/messages?before=3"),
        "download": client.get(f"/c/{cid}/replay.json"),
        "image": client.get(f"/c/{cid}/m/1/b/1/image"),
        "404": client.get("/c/00000000-0000-0000-0000-000000000000/"),
        "400": client.get(f"/c/{cid}/?vision=maybe"),
    }


def html_pages(client: Client, conversation: Conversation) -> dict[str, Any]:
    cid = conversation.id
    outsider = Client()
    outsider.force_login(make_user("outsider", operator=False))
    return {
        "list": client.get("/"),
        "detail": client.get(f"/c/{cid}/"),
        "detail anthropic": client.get(f"/c/{cid}/?vision=0&shape=anthropic"),
        "404": client.get("/c/00000000-0000-0000-0000-000000000000/"),
        "403": outsider.get("/"),
        "login": Client().get("/accounts/login/"),
    }


def test_pages_send_a_strict_content_security_policy(
    operator_client: Client, hostile: Conversation
) -> None:
    for name, response in html_pages(operator_client, hostile).items():
        policy = csp(response)
        scripts = policy.get("script-src", policy.get("default-src"))
        assert scripts is not None, name
        assert "'self'" in scripts, name
        for unsafe in ("'unsafe-inline'", "'unsafe-eval'", "*", "data:", "http:", "https:"):
            assert unsafe not in scripts, (name, unsafe)
        assert policy.get("object-src") == ["'none'"], name
        assert policy.get("frame-ancestors") == ["'none'"], name
        styles = policy.get("style-src", policy.get("default-src"))
        assert styles is not None and "'unsafe-inline'" not in styles, name


def test_every_response_sends_the_protective_headers(
    operator_client: Client, hostile: Conversation
) -> None:
    for name, response in (
        every_page(operator_client, hostile) | html_pages(operator_client, hostile)
    ).items():
        assert response["X-Frame-Options"] == "DENY", name
        assert response["X-Content-Type-Options"] == "nosniff", name
        assert response["Referrer-Policy"] in {"same-origin", "no-referrer"}, name
        assert "Content-Security-Policy" in response, name


def test_images_are_sandboxed(operator_client: Client, hostile: Conversation) -> None:
    response = operator_client.get(f"/c/{hostile.id}/m/1/b/1/image")
    assert response.status_code == 200
    policy = csp(response)
    assert policy["default-src"] == ["'none'"]
    assert "sandbox" in policy


# -- the page's own configuration ------------------------------------------------------------


def test_htmx_is_configured_without_eval_script_tags_or_indicator_styles(
    operator_client: Client, hostile: Conversation
) -> None:
    for name, response in html_pages(operator_client, hostile).items():
        root = parse(response.content)
        (meta,) = [n for n in root.find_all("meta") if n.attrs.get("name") == "htmx-config"]
        config = json.loads(meta.attrs["content"] or "")
        assert config["allowEval"] is False, name
        assert config["allowScriptTags"] is False, name
        assert config["includeIndicatorStyles"] is False, name


def test_no_page_has_inline_script_style_or_event_handlers(
    operator_client: Client, hostile: Conversation
) -> None:
    pages = html_pages(operator_client, hostile) | hostile_pages(operator_client, hostile)
    for name, response in pages.items():
        root = parse(response.content)
        for script in root.find_all("script"):
            assert script.attrs.get("src"), f"{name}: inline <script>"
            assert (script.attrs["src"] or "").startswith("/static/"), name
            assert not script.text.strip(), name
        # The CSP's style-src 'self' would block these: the page would break, not just look off.
        assert not root.find_all("style"), name
        for node in root.iter():
            assert "style" not in node.attrs, (name, node.tag)
            assert not any(attr.startswith("on") for attr in node.attrs), (name, node.tag)
            assert not (node.attrs.get("href") or "").lower().startswith("javascript:"), name


def test_body_sends_the_csrf_token_in_hx_headers(operator: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    root = parse(client.get("/").content)
    (body,) = root.find_all("body")
    headers = json.loads(body.attrs["hx-headers"] or "")
    token = headers["X-CSRFToken"]
    assert token
    # Without the token a POST is refused; with the page's token it goes through.
    assert client.post("/accounts/logout/").status_code == 403
    response = client.post("/accounts/logout/", headers={"X-CSRFToken": token})
    assert response.status_code == 302
    assert client.get("/").status_code == 302  # signed out


def test_login_form_posts_to_its_own_origin(client: Client, db: None) -> None:
    # The login form posts to its own origin only.
    root = parse(client.get("/accounts/login/").content)
    (form,) = root.find_all("form")
    assert form.attrs["action"] == "/accounts/login/"
