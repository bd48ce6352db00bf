"""The dashboard (docs/contract.md §4): every page tried as an operator, as a signed-in user without
the permission and anonymously; the list; each message beside exactly the projection's output;
bounded windows for long conversations; downloads and images."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from PIL import Image

from conversations.core import replay
from conversations.record.counting import token_counts
from conversations.record.models.conversation import Conversation
from conversations.record.reads import selectors
from conversations.record.reads.rows import stored_messages
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.services.appending import block_append, message_append
from conversations.record.services.conversations import conversation_create
from tests.builders import jpeg, png, text, tool_result, tool_use
from tests.conftest import PASSWORD

TOGGLES = [(True, "openai"), (False, "openai"), (True, "anthropic"), (False, "anthropic")]


# -- a small DOM, built with the standard library's parser ---------------------------------

VOID = {
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "source",
    "track",
    "wbr",
}


@dataclass(eq=False)
class Node:
    tag: str
    attrs: dict[str, str | None]
    children: list[Node | str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    @property
    def elements(self) -> list[Node]:
        return [c for c in self.children if isinstance(c, Node)]

    def iter(self) -> Iterator[Node]:
        yield self
        for child in self.elements:
            yield from child.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None) -> list[Node]:
        return [
            n
            for n in self.iter()
            if n is not self and (tag is None or n.tag == tag) and (cls is None or cls in n.classes)
        ]

    def find(self, tag: str | None = None, cls: str | None = None) -> Node:
        found = self.find_all(tag, cls)
        assert found, f"no <{tag or '*'} class={cls!r}> in <{self.tag} {self.attrs}>"
        return found[0]

    def by_id(self, id: str) -> Node | None:
        return next((n for n in self.iter() if n.attrs.get("id") == id), None)

    def following(self, node: Node) -> Node | None:
        """The element after `node` among this element's children."""
        siblings = self.elements
        index = siblings.index(node)
        return siblings[index + 1] if index + 1 < len(siblings) else None


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]
        self.after_pre = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, dict(attrs))
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)
        self.after_pre = tag in {"pre", "textarea", "listing"}

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, dict(attrs)))
        self.after_pre = False

    def handle_endtag(self, tag: str) -> None:
        self.after_pre = False
        for index in range(len(self.stack) - 1, 0, -1):
            if self.stack[index].tag == tag:
                del self.stack[index:]
                return

    def handle_data(self, data: str) -> None:
        # As browsers do (HTML §13.2.6.4.7): a newline right after <pre> is not content.
        if self.after_pre and data.startswith("\n"):
            data = data[1:]
        self.after_pre = False
        self.stack[-1].children.append(data)


def parse(content: bytes | str) -> Node:
    builder = _Builder()
    builder.feed(content.decode() if isinstance(content, bytes) else content)
    builder.close()
    return builder.root


def page(response: Any) -> Node:
    assert response.status_code == 200, response.content[:2000]
    return parse(response.content)


def message_ids(root: Node) -> list[int]:
    return [
        int(n.attrs["id"][2:])  # type: ignore[index]
        for n in root.find_all("article", "message")
        if (n.attrs.get("id") or "").startswith("m-")
    ]


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


# -- fixtures --------------------------------------------------------------------------------


def conversation_with(title: str, *messages: tuple[str, list[dict[str, Any]]]) -> Conversation:
    conversation = conversation_create(title=title)
    for role, blocks in messages:
        append(conversation, role, blocks)
    conversation.refresh_from_db()
    return conversation


def append(conversation: Conversation, role: str, blocks: list[dict[str, Any]]) -> None:
    message_append(
        conversation=conversation,
        role=role,
        blocks=[BLOCK_ADAPTER.validate_python(b) for b in blocks],
    )


def long_conversation(count: int, title: str = "Long") -> Conversation:
    conversation = conversation_create(title=title)
    for seq in range(count):
        role = "user" if seq % 2 == 0 else "assistant"
        append(conversation, role, [text(f"message number {seq}")])
    conversation.refresh_from_db()
    return conversation


@pytest.fixture
def rich(db: None) -> Conversation:
    """Every block type, an image, a system message, an empty message and an error."""
    return conversation_with(
        "Picture triage",
        ("system", [text("You are terse.\nAnswer in one line.")]),
        ("user", [text("What is in this picture?"), png(), text("And this one?"), jpeg()]),
        (
            "assistant",
            [
                {"type": "reasoning", "text": "The user wants a description."},
                tool_use("call_1", "describe", b=1, a=[1, 2], note="ünïcode"),
            ],
        ),
        ("user", [tool_result("call_1", 'a red square & a <b>brown</b> "jpeg"')]),
        ("assistant", [tool_use("call_2", "zoom", level=3)]),
        ("user", [tool_result("call_2", "no such zoom level", is_error=True)]),
        ("assistant", [text("It's a red square.")]),
        ("user", []),
    )


