"""Live updates in a real browser (docs/contract.md §4): Debian's Chromium, driven by
Playwright, watching pages served by a real daphne while an agent posts through the HTTP
API with a bearer token. What is asserted is what the operator sees: content appears
without a reload, exactly once, after any close and any server restart."""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2 as httpx
import pytest
from PIL import Image
from playwright.sync_api import expect

from conversations.record.models.conversation import Conversation, Message
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.services.api_tokens import api_token_create
from conversations.record.services.appending import block_append, message_append
from tests.browser.conftest import conversation, off_loop
from tests.conftest import Server, free_port, start_daphne

pytestmark = pytest.mark.live

NOT_SEEN = "[Image (image/png): not seen — this model cannot view images]"
HOSTILE = [
    "<script>window.__pwned=1</script>",
    '<img src=x onerror="window.__pwned=1">',
    '<div hx-get="/admin/" hx-trigger="load" hx-target="body">hx</div>',
]
RECONNECT = 30_000  # ms: the extension's full-jitter backoff grows while a server is down
# Counts the page's socket opens and closes (with the code the server or route used);
# an init script, so it is in place before the first socket opens and is not subject to
# the page's CSP.
WATCH_SOCKETS = """
window.__live = {opens: 0, closes: []};
document.addEventListener("htmx:wsOpen", () => { window.__live.opens += 1; });
document.addEventListener("htmx:wsClose", (e) => {
  const event = e.detail.event;
  window.__live.closes.push(event.originalCode === undefined ? event.code : event.originalCode);
});
"""


# --- the record, through the services and through the API -----------------------------


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def png() -> dict[str, Any]:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), (200, 40, 40)).save(buffer, format="PNG")
    return {
        "type": "image",
        "media_type": "image/png",
        "data": base64.b64encode(buffer.getvalue()).decode(),
    }


