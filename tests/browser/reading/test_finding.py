"""The finder in a real browser (docs/guide/dashboard.md), at 1440 px and at 390 px: block filters,
`/` search stepping across the window boundary, n / N to the one failing tool call of a
2,000-message run, the `?` help, and tool rounds (links both ways, the hover pair, the "no result"
marker and its removal when the result arrives live)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2 as httpx
import pytest
from playwright.sync_api import expect

from conversations.record.models.conversation import Conversation
from conversations.record.schemas import MessageIn
from conversations.record.services.api_tokens import api_token_create
from conversations.record.services.appending import messages_append
from conversations.record.services.conversations import conversation_create, conversation_update
from conversations.sharing.services import share_create
from tests.browser.conftest import off_loop
from tests.builders import png
from tests.conftest import Server

pytestmark = pytest.mark.live

VIEWPORTS = {"desktop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def call(call_id: str, name: str = "run") -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": {"step": call_id}}


def result(call_id: str, content: str = "ok", *, error: bool = False) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": error}


def stored(messages: list[tuple[str, list[dict[str, Any]]]], title: str = "Run") -> Conversation:
    """Through the batch service: 2,000 messages in one transaction, in well under a second."""

    def store() -> Conversation:
        conversation = conversation_create(title=title)
        messages_append(
            conversation=conversation,
            messages=[MessageIn.model_validate({"role": r, "blocks": b}) for r, b in messages],
        )
        return conversation

    return off_loop(store)


@pytest.fixture
def agent(daphne: Server, transactional_db: None) -> Iterator[httpx.Client]:
    """The agent's side, posting through the JSON API of the shared daphne (whose live
    layer is its own): what arrives live on the page."""
    _, token = off_loop(lambda: api_token_create(label="agent"))
    with daphne.client(token) as client:
        yield client


def append(agent: httpx.Client, c: Conversation, role: str, blocks: list[dict[str, Any]]) -> None:
    body = {"role": role, "blocks": blocks}
    response = agent.post(f"/api/conversations/{c.id}/messages", json=body)
    assert response.status_code == 201, response.text


def rounds(count: int, *, error_at: int | None = None) -> list[tuple[str, list[dict[str, Any]]]]:
    """A call in each even message, its result in the next; the round at `error_at` fails."""
    messages: list[tuple[str, list[dict[str, Any]]]] = []
    for seq in range(count):
        if seq % 2 == 0:
            messages.append(("assistant", [text(f"step {seq}"), call(f"call-{seq}")]))
        else:
            start = seq - 1
            failed = start == error_at
            content = "Permission denied: /etc/shadow" if failed else f"output of {start}"
            messages.append(("user", [result(f"call-{start}", content, error=failed)]))
    return messages


@pytest.fixture(params=list(VIEWPORTS))
def screen(request: pytest.FixtureRequest, operator_page: Any) -> tuple[Any, str]:
    """The signed-in page at a desktop's or a phone's width."""
    operator_page.set_viewport_size(VIEWPORTS[request.param])
    return operator_page, request.param


def open_page(page: Any, conversation: Conversation, fragment: str = "") -> None:
    page.goto(f"/c/{conversation.id}/{fragment}")
    expect(page.locator("#live-status")).to_have_text("live")


def in_view(page: Any, selector: str) -> bool:
    """The element is on screen, below the sticky header and above a bottom toolbar."""
    return page.eval_on_selector(
        selector,
        """el => {
          const box = el.getBoundingClientRect();
          const head = document.querySelector('.conv-head').getBoundingClientRect();
          const nav = document.querySelector('.find-nav').getBoundingClientRect();
          const bottom = getComputedStyle(document.querySelector('.find-nav')).position === 'fixed'
            ? nav.top : window.innerHeight;
          const top = head.bottom > 0 ? Math.max(0, head.bottom) : 0;
          return box.height > 0 && box.top < bottom && box.bottom > top;
        }""",
    )


def no_overflow(page: Any) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"{width}px wide"


# -- 1. filters ------------------------------------------------------------------------------


def test_filters_hide_what_does_not_match_count_it_and_apply_to_live_messages(screen, agent):
    page, _ = screen
    messages: list[tuple[str, list[dict[str, Any]]]] = [
        ("user", [text("look at this"), png()]),
        ("assistant", [{"type": "reasoning", "text": "thinking"}, call("a")]),
        ("user", [result("a", "broke", error=True)]),
        ("assistant", [text("plain words")]),
    ]
    conversation = stored(messages)
    open_page(page, conversation)
    shown = page.locator("#messages > article.message:visible")
    expect(shown).to_have_count(4)
    page.get_by_role("button", name="Errors", exact=True).click()
    expect(page.get_by_role("button", name="Errors", exact=True)).to_have_attribute(
        "aria-pressed", "true"
    )
    expect(shown).to_have_count(1)
    expect(shown.first).to_have_id("m-2")
    expect(page.locator("#filter-count")).to_have_text(
        "1 of 4 messages on this page (#0–#3) have errors (1 block)"
    )
    page.get_by_role("button", name="Tool calls").click()
    expect(shown).to_have_count(2)
    # Inside a shown message, the blocks of other kinds are hidden too.
    expect(page.locator("#m-1 .record .block-reasoning")).to_be_hidden()
    expect(page.locator("#m-1 .record .block-tool_use")).to_be_visible()
    page.get_by_role("button", name="Reasoning").click()
    expect(shown).to_have_count(1)
    page.get_by_role("button", name="Images").click()
    expect(shown).to_have_count(1)
    expect(shown.first).to_have_id("m-0")
    # Live messages are filtered as they land.
    page.get_by_role("button", name="Errors", exact=True).click()
    append(agent, conversation, "assistant", [text("no error here")])
    append(agent, conversation, "user", [result("z", "another failure", error=True)])
    expect(page.locator("#m-5")).to_be_visible()
    expect(page.locator("#m-4")).to_be_attached()
    expect(page.locator("#m-4")).to_be_hidden()
    expect(page.locator("#filter-count")).to_have_text(
        "2 of 6 messages on this page (#0–#5) have errors (2 blocks)"
    )
    # j / k step through what is shown only.
    page.keyboard.press("j")
    page.keyboard.press("j")
    expect(page.locator("#messages > .message.current")).to_have_id("m-5")
    page.keyboard.press("k")
    expect(page.locator("#messages > .message.current")).to_have_id("m-2")
    page.get_by_role("button", name="All", exact=True).click()
    expect(shown).to_have_count(6)
    expect(page.locator("#filter-summary")).to_be_hidden()
    no_overflow(page)


def test_a_filter_finds_more_beyond_the_window_through_the_server(screen):
    page, _ = screen
    messages = [("user", [text(f"message {seq}")]) for seq in range(400)]
    messages[12] = ("user", [result("old", "an old failure", error=True)])
    conversation = stored(messages)
    open_page(page, conversation)  # messages 300–399
    page.get_by_role("button", name="Errors", exact=True).click()
    expect(page.locator("#filter-count")).to_have_text(
        "0 of 100 messages on this page (#300–#399) have errors (0 blocks)"
    )
    expect(page.locator("#filter-after")).to_be_hidden()  # nothing after the tail
    page.get_by_role("button", name="Find error before #300").click()
    expect(page.locator("#m-12 .record .block.find-hit")).to_be_visible()
    assert in_view(page, "#m-12 .find-hit")
    expect(page.locator("#find-status")).to_have_text("Found error · #12")
    expect(page.locator("#messages > article.message:visible")).to_have_count(1)  # still filtered
    no_overflow(page)


# -- 2. search within the conversation -------------------------------------------------------


def test_slash_searches_the_whole_conversation_and_steps_across_the_window(screen, console):
    page, _ = screen
    console.allow("status of 400 (Bad Request)")  # the refused search below
    messages = [("user", [text(f"filler {seq}")]) for seq in range(400)]
    for seq in (10, 150, 250):
        messages[seq] = ("user", [text(f"before <b>bold</b> the Needle of {seq} after")])
    messages[399] = ("assistant", [text("the last message")])
    conversation = stored(messages)
    open_page(page, conversation)  # 300–399: no hit in the window
    page.keyboard.press("/")
    box = page.locator("#find-q")
    expect(box).to_be_focused()
    page.keyboard.type("needle")
    status = page.locator("#find-status")

    def at(seq: int, expected: str, *, typing: bool = True) -> None:
        expect(status).to_have_text(expected)
        hit = f"#m-{seq} .record .block.find-hit"
        expect(page.locator(hit)).to_be_visible()
        expect(page.locator(".find-hit")).to_have_count(1)
        assert in_view(page, hit), f"#m-{seq} is not in view"
        if typing:
            expect(box).to_be_focused()  # Enter goes on stepping from the box

    page.keyboard.press("Enter")  # nothing after the tail: round to the start
    at(10, "1 of 3 · #10 text: before <b>bold</b> the Needle of 10 after (from the start)")
    assert page.locator("#find-status b").count() == 0  # the snippet is text, not markup
    page.keyboard.press("Enter")
    at(150, "2 of 3 · #150 text: before <b>bold</b> the Needle of 150 after")
    page.keyboard.press("Enter")
    at(250, "3 of 3 · #250 text: before <b>bold</b> the Needle of 250 after")
    page.keyboard.press("Shift+Enter")
    at(150, "2 of 3 · #150 text: before <b>bold</b> the Needle of 150 after")
    page.locator("#find-prev").click()
    at(10, "1 of 3 · #10 text: before <b>bold</b> the Needle of 10 after", typing=False)
    page.locator("#find-prev").click()  # before the first: round to the end
    at(
        250,
        "3 of 3 · #250 text: before <b>bold</b> the Needle of 250 after (from the end)",
        typing=False,
    )
    # The list's limits apply: a refusal is said, as text.
    box.fill(" ".join(f"w{i}" for i in range(17)))
    page.keyboard.press("Enter")
    expect(status).to_have_text("q has 17 different words; a search may have at most 16.")
    # Esc clears the box and stays; a second leaves it for the message the reader is on.
    page.keyboard.press("Escape")
    expect(box).to_be_focused()
    expect(box).to_have_value("")
    page.keyboard.press("Escape")
    expect(box).not_to_be_focused()
    expect(page.locator("#m-250")).to_be_focused()
    no_overflow(page)


# -- 3. n / N: the one failing tool call of a 2,000-message run ------------------------------


def test_the_one_failing_tool_call_in_2000_messages_in_one_key_or_tap(screen):
    page, name = screen
    conversation = stored(rounds(2000, error_at=150))
    open_page(page, conversation)  # the tail: 1900–1999
    expect(page.locator("#m-151")).to_have_count(0)
    if name == "desktop":
        page.keyboard.press("n")
    else:
        button = page.get_by_role("button", name="Next problem")
        # In a thumb's reach at the bottom, wherever the page is scrolled.
        place = page.locator("#problem-next").bounding_box()
        assert place["y"] > 600 and place["y"] + place["height"] <= 844
        button.click()
    failing = page.locator("#m-151 .record .block-tool_result.find-hit")
    expect(failing).to_be_visible()
    expect(failing).to_contain_text("Permission denied: /etc/shadow")
    expect(page.locator("#m-151")).to_be_focused()
    assert in_view(page, "#m-151 .find-hit")
    expect(page.locator("#find-status")).to_have_text("Tool error · #151 (from the start)")
    expect(page).to_have_url(f"{page.url.split('#')[0]}#m-151")
    # N goes back round to the same one: the only problem there is.
    page.keyboard.press("N") if name == "desktop" else page.locator("#problem-prev").click()
    expect(page.locator("#find-status")).to_have_text("Tool error · #151 (from the end)")
    no_overflow(page)


def test_keys_are_ignored_while_typing_and_the_help_lists_them(screen):
    page, _ = screen
    conversation = stored(rounds(6, error_at=2))
    open_page(page, conversation)
    dialog = page.locator("#shortcuts")
    page.locator("#find-q").click()
    page.keyboard.type("n?N")
    expect(page.locator("#find-q")).to_have_value("n?N")
    expect(dialog).to_be_hidden()
    expect(page.locator(".find-hit")).to_have_count(0)
    page.keyboard.press("Escape")  # clears the box
    page.keyboard.press("Escape")  # leaves it
    page.keyboard.press("?")
    expect(dialog).to_be_visible()
    for key in ["j", "k", "/", "n", "N", "Esc", "?"]:
        expect(dialog.locator("kbd", has_text=key).first).to_be_visible()
    box = dialog.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= page.viewport_size["width"]
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    page.get_by_role("button", name="Keyboard shortcuts").click()  # for touch, too
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Close").click()
    expect(dialog).to_be_hidden()


# -- 5. tool rounds --------------------------------------------------------------------------


def test_a_call_and_its_result_link_both_ways_and_highlight_as_a_pair(screen):
    page, _ = screen
    messages = [("user", [text(f"message {seq}")]) for seq in range(300)]
    messages[3] = ("assistant", [call("far")])  # its result is at 280, in the tail window
    messages[280] = ("user", [result("far", "late output")])
    messages[290] = ("assistant", [call("near")])
    messages[291] = ("user", [result("near", "near output")])
    conversation = stored(messages)
    open_page(page, conversation)  # 200–299
    near_call = page.locator("#m-290 .call-id")
    near_result = page.locator("#m-291 .call-id")
    expect(near_call).to_have_attribute("href", "#m-291")
    expect(near_result).to_have_attribute("href", "#m-290")
    near_call.hover() if page.viewport_size["width"] > 700 else near_call.focus()
    expect(page.locator("#m-290 .block-tool_use")).to_have_class("block block-tool_use round-pair")
    expect(page.locator("#m-291 .block-tool_result")).to_have_class(
        "block block-tool_result round-pair"
    )
    far_result = page.locator("#m-280 .call-id")
    expect(far_result).to_have_attribute("href", "#m-3")  # the server resolved it
    far_result.click()
    hit = page.locator("#m-3 .record .block-tool_use.find-hit")
    expect(hit).to_be_visible()
    assert in_view(page, "#m-3 .find-hit")
    expect(page.locator("#m-3")).to_be_focused()
    expect(page.locator("#m-3 .call-id")).to_have_attribute("href", "#m-280")
    expect(page.locator(".no-result")).to_have_count(0)
    no_overflow(page)


def test_a_call_without_a_result_says_so_until_its_result_arrives_live(screen, agent):
    page, _ = screen
    conversation = stored([("user", [text("go")]), ("assistant", [call("pending")])])
    open_page(page, conversation)
    marker = page.locator("#m-1 .no-result")
    expect(marker).to_have_text("no result")
    expect(page.locator("#m-1 .call-id")).not_to_have_attribute("href", "#m-2")
    # A second call arrives live, unanswered; then both results.
    append(agent, conversation, "assistant", [call("second")])
    expect(page.locator("#m-2 .no-result")).to_have_text("no result")
    append(agent, conversation, "user", [result("pending", "done"), result("second", "done too")])
    expect(page.locator(".no-result")).to_have_count(0)
    expect(page.locator("#m-1 .call-id")).to_have_attribute("href", "#m-3")
    expect(page.locator("#m-2 .call-id")).to_have_attribute("href", "#m-3")
    # And a reload shows the same.
    page.reload()
    expect(page.locator("#m-1 .call-id")).to_have_attribute("href", "#m-3")
    expect(page.locator(".no-result")).to_have_count(0)


# -- share pages -----------------------------------------------------------------------------


def test_a_share_page_finds_through_its_own_link_and_no_further(page, daphne):
    conversation = stored(rounds(400, error_at=20) + [("user", [text("secret needle")])])
    _, live = off_loop(lambda: share_create(conversation=conversation))
    _, frozen = off_loop(lambda: share_create(conversation=conversation, up_to_seq=350))
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(f"/s/{live}/")  # signed out: the link is the only credential
    expect(page.locator("#live-status")).to_have_text("live")
    page.keyboard.press("n")
    expect(page.locator("#m-21 .record .block-tool_result.find-hit")).to_be_visible()
    assert all(f"/s/{live}/" in url for url in requests if "/find" in url or "around=" in url)
    # A frozen link's search knows nothing past its last message.
    page.goto(f"/s/{frozen}/")
    page.keyboard.press("/")
    page.keyboard.type("secret")
    page.keyboard.press("Enter")
    expect(page.locator("#find-status")).to_have_text("No matches in this conversation.")


def test_n_steps_to_a_stored_compaction_and_says_so(operator_page):
    page = operator_page
    conversation = stored(rounds(400, error_at=300))
    marks = [{"kind": "compact_boundary", "trigger": "auto", "preTokens": 150_000, "seq": 120}]
    off_loop(
        lambda: conversation_update(
            conversation=conversation,
            title=conversation.title,
            metadata=conversation.metadata | {"compact_boundaries": marks},
        )
    )
    open_page(page, conversation, "#m-0")
    expect(page.locator("#m-0")).to_be_visible()  # the deep link's window is held
    page.keyboard.press("n")
    expect(page.locator("#find-status")).to_have_text("Compaction · #120")
    expect(page.locator("#m-120")).to_be_focused()
    page.keyboard.press("n")
    expect(page.locator("#find-status")).to_have_text("Tool error · #301")
    expect(page.locator("#m-301 .find-hit")).to_be_visible()  # landed
    page.keyboard.press("N")
    expect(page.locator("#find-status")).to_have_text("Compaction · #120")