def detail_url(conversation: Conversation, **params: Any) -> str:
    url = reverse("conversation", args=[str(conversation.id)])
    return url + ("?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else "")


def wire_messages(conversation: Conversation, *, vision: bool, shape: str) -> list[Any]:
    rows = selectors.message_rows(conversation)
    return [
        replay.project_message(stored, vision=vision, shape=shape)  # type: ignore[arg-type]
        for stored in stored_messages(rows)
    ]


# -- access: operator, outsider, anonymous ---------------------------------------------------


def endpoints(conversation: Conversation) -> list[str]:
    cid = conversation.id
    return [
        "/",
        "/?q=square&page=1",
        f"/c/{cid}/",
        f"/c/{cid}/?vision=0&shape=anthropic",
        f"/c/{cid}/messages?before=3",
        f"/c/{cid}/messages?before=5&from=1",
        f"/c/{cid}/replay.json",
        f"/c/{cid}/replay.json?vision=0&shape=anthropic",
        f"/c/{cid}/m/1/b/1/image",
    ]


@pytest.mark.sqlite
def test_every_page_answers_an_operator(operator_client: Client, rich: Conversation) -> None:
    for url in endpoints(rich):
        response = operator_client.get(url)
        assert response.status_code == 200, url
        if "/replay.json" in url:
            assert response["Content-Type"] == "application/json"
        elif url.endswith("/image"):
            assert response["Content-Type"] == "image/png"
        else:
            assert response["Content-Type"].startswith("text/html"), url


def test_signed_in_user_without_the_permission_gets_the_403_page(
    outsider_client: Client, rich: Conversation
) -> None:
    for url in [*endpoints(rich), f"/c/{rich.id}/", "/c/00000000-0000-0000-0000-000000000000/"]:
        response = outsider_client.get(url)
        assert response.status_code == 403, url
        assert response["Content-Type"].startswith("text/html"), url
        root = parse(response.content)
        assert "Not allowed" in root.find("h1").text
        assert "conversations.view_conversation" in root.text
        # Nothing of the record leaks into the refusal.
        assert b"Picture triage" not in response.content


def test_a_superuser_is_an_operator(db: None, rich: Conversation) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password=PASSWORD))
    assert client.get(f"/c/{rich.id}/").status_code == 200


def test_anonymous_request_is_sent_to_the_login_page_with_next(
    client: Client, rich: Conversation
) -> None:
    for url in endpoints(rich):
        response = client.get(url)
        assert response.status_code == 302, url
        location = urlsplit(response["Location"])
        assert location.path == "/accounts/login/"
        assert parse_qs(location.query)["next"] == [url]


def test_login_page_is_a_styled_form(client: Client, db: None) -> None:
    root = page(client.get("/accounts/login/?next=/c/x/"))
    form = root.find("form")
    assert form.attrs["method"] == "post"
    names = {n.attrs.get("name") for n in form.find_all("input")}
    assert {"username", "password", "next", "csrfmiddlewaretoken"} <= names
    assert any(n.attrs.get("value") == "/c/x/" for n in form.find_all("input"))
    assert any("replay.css" in (n.attrs.get("href") or "") for n in root.find_all("link"))


def test_signing_in_lands_on_the_list(client: Client, operator: User) -> None:
    response = client.post("/accounts/login/", {"username": "operator", "password": PASSWORD})
    assert response.status_code == 302
    assert response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_signing_in_lands_on_next(client: Client, operator: User, rich: Conversation) -> None:
    target = f"/c/{rich.id}/?vision=0&shape=anthropic"
    response = client.post(
        "/accounts/login/", {"username": "operator", "password": PASSWORD, "next": target}
    )
    assert response.status_code == 302
    assert response["Location"] == target


def test_signing_in_never_lands_off_site(client: Client, operator: User) -> None:
    response = client.post(
        "/accounts/login/",
        {"username": "operator", "password": PASSWORD, "next": "https://evil.example/"},
    )
    assert response.status_code == 302
    assert response["Location"] == "/"


def test_wrong_password_is_refused_with_a_message(client: Client, operator: User) -> None:
    response = client.post("/accounts/login/", {"username": "operator", "password": "wrong"})
    root = page(response)
    assert "didn't match" in root.find(cls="error").text
    assert client.get("/").status_code == 302


def test_login_page_sends_a_signed_in_operator_home(operator_client: Client) -> None:
    response = operator_client.get("/accounts/login/")
    assert response.status_code == 302
    assert response["Location"] == "/"


def test_dashboard_pages_answer_get_only(operator_client: Client, rich: Conversation) -> None:
    for url in ["/", f"/c/{rich.id}/", f"/c/{rich.id}/replay.json"]:
        assert operator_client.post(url).status_code == 405, url


def test_unknown_conversation_is_the_404_page(operator_client: Client, db: None) -> None:
    for url in [
        "/c/00000000-0000-0000-0000-000000000000/",
        "/c/not-a-uuid/",
        "/c/00000000-0000-0000-0000-000000000000/messages?before=1",
        "/c/00000000-0000-0000-0000-000000000000/replay.json",
    ]:
        response = operator_client.get(url)
        assert response.status_code == 404, url
        assert response["Content-Type"].startswith("text/html"), url


# -- the list --------------------------------------------------------------------------------


def list_rows(root: Node) -> list[Node]:
    results = root.by_id("results")
    assert results is not None
    return results.find_all("tr")[1:]  # the header row first


def row_titles(root: Node) -> list[str]:
    return [row.find("a").text for row in list_rows(root)]


@pytest.mark.sqlite
def test_list_shows_newest_activity_first(operator_client: Client, db: None) -> None:
    first = conversation_with("First", ("user", [text("hello")]))
    conversation_with("Second")
    conversation_with("Third")
    assert row_titles(page(operator_client.get("/"))) == ["Third", "Second", "First"]
    append(first, "assistant", [text("new activity")])
    assert row_titles(page(operator_client.get("/"))) == ["First", "Third", "Second"]


def test_list_row_links_title_and_counts_messages(
    operator_client: Client, rich: Conversation
) -> None:
    (row,) = list_rows(page(operator_client.get("/")))
    link = row.find("a")
    assert link.text == "Picture triage"
    assert link.attrs["href"] == f"/c/{rich.id}/"
    assert row.find("td", "num").text.strip() == "8"


def test_list_shows_relative_time_with_the_exact_time_on_hover(
    operator_client: Client, db: None
) -> None:
    conversation = conversation_with("Old")
    when = (timezone.now() - timedelta(hours=3, minutes=5)).replace(microsecond=0)
    Conversation.objects.filter(pk=conversation.pk).update(updated_at=when)
    (row,) = list_rows(page(operator_client.get("/")))
    time = row.find("time")
    assert time.text.strip() == "3\xa0hours ago"
    assert time.attrs["title"] == when.isoformat(timespec="seconds")
    assert time.attrs["datetime"] == when.isoformat(timespec="seconds")