def created(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 201, response.text
    return response.json()


def post_message(agent: httpx.Client, c: Conversation, role: str, blocks: list[Any]) -> int:
    body = {"role": role, "blocks": blocks}
    return int(created(agent.post(f"/api/conversations/{c.id}/messages", json=body))["seq"])


def post_block(agent: httpx.Client, c: Conversation, seq: int, block: dict[str, Any]) -> None:
    created(agent.post(f"/api/conversations/{c.id}/messages/{seq}/blocks", json=block))


@pytest.fixture
def api_token(transactional_db: None) -> str:
    _, clear = off_loop(lambda: api_token_create(label="agent"))
    return clear


@pytest.fixture
def agent(daphne: Server, api_token: str) -> Iterator[httpx.Client]:
    """The agent's side: the JSON API of the shared daphne, with a real token."""
    with daphne.client(api_token) as client:
        yield client


# --- the page ---------------------------------------------------------------------------


def detail(c: Conversation) -> str:
    return f"/c/{c.id}/"


def open_live(page: Any, url: str) -> None:
    """Open a conversation page and wait until its socket is connected."""
    page.add_init_script(WATCH_SOCKETS)
    page.goto(url)
    expect(page.locator("#live-status")).to_have_text("live")


def socket_opens(page: Any) -> int:
    return int(page.evaluate("window.__live.opens"))


def record_blocks(page: Any, seq: int) -> Any:
    return page.locator(f"#m-{seq} .record .block")


def projection_text(page: Any, seq: int) -> str:
    return page.locator(f"#m-{seq} .projection pre.wire").text_content()


def near_bottom(page: Any) -> bool:
    return page.evaluate(
        "window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 2"
    )


# --- 1. blocks and messages appear without a reload -------------------------------------


def test_posted_block_and_message_appear_on_the_open_page_without_a_reload(operator_page, agent):
    page = operator_page
    c = conversation(
        "live disk check",
        [("user", [text("Check the disk.")]), ("assistant", [text("Looking.")])],
    )
    open_live(page, detail(c))
    page.evaluate("window.__sameDocument = true")
    totals = page.locator("#totals")
    expect(totals).to_have_text("2 messages · 2 blocks")

    post_block(
        agent,
        c,
        1,
        {"type": "tool_use", "id": "call_1", "name": "df", "input": {"path": "/", "h": True}},
    )
    expect(record_blocks(page, 1)).to_have_count(2)
    expect(record_blocks(page, 1).last).to_contain_text("df")
    expect(record_blocks(page, 1).last).to_contain_text("call_1")  # call ids shown on record
    expect(page.locator("#m-1 .projection")).to_contain_text("Tool use: df(")
    assert projection_text(page, 1) == 'Looking.\n\nTool use: df({"path":"/","h":true})'
    expect(totals).to_have_text("2 messages · 3 blocks")

    seq = post_message(
        agent, c, "user", [{"type": "tool_result", "tool_use_id": "call_1", "content": "91%"}]
    )
    assert seq == 2
    messages = page.locator("#messages > article.message")
    expect(messages).to_have_count(3)
    expect(messages.last).to_have_id("m-2")
    expect(page.locator("#m-2 .record .block-tool_result")).to_contain_text("91%")
    expect(page.locator("#m-2 .projection")).to_contain_text("Result (df): 91%")
    assert projection_text(page, 2) == "Result (df): 91%"
    expect(totals).to_have_text("3 messages · 4 blocks")
    expect(totals).to_have_attribute("data-blocks", "4")
    expect(page.locator("#live-status")).to_have_text("live")
    assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
    assert socket_opens(page) == 1


# --- 2. hostile content arriving live is inert ------------------------------------------


def test_hostile_content_arriving_live_is_shown_as_text_and_runs_nothing(operator_page, agent):
    page = operator_page
    c = conversation("hostile, live", [("user", [text("hello")])])
    requests: list[str] = []
    page.on("request", lambda request: requests.append(urlsplit(request.url).path))
    open_live(page, detail(c))

    post_message(
        agent,
        c,
        "assistant",
        [
            *(text(value) for value in HOSTILE),
            {"type": "reasoning", "text": HOSTILE[1]},
            {"type": "tool_use", "id": HOSTILE[1], "name": HOSTILE[0], "input": {"h": HOSTILE[2]}},
        ],
    )
    post_block(agent, c, 0, text(HOSTILE[2]))  # into a message already on the page
    expect(record_blocks(page, 1)).to_have_count(5)
    expect(record_blocks(page, 0)).to_have_count(2)
    page.wait_for_load_state("networkidle")
    for value in HOSTILE:
        expect(page.locator("#m-1 .block-text pre").get_by_text(value, exact=True)).to_be_visible()
    expect(page.locator("#m-0 .block-text pre").get_by_text(HOSTILE[2], exact=True)).to_be_visible()
    expect(page.locator("#m-1 .block-reasoning pre")).to_have_text(HOSTILE[1])
    projection = "\n\n".join([*HOSTILE, f"[Reasoning]: {HOSTILE[1]}"])
    assert projection_text(page, 1).startswith(projection)
    assert projection_text(page, 0) == f"hello\n\n{HOSTILE[2]}"
    expect(page.locator("#m-1 .record code.name")).to_have_text(HOSTILE[0])

    page.wait_for_timeout(300)  # time for a load trigger or an onerror, had one survived
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert (
        page.locator("main script, main img[src='x'], main [hx-trigger], main [onerror]").count()
        == 0
    )
    assert not [path for path in requests if path.startswith("/admin") or path.endswith("/x")]
    expect(page.locator("#live-status")).to_have_text("live")


# --- 3. the "N new messages" pill ------------------------------------------------------


def test_scrolled_up_page_keeps_its_place_and_counts_new_messages_in_a_pill(operator_page, agent):
    page = operator_page
    c = conversation(
        "60 messages",
        [("user" if n % 2 == 0 else "assistant", [text(f"message {n}")]) for n in range(60)],
    )
    open_live(page, detail(c))
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_function("() => window.scrollY === 0")
    pill = page.locator("#new-messages")
    expect(pill).to_be_hidden()

    post_message(agent, c, "user", [text("message 60")])
    post_message(agent, c, "assistant", [text("message 61")])
    # Inserted at once, even though the operator is reading elsewhere…
    expect(page.locator("#m-60")).to_have_count(1)
    expect(page.locator("#m-61")).to_have_count(1)
    expect(pill).to_have_text("2 new messages")
    expect(pill).to_be_visible()
    # …and the page stays where the operator was.
    assert page.evaluate("window.scrollY") == 0
    expect(page.locator("#m-0")).to_be_in_viewport()
    expect(page.locator("#m-61")).not_to_be_in_viewport()
    expect(page.locator("#totals")).to_have_text("62 messages · 62 blocks")

    pill.click()
    expect(page.locator("#m-61")).to_be_in_viewport()
    expect(pill).to_be_hidden()
    page.wait_for_function(
        "() => window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 2"
    )

    # At the bottom, the page follows new content, and no pill appears.
    post_message(agent, c, "user", [text("message 62")])
    expect(page.locator("#m-62")).to_be_in_viewport()
    expect(page.locator("#messages > article.message").last).to_have_id("m-62")
    assert near_bottom(page)
    expect(pill).to_be_hidden()


# --- 4. every close code leads to a reconnect and a resync ------------------------------

CLOSE_CODES = [1000, 1001, 1006, 1011]


def test_page_reconnects_after_every_close_code_and_shows_what_it_missed_once(operator_page, agent):
    page = operator_page
    routes: list[Any] = []

    def proxy(ws: Any) -> None:
        """Pass the page's socket through to the real server, closing both sides together
        (a browser socket may be closed only with 1000 or 3000–4999, so the server side is
        closed plainly, whatever code the page was given)."""
        server = ws.connect_to_server()
        ws.on_close(lambda code, reason: server.close())
        routes.append(ws)

    page.route_web_socket(re.compile(r"/ws/conversations/"), proxy)
    c = conversation("flaky network", [("user", [text("start")]), ("assistant", [text("b0")])])
    open_live(page, detail(c))
    status = page.locator("#live-status")

    for n, code in enumerate(CLOSE_CODES, start=1):
        held = len(routes)
        routes[-1].close(code=code, reason=f"test {code}")
        # The page saw this exact close before anything else happens.
        assert page.evaluate("window.__live.closes") == CLOSE_CODES[:n]
        expect(status).not_to_have_text("live")
        post_block(agent, c, 1, text(f"missed during {code}"))

        expect(status).to_have_text("live", timeout=RECONNECT)
        expect(record_blocks(page, 1)).to_have_count(1 + n)
        assert len(routes) == held + 1, "the page opened more than one new socket"
        expect(record_blocks(page, 1).filter(has_text=f"missed during {code}")).to_have_count(1)
        expect(page.locator("#m-1")).to_have_count(1)

    expected = ["b0", *(f"missed during {code}" for code in CLOSE_CODES)]
    assert projection_text(page, 1) == "\n\n".join(expected)
    assert record_blocks(page, 1).locator("pre").all_text_contents() == expected
    expect(page.locator("#totals")).to_have_text(f"2 messages · {2 + len(CLOSE_CODES)} blocks")
    assert socket_opens(page) == 1 + len(CLOSE_CODES)


# --- 5. the server restarted under an open page -----------------------------------------


@pytest.fixture
def own_daphne(transactional_db: None, tmp_path: Path) -> Iterator[list[Server]]:
    """A private daphne on a fixed port; the test may stop it and start it again. The
    list holds every server started there, the current one last."""
    servers = [start_daphne(tmp_path, port=free_port())]
    yield servers
    for server in servers:
        server.stop()


def test_server_restart_under_an_open_page_loses_nothing_and_repeats_nothing(
    operator_page, own_daphne, api_token, console, tmp_path
):
    # While the server is down, each failed attempt is reported by Chromium itself
    # ("WebSocket connection to … failed") and by htmx, which logs the socket's error
    # event as "[object Event]" (htmx:wsError): expected here, and only here.
    console.allow("WebSocket connection to")
    console.allow("[object Event]")
    page = operator_page
    server = own_daphne[-1]
    port = urlsplit(server.url).port
    c = conversation("restart", [("user", [text("start")]), ("assistant", [text("b0")])])
    # The session cookie is per host, not per port: the operator is signed in here too.
    open_live(page, server.url + detail(c))
    with server.client(api_token) as agent:
        post_block(agent, c, 1, text("before the restart"))
    expect(record_blocks(page, 1)).to_have_count(2)

    server.stop()
    expect(page.locator("#live-status")).to_have_text(re.compile("reconnecting|offline"))

    def ingest_while_down() -> None:
        message = Message.objects.get(conversation_id=c.id, seq=1)
        block_append(message=message, block=BLOCK_ADAPTER.validate_python(text("while down")))
        message_append(
            conversation=Conversation.objects.get(pk=c.id),
            role="user",
            blocks=[BLOCK_ADAPTER.validate_python(text("a message while down"))],
        )

    off_loop(ingest_while_down)
    own_daphne.append(start_daphne(tmp_path, port=port))
    server = own_daphne[-1]

    expect(page.locator("#live-status")).to_have_text("live", timeout=RECONNECT)
    expect(record_blocks(page, 1)).to_have_count(3)
    expect(page.locator("#m-2")).to_have_count(1)
    expect(page.locator("#m-2 .record")).to_contain_text("a message while down")
    with server.client(api_token) as agent:
        post_block(agent, c, 2, text("after the restart"))
    expect(record_blocks(page, 2)).to_have_count(2)

    assert record_blocks(page, 1).locator("pre").all_text_contents() == [
        "b0",
        "before the restart",
        "while down",
    ]
    assert projection_text(page, 2) == "a message while down\n\nafter the restart"
    expect(page.locator("#messages > article.message")).to_have_count(3)
    expect(page.locator("#totals")).to_have_text("3 messages · 6 blocks")


# --- 6. the toggles re-connect with the new variant -------------------------------------


def test_toggled_vision_reconnects_the_socket_and_live_images_follow_the_toggle(
    operator_page, agent
):
    page = operator_page
    c = conversation("vision", [("user", [text("Look at this.")])])
    open_live(page, detail(c))

    with page.expect_websocket(lambda ws: "vision=0" in ws.url) as opened:
        page.get_by_role("link", name="Vision off").click()
    expect(page.get_by_role("link", name="Vision off")).to_have_attribute("aria-current", "true")
    expect(page.locator("#live-status")).to_have_text("live")
    assert f"/ws/conversations/{c.id}/?vision=0&shape=openai" in opened.value.url

    post_message(agent, c, "user", [text("Here it is."), png()])
    projection = page.locator("#m-1 .projection")
    expect(projection).to_contain_text(NOT_SEEN)
    assert projection_text(page, 1) == f"Here it is.\n\n{NOT_SEEN}"
    expect(projection.locator("img")).to_have_count(0)
    expect(page.locator("#m-1 .record img")).to_have_count(1)

    with page.expect_websocket(lambda ws: "vision=1" in ws.url) as reopened:
        page.get_by_role("link", name="Vision on").click()
    expect(page.locator("#live-status")).to_have_text("live")
    assert opened.value.is_closed(), "the vision-off socket was left open"
    post_message(agent, c, "user", [png()])
    expect(page.locator("#m-2 .projection .part-image img")).to_have_count(1)
    expect(page.locator("#m-2 .projection")).not_to_contain_text("not seen")
    assert not reopened.value.is_closed()


# --- 7. the list page ------------------------------------------------------------------


def open_list(page: Any) -> None:
    page.add_init_script(WATCH_SOCKETS)
    page.goto("/")
    page.wait_for_function("() => window.__live.opens === 1")


def test_list_moves_active_conversations_to_the_top_and_shows_new_ones(operator_page, agent):
    page = operator_page
    first = conversation("first", [("user", [text("one")])])
    second = conversation("second", [("user", [text("two")])])
    open_list(page)
    rows = page.locator("#results tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first).to_have_id(f"c-{second.id}")

    post_message(agent, first, "assistant", [text("activity")])
    expect(rows.first).to_have_id(f"c-{first.id}")
    expect(rows.first.locator("td.num")).to_have_text("2")
    expect(rows).to_have_count(2)

    new = created(agent.post("/api/conversations", json={"title": "brand new"}))
    expect(rows.first).to_have_id(f"c-{new['id']}")
    expect(rows.first).to_contain_text("brand new")
    expect(rows).to_have_count(3)
    assert rows.evaluate_all("rows => rows.map(r => r.id)") == [
        f"c-{new['id']}",
        f"c-{first.id}",
        f"c-{second.id}",
    ]


def test_first_conversation_appears_live_on_an_empty_list(operator_page, agent):
    """The empty list still has a table body for the first conversation's row."""
    page = operator_page
    open_list(page)
    expect(page.locator("#results .empty")).to_contain_text("No conversations yet")

    new = created(agent.post("/api/conversations", json={"title": "the very first"}))
    expect(page.locator(f"#c-{new['id']}")).to_contain_text("the very first")


def test_list_catches_up_after_its_socket_was_closed(operator_page, agent):
    """The list has no positions to resume from: after a reconnect it is fetched again."""
    page = operator_page
    routes: list[Any] = []

    def proxy(ws: Any) -> None:
        server = ws.connect_to_server()
        ws.on_close(lambda code, reason: server.close())
        routes.append(ws)

    page.route_web_socket(re.compile(r"/ws/conversations/(\?since=[^/]*)?$"), proxy)
    old = conversation("old", [("user", [text("one")])])
    open_list(page)
    routes[-1].close(code=1000, reason="test")
    missed = created(agent.post("/api/conversations", json={"title": "while away"}))
    post_message(agent, old, "assistant", [text("activity while away")])

    rows = page.locator("#results tbody tr")
    expect(rows.first).to_have_id(f"c-{old.id}", timeout=RECONNECT)
    expect(rows.first.locator("td.num")).to_have_text("2")
    expect(page.locator(f"#c-{missed['id']}")).to_have_count(1)
    expect(rows).to_have_count(2)


# --- 10. bounds and following (docs/contract.md §4, Bounds) ---------------------------------------


def lines(label: str, count: int = 30) -> dict[str, Any]:
    return text("\n".join(f"{label} line {i}" for i in range(count)))


def test_a_page_opens_at_its_tail_and_follows_a_growing_last_message(operator_page, agent):
    page = operator_page
    c = conversation(
        "growing", [("user" if n % 2 == 0 else "assistant", [lines(f"m{n}")]) for n in range(40)]
    )
    open_live(page, detail(c))
    # Opens at the tail: the latest message in view, the page scrolled to its end.
    expect(page.locator("#m-39")).to_be_in_viewport()
    page.wait_for_function(
        "() => window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 2"
    )
    pill = page.locator("#new-messages")
    for n in range(3):
        post_block(agent, c, 39, lines(f"appended {n}"))
        expect(record_blocks(page, 39)).to_have_count(2 + n)
        page.wait_for_function(
            "() => window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 2"
        )
    expect(record_blocks(page, 39).last).to_be_in_viewport()
    expect(pill).to_be_hidden()
    # The operator never scrolled: the next message is followed too, with no pill.
    post_message(agent, c, "user", [text("next")])
    expect(page.locator("#m-40")).to_be_in_viewport()
    assert near_bottom(page)
    expect(pill).to_be_hidden()


def test_scrolled_up_pill_counts_new_blocks_and_new_messages(operator_page, agent):
    page = operator_page
    c = conversation(
        "pill", [("user" if n % 2 == 0 else "assistant", [lines(f"m{n}", 5)]) for n in range(40)]
    )
    open_live(page, detail(c))
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_function("() => window.scrollY === 0")
    pill = page.locator("#new-messages")
    post_block(agent, c, 39, text("one more"))
    expect(pill).to_have_text("1 new block")
    post_block(agent, c, 39, text("and another"))
    expect(pill).to_have_text("2 new blocks")
    post_message(agent, c, "user", [text("a message")])
    expect(pill).to_have_text("1 new message · 2 new blocks")
    assert page.evaluate("window.scrollY") == 0
    pill.click()
    expect(page.locator("#m-40")).to_be_in_viewport()
    expect(pill).to_be_hidden()


def test_following_the_tail_trims_the_far_end_beyond_300_messages(operator_page, agent):
    page = operator_page
    c = conversation("busy", [("user", [text(f"message {n}")]) for n in range(295)])
    open_live(page, detail(c))
    messages = page.locator("#messages > article.message")
    expect(messages).to_have_count(100)
    page.locator("#earlier button").click()
    expect(messages).to_have_count(200)
    page.locator("#earlier button").click()
    expect(messages).to_have_count(295)
    expect(page.locator("#earlier")).to_have_count(0)
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
    for n in range(295, 305):
        post_message(agent, c, "user", [text(f"message {n}")])
    expect(page.locator("#m-304")).to_be_in_viewport()
    expect(messages).to_have_count(300)
    expect(messages.first).to_have_id("m-5")
    expect(page.locator("#earlier button")).to_have_text("Load earlier messages (before #5)")
    # What was trimmed is not live any more; the held end still is.
    post_block(agent, c, 2, text("far away"))
    post_block(agent, c, 304, text("close by"))
    expect(record_blocks(page, 304)).to_have_count(2)
    expect(page.locator("#m-2")).to_have_count(0)
    # "Load earlier" brings the trimmed messages back, with their new block.
    page.locator("#earlier button").click()
    expect(record_blocks(page, 2)).to_have_count(2)
    expect(messages).to_have_count(300)
    expect(messages.first).to_have_id("m-0")
    expect(messages.last).to_have_id("m-299")
    expect(page.locator("#later button")).to_have_text("Load later messages (after #299)")


def test_a_text_that_starts_with_newlines_shows_the_same_live_as_after_a_reload(
    operator_page, agent
):
    # Claude Code writes "\n\n" text blocks: a swap that serialises the frame and parses
    # it again loses the one leading newline the parser drops after <pre>.
    page = operator_page
    c = conversation("newlines", [("user", [text("start")])])
    open_live(page, detail(c))
    post_message(agent, c, "assistant", [text("\n\nafter two newlines")])
    expect(record_blocks(page, 1)).to_have_count(1)
    live = [record_blocks(page, 1).first.locator("pre").text_content(), projection_text(page, 1)]
    page.reload()
    expect(record_blocks(page, 1)).to_have_count(1)
    again = [record_blocks(page, 1).first.locator("pre").text_content(), projection_text(page, 1)]
    assert again == ["\n\nafter two newlines"] * 2
    assert live == again