UNANSWERED_CASES = {
    "no messages": ([], False),
    "last message is text": ([("user", [text("hi")])], False),
    "last message calls a tool": (
        [("user", [text("hi")]), ("assistant", [text("let me look"), tool_use("c1")])],
        True,
    ),
    "the call is answered in the next message": (
        [("assistant", [tool_use("c1")]), ("user", [tool_result("c1")])],
        False,
    ),
    "the call is answered in the same message": (
        [("assistant", [tool_use("c1"), tool_result("c1")])],
        False,
    ),
    "one of two calls is answered": (
        [("assistant", [tool_use("c1"), tool_use("c2"), tool_result("c1")])],
        True,
    ),
    "the result comes before the call": (
        [("assistant", [tool_result("c1"), tool_use("c1")])],
        True,
    ),
    "a result for another id": (
        [("assistant", [tool_use("c1"), tool_result("c9")])],
        True,
    ),
    "an earlier unanswered call, then text": (
        [("assistant", [tool_use("c1")]), ("assistant", [text("never mind")])],
        False,
    ),
}


@pytest.mark.parametrize("case", UNANSWERED_CASES)
def test_unanswered_tool_call_badge_shows_exactly_when_the_last_message_has_one(
    operator_client: Client, db: None, case: str
) -> None:
    messages, expected = UNANSWERED_CASES[case]
    conversation_with("Case", *messages)
    (row,) = list_rows(page(operator_client.get("/")))
    badges = row.find_all(cls="pending")
    assert bool(badges) is expected
    if expected:
        assert badges[0].text == "unanswered tool call"


def test_unanswered_badge_follows_blocks_appended_to_the_last_message(
    operator_client: Client, db: None
) -> None:
    conversation = conversation_with("Appended", ("assistant", [text("working")]))
    message = selectors.message_get(conversation, 0)
    assert message is not None
    block_append(message=message, block=BLOCK_ADAPTER.validate_python(tool_use("c1")))
    assert list_rows(page(operator_client.get("/")))[0].find_all(cls="pending")
    block_append(message=message, block=BLOCK_ADAPTER.validate_python(tool_result("c1")))
    assert not list_rows(page(operator_client.get("/")))[0].find_all(cls="pending")


@pytest.mark.sqlite
def test_search_matches_titles_and_block_text(operator_client: Client, db: None) -> None:
    conversation_with("Quarterly Invoice review", ("user", [text("hello")]))
    conversation_with("Weather", ("user", [text("Is the INVOICE paid?")]))
    conversation_with("Thinking", ("assistant", [{"type": "reasoning", "text": "an invoice"}]))
    conversation_with(
        "Tools", ("assistant", [tool_use("c1")]), ("user", [tool_result("c1", "invoice #7")])
    )
    conversation_with("Unrelated", ("user", [text("nothing to see")]))
    found = row_titles(page(operator_client.get("/", {"q": "invoice"})))
    assert sorted(found) == ["Quarterly Invoice review", "Thinking", "Tools", "Weather"]
    root = page(operator_client.get("/", {"q": "zebra"}))
    assert list_rows(root) == []
    assert "No conversation matches “zebra”" in root.find(cls="empty").text
    (search,) = [n for n in root.find_all("input") if n.attrs.get("type") == "search"]
    assert search.attrs["name"] == "q"
    assert search.attrs["value"] == "zebra"


@pytest.mark.sqlite
def test_list_paginates_25_per_page(operator_client: Client, db: None) -> None:
    for n in range(27):
        conversation_with(f"Conversation {n:02d}")
    first = page(operator_client.get("/"))
    second = page(operator_client.get("/", {"page": 2}))
    assert len(list_rows(first)) == 25
    assert len(list_rows(second)) == 2
    assert set(row_titles(first)) | set(row_titles(second)) == {
        f"Conversation {n:02d}" for n in range(27)
    }
    assert row_titles(first)[0] == "Conversation 26"
    pager = first.find("nav", "pager")
    assert "Page 1 of 2" in pager.text
    (older,) = pager.find_all("a")
    assert query_of(older.attrs["href"] or "")["page"] == "2"
    assert row_titles(page(operator_client.get("/" + (older.attrs["href"] or "")))) == (
        row_titles(second)
    )


@pytest.mark.sqlite
def test_pagination_keeps_the_search(operator_client: Client, db: None) -> None:
    for n in range(26):
        conversation_with(f"Match {n}")
    conversation_with("Other")
    root = page(operator_client.get("/", {"q": "match"}))
    (older,) = root.find("nav", "pager").find_all("a")
    assert query_of(older.attrs["href"] or "") == {"q": "match", "page": "2"}


def test_htmx_list_request_returns_only_the_results(
    operator_client: Client, rich: Conversation
) -> None:
    response = operator_client.get("/", {"q": "picture"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    body = response.content.decode().strip()
    assert body.startswith('<section id="results"')
    assert "<html" not in body
    assert "<header" not in body
    (top,) = parse(body).elements
    assert top.attrs["id"] == "results"
    assert row_titles(parse(body)) == ["Picture triage"]


# -- the conversation page -------------------------------------------------------------------


@pytest.mark.parametrize(("vision", "shape"), TOGGLES)
def test_projection_side_is_exactly_the_projection_functions_output(
    operator_client: Client, rich: Conversation, vision: bool, shape: str
) -> None:
    response = operator_client.get(detail_url(rich, vision=int(vision), shape=shape))
    root = page(response)
    html = response.content.decode()
    wires = wire_messages(rich, vision=vision, shape=shape)
    assert message_ids(root) == list(range(len(wires)))
    for seq, wire in enumerate(wires):
        article = root.by_id(f"m-{seq}")
        assert article is not None and article.tag == "article"
        projection = article.find(cls="projection")
        assert projection.find("span", "role").text == wire["role"]
        content = wire["content"]
        if isinstance(content, str):
            (pre,) = projection.find_all("pre", "wire")
            assert pre.text == content
            assert escape(content) in html
            assert not projection.find_all("img")
        else:
            parts = projection.find_all("li", "part")
            assert len(parts) == len(content)
            images = [b for b in selectors.message_rows(rich)[seq].blocks if b.type == "image"]
            for item, part in zip(parts, content, strict=True):
                if part["type"] == "text":
                    assert item.find("pre", "wire").text == part["text"]
                    assert escape(part["text"]) in html
                else:
                    image = images.pop(0)
                    img = item.find("img")
                    assert "thumb" in img.classes
                    assert img.attrs["src"] == f"/c/{rich.id}/m/{seq}/b/{image.seq}/image"
                    data = (
                        part["image_url"]["url"].split(",")[1]
                        if shape == "openai"
                        else (part["source"]["data"])
                    )
                    served = operator_client.get(img.attrs["src"])
                    assert served.content == base64.b64decode(data)
        lifted = projection.find_all(cls="note")
        if shape == "anthropic" and wire["role"] == "system":
            assert "lifted" in lifted[0].text
        else:
            assert not lifted


def test_vision_off_names_the_image_as_not_seen(
    operator_client: Client, rich: Conversation
) -> None:
    on = page(operator_client.get(detail_url(rich, vision=1))).by_id("m-1")
    off = page(operator_client.get(detail_url(rich, vision=0))).by_id("m-1")
    assert on is not None and off is not None
    assert len(on.find(cls="projection").find_all("img")) == 2
    assert not off.find(cls="projection").find_all("img")
    wire = off.find(cls="projection").find("pre", "wire").text
    assert "[Image (image/png): not seen — this model cannot view images]" in wire
    assert "[Image (image/jpeg): not seen — this model cannot view images]" in wire
    # The record still shows both thumbnails.
    assert len(off.find(cls="record").find_all("img")) == 2


def test_default_toggles_are_vision_on_and_openai(
    operator_client: Client, rich: Conversation
) -> None:
    def projection(url: str) -> list[str]:
        root = page(operator_client.get(url))
        return [n.text for n in root.find_all(cls="projection")]

    assert projection(detail_url(rich)) == projection(detail_url(rich, vision=1, shape="openai"))
    assert projection(detail_url(rich)) != projection(detail_url(rich, vision=0))


@pytest.mark.sqlite
def test_record_side_shows_each_block_for_its_type(
    operator_client: Client, rich: Conversation
) -> None:
    root = page(operator_client.get(detail_url(rich)))
    call = root.by_id("m-2")
    assert call is not None
    use = call.find("section", "block-tool_use")
    assert use.find("code", "name").text == "describe"
    assert "call_1" in use.find(cls="call-id").text
    # A short input is one line of JSON, its key order kept (docs/guide/dashboard.md).
    assert use.find("pre").text == '{"b": 1, "a": [1, 2], "note": "ünïcode"}'
    error = root.by_id("m-5")
    assert error is not None
    result = error.find("section", "block-tool_result")
    assert "is-error" in result.classes
    assert result.find("code", "name").text == "zoom"  # resolved from the call at ingest
    assert "call_2" in result.find(cls="call-id").text
    ok = root.by_id("m-3")
    assert ok is not None
    assert "is-error" not in ok.find("section", "block-tool_result").classes
    empty = root.by_id("m-7")
    assert empty is not None
    assert empty.find(cls="projection").find("pre", "wire").text == "[Empty message]"


def test_reasoning_is_collapsed(operator_client: Client, rich: Conversation) -> None:
    message = page(operator_client.get(detail_url(rich))).by_id("m-2")
    assert message is not None
    details = message.find("section", "block-reasoning").find("details")
    assert "open" not in details.attrs
    assert details.find("pre").text == "The user wants a description."


def test_every_message_has_a_copy_link_to_its_anchor(
    operator_client: Client, rich: Conversation
) -> None:
    root = page(operator_client.get(detail_url(rich)))
    for seq in range(8):
        article = root.by_id(f"m-{seq}")
        assert article is not None
        assert article.find("a", "permalink").attrs["href"] == f"#m-{seq}"


@pytest.mark.parametrize(("vision", "shape"), TOGGLES)
def test_toggle_links_carry_vision_and_shape(
    operator_client: Client, rich: Conversation, vision: bool, shape: str
) -> None:
    root = page(operator_client.get(detail_url(rich, vision=int(vision), shape=shape)))
    links = {a.text: a for a in root.find("nav", "toggles").find_all("a")}
    here = {"vision": str(int(vision)), "shape": shape}
    expected = {
        "Vision on": here | {"vision": "1"},
        "Vision off": here | {"vision": "0"},
        "OpenAI": here | {"shape": "openai"},
        "Anthropic": here | {"shape": "anthropic"},
    }
    assert set(links) == set(expected)
    for label, params in expected.items():
        link = links[label]
        assert urlsplit(link.attrs["href"] or "").path == f"/c/{rich.id}/"
        assert query_of(link.attrs["href"] or "") == params
        assert link.attrs["hx-get"] == link.attrs["href"]
        assert link.attrs["hx-target"] == "#conversation"
        assert ("active" in link.classes) is (params == here)
    download = root.by_id("download-payload")
    copy = root.by_id("copy-payload")
    assert download is not None and copy is not None
    assert urlsplit(download.attrs["href"] or "").path == f"/c/{rich.id}/replay.json"
    assert query_of(download.attrs["href"] or "") == here
    assert copy.attrs["data-url"] == download.attrs["href"]


@pytest.mark.parametrize(("vision", "shape"), TOGGLES)
def test_toggles_are_two_groups_each_with_one_current_choice(
    operator_client: Client, rich: Conversation, vision: bool, shape: str
) -> None:
    root = page(operator_client.get(detail_url(rich, vision=int(vision), shape=shape)))
    nav = root.find("nav", "toggles")
    groups = [n for n in nav.iter() if n.attrs.get("role") == "group"]
    assert [g.attrs["aria-label"] for g in groups] == ["Vision", "Shape"]
    chosen = ["Vision on" if vision else "Vision off", {"openai": "OpenAI"}.get(shape, "Anthropic")]
    for group, name in zip(groups, chosen, strict=True):
        links = group.find_all("a")
        assert len(links) == 2
        assert [a.text for a in links if a.attrs.get("aria-current") == "true"] == [name]
        assert [a.text for a in links if "active" in a.classes] == [name]


def test_an_empty_conversation_says_it_has_no_messages_yet(
    operator_client: Client, db: None
) -> None:
    empty = conversation_with("Just started")
    root = page(operator_client.get(detail_url(empty)))
    state = root.by_id("empty-state")
    assert state is not None
    assert state.text == "No messages yet — this page updates live as the agent writes."
    assert message_ids(root) == []
    one = conversation_with("One", ("user", [text("hello")]))
    assert page(operator_client.get(detail_url(one))).by_id("empty-state") is None


def test_htmx_toggle_returns_the_conversation_partial_and_pushes_the_url(
    operator_client: Client, rich: Conversation
) -> None:
    response = operator_client.get(
        detail_url(rich, vision=0, shape="anthropic"), HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    assert response["HX-Push-Url"] == f"/c/{rich.id}/?vision=0&shape=anthropic"
    body = response.content.decode().strip()
    assert "<html" not in body and "<title" not in body
    (top,) = parse(body).elements
    assert top.attrs["id"] == "conversation"
    # The same projection as the full page for these toggles.
    full = page(operator_client.get(detail_url(rich, vision=0, shape="anthropic")))
    conversation = full.by_id("conversation")
    assert conversation is not None
    assert [p.text for p in top.find_all("pre", "wire")] == [
        p.text for p in conversation.find_all("pre", "wire")
    ]


@pytest.mark.parametrize(
    "params",
    ["vision=2", "vision=yes", "shape=gemini", "shape=OpenAI", "vision=1&shape="],
)
def test_bad_toggles_are_a_400(operator_client: Client, rich: Conversation, params: str) -> None:
    for path in [f"/c/{rich.id}/", f"/c/{rich.id}/replay.json", f"/c/{rich.id}/messages"]:
        extra = "&before=1" if path.endswith("messages") else ""
        response = operator_client.get(f"{path}?{params}{extra}")
        assert response.status_code == 400, (path, params)


def test_totals_count_messages_and_blocks(operator_client: Client, rich: Conversation) -> None:
    totals = page(operator_client.get(detail_url(rich))).by_id("totals")
    assert totals is not None
    assert totals.text == "8 messages · 11 blocks"
    assert (totals.attrs["data-messages"], totals.attrs["data-blocks"]) == ("8", "11")


def test_title_names_the_conversation_and_a_favicon_is_linked(
    operator_client: Client, rich: Conversation
) -> None:
    for url in [detail_url(rich), "/"]:
        root = page(operator_client.get(url))
        icons = [n for n in root.find("head").find_all("link") if n.attrs.get("rel") == "icon"]
        assert len(icons) == 1
        assert (icons[0].attrs["href"] or "").endswith("favicon.svg")
    title = page(operator_client.get(detail_url(rich))).find("title").text
    assert "Picture triage" in title
    untitled = conversation_with("")
    assert str(untitled.id) in page(operator_client.get(detail_url(untitled))).find("title").text


def test_long_tool_output_is_folded_with_show_all_and_kept_whole(
    operator_client: Client, db: None
) -> None:
    output = "\n".join(f"line {n} of the build log" for n in range(40))
    conversation = conversation_with(
        "Build",
        ("assistant", [tool_use("c1", "make")]),
        ("user", [tool_result("c1", output)]),
        ("user", [tool_result("c1", "short\noutput")]),
    )
    root = page(operator_client.get(detail_url(conversation)))
    long, short = root.by_id("m-1"), root.by_id("m-2")
    assert long is not None and short is not None
    for region in (long.find(cls="record"), long.find(cls="projection")):
        pre = region.find("pre")
        assert "folded" in pre.classes
        parent = next(n for n in region.iter() if pre in n.elements)
        button = parent.following(pre)
        assert button is not None and button.tag == "button"
        assert "show-all" in button.classes
        assert button.text.startswith("show all 40 lines, ")  # its size
        assert output in pre.text
    for region in (short.find(cls="record"), short.find(cls="projection")):
        assert "folded" not in region.find("pre").classes
        assert not region.find_all("button", cls="show-all")


def test_wire_text_starting_with_a_newline_is_shown_exactly(
    operator_client: Client, db: None
) -> None:
    # Browsers drop one newline right after <pre>: the template must put one there itself.
    conversation = conversation_with("Indented", ("user", [text("\n  indented first line")]))
    root = page(operator_client.get(detail_url(conversation)))
    message = root.by_id("m-0")
    assert message is not None
    assert message.find(cls="projection").find("pre", "wire").text == "\n  indented first line"
    assert message.find(cls="record").find("pre").text == "\n  indented first line"


# -- long conversations ----------------------------------------------------------------------


@pytest.fixture(scope="class")
def long_pair(django_db_setup: None, django_db_blocker: Any) -> Iterator[dict[int, Conversation]]:
    """A 5- and a 250-message conversation, made once for the class (appends take time)."""
    with django_db_blocker.unblock():
        made = {5: long_conversation(5, "Short"), 250: long_conversation(250, "Long")}
    yield made
    with django_db_blocker.unblock():
        Conversation.objects.filter(pk__in=[c.pk for c in made.values()]).delete()


def earlier_url(root: Node) -> str | None:
    earlier = root.by_id("earlier")
    if earlier is None:
        return None
    return earlier.find("button").attrs["hx-get"]


def count_queries(client: Client, url: str) -> int:
    client.get(url)  # warm the session and permission caches alike
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200
    return len(queries)


class TestLongConversation:
    @pytest.fixture
    def long(self, long_pair: dict[int, Conversation]) -> Conversation:
        return long_pair[250]

    def test_first_page_renders_only_the_latest_100_messages(
        self, operator_client: Client, long: Conversation
    ) -> None:
        root = page(operator_client.get(detail_url(long)))
        assert message_ids(root) == list(range(150, 250))
        totals = root.by_id("totals")
        assert totals is not None and totals.attrs["data-messages"] == "250"
        url = earlier_url(root)
        assert url is not None
        assert urlsplit(url).path == f"/c/{long.id}/messages"
        assert query_of(url) == {"before": "150", "vision": "1", "shape": "openai"}

    def test_earlier_control_loads_the_previous_window_then_the_rest(
        self, operator_client: Client, long: Conversation
    ) -> None:
        url = earlier_url(page(operator_client.get(detail_url(long))))
        assert url is not None
        window = page(operator_client.get(url))
        assert message_ids(window) == list(range(50, 150))
        assert not window.find_all("html") and not window.find_all("header", "conv-head")
        url = earlier_url(window)
        assert url is not None and query_of(url)["before"] == "50"
        last = page(operator_client.get(url))
        assert message_ids(last) == list(range(0, 50))
        assert earlier_url(last) is None
        # Each window's messages render as on a full page.
        m60 = window.by_id("m-60")
        assert m60 is not None
        assert m60.find(cls="projection").find("pre", "wire").text == "message number 60"

    def test_earlier_windows_keep_the_toggles(
        self, operator_client: Client, long: Conversation
    ) -> None:
        root = page(operator_client.get(detail_url(long, vision=0, shape="anthropic")))
        url = earlier_url(root)
        assert url is not None
        assert query_of(url) == {"before": "150", "vision": "0", "shape": "anthropic"}
        url = earlier_url(page(operator_client.get(url)))
        assert url is not None
        assert query_of(url) == {"before": "50", "vision": "0", "shape": "anthropic"}

    def test_from_loads_back_to_a_deep_link_target(
        self, operator_client: Client, long: Conversation
    ) -> None:
        root = page(operator_client.get(f"/c/{long.id}/messages?before=150&from=7"))
        assert message_ids(root) == list(range(7, 150))
        url = earlier_url(root)
        assert url is not None and query_of(url)["before"] == "7"
        root = page(operator_client.get(f"/c/{long.id}/messages?before=150&from=0"))
        assert message_ids(root) == list(range(0, 150))
        assert earlier_url(root) is None

    @pytest.mark.parametrize("params", ["", "before=x", "before=10&from=y", "from=3"])
    def test_earlier_messages_need_message_numbers(
        self, operator_client: Client, long: Conversation, params: str
    ) -> None:
        assert operator_client.get(f"/c/{long.id}/messages?{params}").status_code == 400

    def test_detail_page_queries_do_not_grow_with_the_conversation(
        self, operator_client: Client, long_pair: dict[int, Conversation]
    ) -> None:
        short, long = long_pair[5], long_pair[250]
        for params in ({}, {"vision": 0, "shape": "anthropic"}):
            assert count_queries(operator_client, detail_url(short, **params)) == count_queries(
                operator_client, detail_url(long, **params)
            )
        assert count_queries(operator_client, f"/c/{short.id}/messages?before=5") == (
            count_queries(operator_client, f"/c/{long.id}/messages?before=200")
        )


def test_list_queries_do_not_grow_with_the_page(operator_client: Client, db: None) -> None:
    conversation_with("One", ("assistant", [tool_use("c1")]))
    few = count_queries(operator_client, "/")
    for n in range(30):
        conversation_with(f"More {n}", ("assistant", [tool_use("c1")]), ("user", [text("x")]))
    assert count_queries(operator_client, "/") == few


# -- downloads and images --------------------------------------------------------------------


@pytest.mark.parametrize(("vision", "shape"), TOGGLES)
def test_download_serves_the_bytes_of_the_api_replay(
    operator_client: Client, rich: Conversation, token: str, vision: bool, shape: str
) -> None:
    params = {"vision": int(vision), "shape": shape}
    api = Client().get(
        f"/api/conversations/{rich.id}/replay", params, headers={"Authorization": f"Bearer {token}"}
    )
    assert api.status_code == 200
    download = operator_client.get(f"/c/{rich.id}/replay.json", params)
    assert download.status_code == 200
    assert download.content == api.content
    assert download["Content-Type"] == "application/json"
    disposition = download["Content-Disposition"]
    assert disposition.startswith("attachment;")
    assert str(rich.id) in disposition and shape in disposition
    # And the page's download link for these toggles is this URL.
    root = page(operator_client.get(detail_url(rich, **params)))
    link = root.by_id("download-payload")
    assert link is not None
    assert operator_client.get(link.attrs["href"]).content == api.content


@pytest.mark.parametrize(("vision", "shape"), TOGGLES)
def test_markdown_export_is_the_api_markdown_and_renders_the_projection(
    operator_client: Client, rich: Conversation, token: str, vision: bool, shape: str
) -> None:
    params = {"vision": int(vision), "shape": shape}
    api = Client().get(
        f"/api/conversations/{rich.id}/markdown",
        params,
        headers={"Authorization": f"Bearer {token}"},
    )
    assert api.status_code == 200
    assert api["Content-Type"] == "text/markdown; charset=utf-8"
    root = page(operator_client.get(detail_url(rich, **params)))
    link = root.by_id("export-markdown")
    assert link is not None
    download = operator_client.get(link.attrs["href"])
    assert download.content == api.content
    assert download["Content-Disposition"].startswith("attachment;")
    text = download.content.decode()
    payload = selectors.replay_payload(rich, vision=vision, shape=shape)
    projection = text[text.index("## Projection") :]
    for message in payload["messages"]:
        if isinstance(message["content"], str):
            assert message["content"] in projection


def test_markdown_export_refuses_outsiders_and_bad_toggles(
    outsider_client: Client, client: Client, operator_client: Client, rich: Conversation
) -> None:
    url = f"/c/{rich.id}/export.md"
    assert outsider_client.get(url).status_code == 403
    assert client.get(url).status_code == 302
    assert operator_client.get(url, {"shape": "<b>x</b>"}).status_code == 400
    assert Client().get(f"/api/conversations/{rich.id}/markdown").status_code == 401


def test_download_does_not_accept_a_bearer_token_alone(
    client: Client, rich: Conversation, token: str
) -> None:
    response = client.get(f"/c/{rich.id}/replay.json", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 302


@pytest.mark.parametrize(
    ("block", "media_type", "fmt"), [(1, "image/png", "PNG"), (3, "image/jpeg", "JPEG")]
)
def test_image_view_serves_the_stored_bytes_with_their_type(
    operator_client: Client, rich: Conversation, block: int, media_type: str, fmt: str
) -> None:
    response = operator_client.get(f"/c/{rich.id}/m/1/b/{block}/image")
    assert response.status_code == 200
    assert response["Content-Type"] == media_type
    assert response["X-Content-Type-Options"] == "nosniff"
    stored = selectors.message_rows(rich)[1].blocks[block].data
    assert response.content == base64.b64decode(stored)
    assert Image.open(io.BytesIO(response.content)).format == fmt


@pytest.mark.parametrize(
    "path",
    [
        "m/1/b/0/image",  # a text block
        "m/2/b/1/image",  # a tool_use block
        "m/1/b/9/image",  # no such block
        "m/99/b/0/image",  # no such message
    ],
)
def test_image_view_is_404_for_anything_but_an_image_block(
    operator_client: Client, rich: Conversation, path: str
) -> None:
    assert operator_client.get(f"/c/{rich.id}/{path}").status_code == 404


def test_image_view_is_404_for_an_image_of_another_conversation(
    operator_client: Client, rich: Conversation
) -> None:
    other = conversation_with("Other", ("user", [text("no images here")]))
    assert operator_client.get(f"/c/{other.id}/m/1/b/1/image").status_code == 404
    assert (
        operator_client.get("/c/00000000-0000-0000-0000-000000000000/m/1/b/1/image").status_code
        == 404
    )


def test_image_view_never_serves_svg(operator_client: Client, rich: Conversation) -> None:
    from django.db import IntegrityError, transaction
    from pydantic import ValidationError

    from conversations.record.models.conversation import Block

    svg = base64.b64encode(
        b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
    ).decode()
    # Not through the write path...
    with pytest.raises(ValidationError):
        BLOCK_ADAPTER.validate_python({"type": "image", "media_type": "image/svg+xml", "data": svg})
    with pytest.raises(ValidationError):
        BLOCK_ADAPTER.validate_python({"type": "image", "media_type": "image/png", "data": svg})
    # ...nor behind its back.
    message = selectors.message_get(rich, 1)
    assert message is not None
    with pytest.raises(IntegrityError), transaction.atomic():
        Block.objects.create(
            message=message, seq=9, type="image", media_type="image/svg+xml", data=svg
        )
    for block in (1, 3):
        response = operator_client.get(f"/c/{rich.id}/m/1/b/{block}/image")
        assert "svg" not in response["Content-Type"]
        assert response["Content-Type"] in replay.IMAGE_MEDIA_TYPES


def test_an_empty_conversation_opens(operator_client: Client, db: None) -> None:
    conversation = conversation_with("Nothing yet")
    root = page(operator_client.get(detail_url(conversation)))
    assert message_ids(root) == []
    assert root.by_id("earlier") is None
    totals = root.by_id("totals")
    assert totals is not None and totals.text == "0 messages · 0 blocks"


@pytest.mark.parametrize("path", ["/?q=picture", "detail"])
def test_htmx_history_restore_gets_the_whole_page(
    operator_client: Client, rich: Conversation, path: str
) -> None:
    # With historyCacheSize 0, Back after a toggle or a search is a history miss: htmx
    # (historyRestoreAsHxRequest, default true) refetches with both headers and swaps the answer
    # into <body>, so a partial here would leave a page without its top bar or search form.
    url = detail_url(rich, vision=0) if path == "detail" else path
    response = operator_client.get(
        url, HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true"
    )
    root = page(response)
    assert root.find_all("html")
    assert root.find("header", "topbar")


# -- bounds (docs/contract.md §4): long blocks show their start, their size, and load the rest -----

BIG = 10 * 1024 * 1024


@pytest.fixture(scope="class")
def huge(django_db_setup: None, django_db_blocker: Any) -> Iterator[Conversation]:
    """A 10 MB text, a 10 MB tool result, a long tool input, a picture, then a short reply.

    Stored once for its class, in a transaction the class's tests run inside (each in a savepoint,
    as with Django's setUpTestData) and rolled back after them; its token counts, cached
    in-process by conversation, are counted once (seconds for 20 MB), not per test."""
    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
        big_text = "".join(f"line {i} <b>&</b>\n" for i in range(BIG // 18))
        stored = conversation_with(
            "Huge",
            ("user", [text(big_text), png()]),
            ("assistant", [tool_use("call_1", "dump", blob="y" * 200_000)]),
            ("user", [tool_result("call_1", "z" * BIG)]),
            ("assistant", [text("Done.")]),
        )
    yield stored
    with django_db_blocker.unblock():
        transaction.set_rollback(True)
        outer.__exit__(None, None, None)


class TestTenMegabyteBlocks:
    """Four reads of one `huge` conversation, stored once for the class."""

    def test_a_page_of_ten_megabyte_blocks_is_small_and_says_what_it_cut(
        self, operator_client: Client, huge: Conversation
    ) -> None:
        response = operator_client.get(detail_url(huge))
        assert len(response.content) < 700_000  # four messages; each side of each under 96 KB
        root = page(response)
        assert message_ids(root) == [0, 1, 2, 3]
        notes = root.find_all("p", "truncated")
        assert len(notes) == 6  # record and projection of the three long messages
        sizes = {int(n.attrs["data-size"] or 0) for n in notes}
        assert max(sizes) > BIG
        assert "showing the start of 10.5 MB" in response.content.decode()
        for note in notes:
            assert note.find("button", "load-rest") is not None

    def test_load_the_rest_serves_a_blocks_whole_text_as_plain_text(
        self, operator_client: Client, huge: Conversation
    ) -> None:
        root = page(operator_client.get(detail_url(huge)))
        message = root.by_id("m-2")
        assert message is not None
        button = message.find("section").find("button", "load-rest")
        response = operator_client.get(button.attrs["data-url"])
        assert response.status_code == 200
        assert response["Content-Type"] == "text/plain; charset=utf-8"
        assert response["X-Content-Type-Options"] == "nosniff"
        assert response.content.decode() == "z" * BIG
        shown = message.find("section").find("pre").text.removeprefix("\n")
        assert ("z" * BIG).startswith(shown) and 0 < len(shown) < BIG

    def test_a_cut_projection_is_the_start_of_the_true_projection_and_its_rest_is_served(
        self, operator_client: Client, huge: Conversation
    ) -> None:
        for vision, shape in [(1, "openai"), (0, "anthropic")]:
            root = page(operator_client.get(detail_url(huge, vision=vision, shape=shape)))
            wire = wire_messages(huge, vision=bool(vision), shape=shape)
            for seq in (0, 1, 2):
                message = root.by_id(f"m-{seq}")
                assert message is not None
                projection = message.find("div", "projection")
                pre = projection.find("pre", "wire")
                content = wire[seq]["content"]
                full = content if isinstance(content, str) else content[0]["text"]
                shown = pre.text.removeprefix("\n")
                assert full.startswith(shown) and len(shown) < len(full), (seq, vision)
                url = projection.find("button", "load-rest").attrs["data-url"]
                response = operator_client.get(url)
                assert response.status_code == 200
                assert response["X-Content-Type-Options"] == "nosniff"
                assert response.content.decode() == full

    def test_page_queries_load_no_image_data_and_cut_texts_in_sql(
        self, operator_client: Client, huge: Conversation
    ) -> None:
        # A first visit's reads: the token count's cold read (its stored figures) is among
        # the queries.
        token_counts.pressure_cache.clear()
        with CaptureQueriesContext(connection) as queries:
            page(operator_client.get(detail_url(huge)))
        block_reads = [
            q["sql"] for q in queries.captured_queries if 'FROM "conversations_block"' in q["sql"]
        ]
        assert block_reads
        for sql in block_reads:
            assert '"conversations_block"."data"' not in sql
            # The token count's cold read is of stored figures, never of texts (counted
            # once, when stored); every read that renders the page cuts them in SQL.
            if '"conversations_block"."text"' in sql:
                assert "SUBSTR" in sql.upper(), sql


def test_a_window_around_a_deep_link_holds_it_with_earlier_and_later(
    operator_client: Client, db: None
) -> None:
    conversation = long_conversation(400)
    url = reverse("earlier-messages", args=[str(conversation.id)])
    root = page(operator_client.get(f"{url}?around=200"))
    assert message_ids(root) == list(range(150, 250))
    assert query_of(root.by_id("earlier").find("button").attrs["hx-get"])["before"] == "150"
    assert query_of(root.by_id("later").find("button").attrs["hx-get"])["after"] == "249"
    root = page(operator_client.get(f"{url}?after=349"))
    assert message_ids(root) == list(range(350, 400))
    assert root.by_id("later") is None
    assert operator_client.get(f"{url}?after=-1").status_code == 400
    assert operator_client.get(url).status_code == 400


def test_a_message_of_many_blocks_shows_the_first_hundred_and_says_so(
    operator_client: Client, db: None
) -> None:
    conversation = conversation_with("Many", ("assistant", [text(f"step {n}") for n in range(130)]))
    root = page(operator_client.get(detail_url(conversation)))
    message = root.by_id("m-0")
    assert message is not None
    assert message.attrs["data-blocks"] == "130"
    assert len(message.find("div", "record").find_all("section")) == 100
    assert "30 more blocks not shown here" in message.text
    (wire,) = wire_messages(conversation, vision=True, shape="openai")
    projection = message.find("div", "projection")
    shown = projection.find("pre", "wire").text.removeprefix("\n")
    assert wire["content"].startswith(shown) and shown.endswith("step 99\n\n")
    response = operator_client.get(projection.find("button", "load-rest").attrs["data-url"])
    assert response.content.decode() == wire["content"]


def test_list_says_just_now_for_activity_within_a_minute(operator_client: Client, db: None) -> None:
    conversation_with("Fresh")
    (row,) = list_rows(page(operator_client.get("/")))
    assert row.find("time").text.strip() == "just now"
