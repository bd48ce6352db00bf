"""The dashboard in a real browser: Debian's Chromium, driven by Playwright, against the
real daphne server on the test database (docs/contract.md §4)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect

from conversations.ingest.imports import transcript_import
from conversations.record.demo import load_demo
from conversations.record.models.conversation import Conversation
from conversations.record.services.api_tokens import api_token_create
from tests.browser.conftest import conversation, make_user, off_loop, sign_in
from tests.conftest import ROOT

pytestmark = pytest.mark.live

NOT_SEEN = "[Image (image/png): not seen — this model cannot view images]"
SCREENSHOT = ROOT / "static" / "screenshot-conversation.png"
PHONE_SCREENSHOT = ROOT / "static" / "screenshot-phone.png"


def stored_demo() -> Conversation:
    return off_loop(load_demo)


def long_conversation(count: int) -> Conversation:
    return conversation(
        f"{count} messages",
        [
            ("user" if seq % 2 == 0 else "assistant", [{"type": "text", "text": f"message {seq}"}])
            for seq in range(count)
        ],
    )


def detail(c: Conversation) -> str:
    return f"/c/{c.id}/"


def clipboard(page: Any) -> str:
    return page.evaluate("navigator.clipboard.readText()")


def test_sign_in_lands_on_the_list_with_the_demo_conversation(page, operator):
    demo = stored_demo()
    page.goto("/accounts/login/")
    sign_in(page, operator)
    page.wait_for_url("/")
    link = page.get_by_role("link", name="Demo: api-7 latency alert")
    expect(link).to_have_attribute("href", detail(demo))
    expect(page.locator(f"#c-{demo.id}")).to_contain_text("unanswered tool call")


def test_anonymous_deep_link_goes_through_sign_in_and_back(page, operator):
    demo = stored_demo()
    page.goto(detail(demo))
    page.wait_for_url(re.compile(r"/accounts/login/\?next="))
    assert parse_qs(urlsplit(page.url).query) == {"next": [detail(demo)]}
    sign_in(page, operator)
    page.wait_for_url(detail(demo))
    expect(page.locator("h1")).to_have_text("Demo: api-7 latency alert")


def test_each_message_shows_its_record_beside_its_projection(operator_page):
    page = operator_page
    demo = stored_demo()
    page.goto(detail(demo))
    expect(page).to_have_title("Demo: api-7 latency alert · Replay")
    messages = page.locator("article.message")
    expect(messages).to_have_count(6)
    for index in range(6):
        message = messages.nth(index)
        expect(message).to_have_id(f"m-{index}")
        record = message.locator(".record").bounding_box()
        projection = message.locator(".projection").bounding_box()
        assert projection["x"] >= record["x"] + record["width"], f"m-{index} is not side by side"
        assert abs(projection["y"] - record["y"]) < 2
    # Vision on (the default): the image crosses as an image part, and it loads.
    image_part = page.locator("#m-1 .projection .part-image img")
    expect(image_part).to_be_visible()
    assert image_part.evaluate("img => img.complete && img.naturalWidth") == 96
    expect(page.locator("#m-1 .record .block-image img")).to_be_visible()


def test_toggles_change_the_projection_in_place_and_the_url_reproduces_the_view(operator_page):
    page = operator_page
    demo = stored_demo()
    page.goto(detail(demo))
    page.evaluate("window.__sameDocument = true")
    projection = page.locator("#m-1 .projection")
    expect(projection).not_to_contain_text(NOT_SEEN)

    page.get_by_role("link", name="Vision off").click()
    expect(projection).to_contain_text(NOT_SEEN)
    expect(projection.locator("img")).to_have_count(0)
    expect(page).to_have_url(re.compile(r"[?&]vision=0(&|$)"))
    lifted = page.locator("#m-0 .projection .note")
    expect(lifted).to_have_count(0)

    page.get_by_role("link", name="Anthropic").click()
    expect(lifted).to_have_text("lifted into the request's system")
    expect(page).to_have_url(re.compile(r"[?&]shape=anthropic(&|$)"))
    expect(page).to_have_url(re.compile(r"[?&]vision=0(&|$)"))
    assert page.evaluate("window.__sameDocument") is True, "the toggles reloaded the page"
    expect(page.get_by_role("link", name="Anthropic")).to_have_attribute("aria-current", "true")

    page.reload()
    assert page.evaluate("window.__sameDocument") is None
    expect(projection).to_contain_text(NOT_SEEN)
    expect(lifted).to_have_text("lifted into the request's system")
    expect(page.get_by_role("link", name="Vision off")).to_have_attribute("aria-current", "true")
    expect(page.get_by_role("link", name="Anthropic")).to_have_attribute("aria-current", "true")


def test_copied_and_downloaded_payloads_are_the_api_replay_bytes(operator_page, daphne):
    page = operator_page
    demo = stored_demo()
    _, token = off_loop(lambda: api_token_create(label="browser"))
    with daphne.client(token) as client:
        default = client.get(f"/api/conversations/{demo.id}/replay").content
        toggled = client.get(
            f"/api/conversations/{demo.id}/replay", params={"vision": 0, "shape": "anthropic"}
        ).content
    assert default != toggled
    page.goto(detail(demo))
    copy = page.locator("#copy-payload")

    copy.click()
    expect(copy).to_have_text("Copied")
    assert clipboard(page).encode() == default

    for name in ["Vision off", "Anthropic"]:  # one at a time: each swap replaces the links
        page.get_by_role("link", name=name).click()
        expect(page.get_by_role("link", name=name)).to_have_attribute("aria-current", "true")
    expect(page).to_have_url(re.compile(r"\?vision=0&shape=anthropic$"))
    expect(copy).to_have_text("Copy payload")  # a fresh button, not the first one's flash
    copy.click()
    expect(copy).to_have_text("Copied")
    assert clipboard(page).encode() == toggled

    with page.expect_download() as download:
        page.get_by_role("link", name="Download payload").click()
    assert Path(download.value.path()).read_bytes() == toggled
    assert download.value.suggested_filename == f"replay-{demo.id}-anthropic-vision-off.json"


def test_deep_link_outside_the_first_window_loads_and_scrolls_to_the_message(
    operator_page, context
):
    page = operator_page
    long = long_conversation(300)
    page.goto(f"{detail(long)}?vision=1&shape=openai#m-20")
    target = page.locator("#m-20")
    expect(target).to_be_in_viewport()
    expect(target).to_have_class(re.compile(r"\bcurrent\b"))
    # docs/contract.md §4 Bounds: the window around the target, not everything up to the tail.
    expect(page.locator("#m-199")).to_have_count(0)
    expect(page.locator("#later button")).to_have_text("Load later messages (after #99)")

    page.locator("#m-25 .permalink").click()
    expect(page.locator("#m-25 .permalink")).to_have_text("#25 · link copied")
    link = clipboard(page)
    assert link.endswith("#m-25")
    assert urlsplit(link).query == "vision=1&shape=openai"

    opened = context.new_page()
    opened.goto(link)
    expect(opened.locator("#m-25")).to_be_in_viewport()
    expect(opened.locator("#m-20")).not_to_be_in_viewport()


def test_switching_a_toggle_keeps_the_deep_linked_message_in_view(operator_page):
    """An operator reading message 20 of 300 who switches vision off sees message 20's
    projection without vision, not the latest window, and the URL still names it."""
    page = operator_page
    long = long_conversation(300)
    page.goto(f"{detail(long)}?vision=1&shape=openai#m-20")
    expect(page.locator("#m-20")).to_be_in_viewport()
    page.get_by_role("link", name="Vision off").click()
    expect(page.get_by_role("link", name="Vision off")).to_have_attribute("aria-current", "true")
    expect(page).to_have_url(re.compile(r"\?vision=0&shape=openai#m-20$"))
    expect(page.locator("#m-20")).to_be_in_viewport()


def test_load_earlier_messages_prepends_a_window_and_moves_the_button_up(operator_page):
    page = operator_page
    long = long_conversation(300)
    page.goto(detail(long))
    messages = page.locator("article.message")
    expect(messages).to_have_count(100)
    expect(messages.first).to_have_id("m-200")
    expect(page.locator("#m-199")).to_have_count(0)
    earlier = page.locator("#earlier button")
    expect(earlier).to_have_text("Load earlier messages (before #200)")

    earlier.click()
    expect(page.locator("#m-199")).to_have_count(1)
    expect(messages).to_have_count(200)
    expect(messages.first).to_have_id("m-100")
    expect(earlier).to_have_count(1)
    expect(earlier).to_have_text("Load earlier messages (before #100)")
    # The button now sits above the new window, just before m-100.
    assert page.evaluate("document.querySelector('#earlier').nextElementSibling.id") == "m-100"

    earlier.click()
    expect(messages).to_have_count(300)
    expect(messages.first).to_have_id("m-0")
    expect(earlier).to_have_count(0)


HOSTILE = [
    "<script>window.__pwned=1</script>",
    '<img src=x onerror="window.__pwned=1">',
    '<div hx-get="/admin/" hx-trigger="load" hx-target="body">hx</div>',
]
HOSTILE_LINK = '<a href="javascript:window.__pwned=1">x</a>'


def test_hostile_content_is_shown_as_text_and_runs_nothing(operator_page):
    page = operator_page
    hostile = conversation(
        HOSTILE[0] + HOSTILE[2],
        [
            ("system", [{"type": "text", "text": HOSTILE[2]}]),
            ("user", [{"type": "text", "text": text} for text in HOSTILE]),
            (
                "assistant",
                [
                    {"type": "reasoning", "text": HOSTILE[1]},
                    {
                        "type": "tool_use",
                        "id": HOSTILE[1],
                        "name": HOSTILE[0],
                        "input": {"html": HOSTILE[2]},
                    },
                ],
            ),
            (
                "user",
                [{"type": "tool_result", "tool_use_id": HOSTILE[1], "content": HOSTILE_LINK}],
            ),
        ],
    )
    requests: list[str] = []
    page.on("request", lambda request: requests.append(urlsplit(request.url).path))

    def assert_inert() -> None:
        page.wait_for_load_state("networkidle")
        for text in [*HOSTILE, HOSTILE_LINK]:
            expect(page.locator("#m-1, #m-3").get_by_text(text, exact=True).first).to_be_visible()
        expect(page.locator("pre", has_text=HOSTILE_LINK)).to_have_count(2)  # record, projection
        expect(page.locator("h1")).to_have_text(HOSTILE[0] + HOSTILE[2])
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert page.locator("main script, main img[src='x'], main [hx-trigger]").count() == 0
        assert page.locator("main a[href^='javascript:']").count() == 0
        assert not [path for path in requests if path.startswith("/admin") or path.endswith("/x")]

    page.goto(detail(hostile))
    assert page.title() == f"{HOSTILE[0]}{HOSTILE[2]} · Replay"
    assert_inert()
    # A swap by htmx goes through the same escaping.
    page.get_by_role("link", name="Anthropic").click()
    expect(page.locator("#m-0 .projection .note")).to_be_visible()
    assert_inert()
    page.locator("#m-2 details summary", has_text="Show reasoning").click()
    assert_inert()


def test_keyboard_folding_and_collapsed_reasoning(operator_page):
    page = operator_page
    output = "\n".join(f"line {n}" for n in range(40))
    folded = conversation(
        "folding",
        [
            ("user", [{"type": "text", "text": "Run the job."}]),
            (
                "assistant",
                [
                    {"type": "reasoning", "text": "Think before acting."},
                    {"type": "tool_use", "id": "call_1", "name": "run", "input": {}},
                ],
            ),
            ("user", [{"type": "tool_result", "tool_use_id": "call_1", "content": output}]),
            ("assistant", [{"type": "text", "text": "Done."}]),
        ],
    )
    page.goto(detail(folded))

    current = page.locator("article.message.current")
    expect(current).to_have_count(0)
    page.keyboard.press("j")
    expect(current).to_have_id("m-0")
    page.keyboard.press("j")
    page.keyboard.press("j")
    expect(current).to_have_id("m-2")
    expect(page).to_have_url(re.compile(r"#m-2$"))
    page.keyboard.press("k")
    expect(current).to_have_id("m-1")
    expect(current).to_have_count(1)
    expect(page).to_have_url(re.compile(r"#m-1$"))

    reasoning = page.locator("#m-1 .block-reasoning")
    expect(reasoning.locator("details")).not_to_have_attribute("open", "")
    expect(reasoning.get_by_text("Think before acting.")).to_be_hidden()
    reasoning.get_by_text("Show reasoning").click()
    expect(reasoning.get_by_text("Think before acting.")).to_be_visible()

    result = page.locator("#m-2 .record .block-tool_result")
    pre = result.locator("pre")
    expect(pre).to_have_class(re.compile(r"\bfolded\b"))
    assert pre.evaluate("e => e.scrollHeight > e.clientHeight"), "long output is not folded"
    result.get_by_role("button", name="show all").click()
    expect(pre).not_to_have_class(re.compile(r"\bfolded\b"))
    assert pre.evaluate("e => e.scrollHeight <= e.clientHeight")
    expect(result.get_by_role("button", name="show less")).to_be_visible()


def test_user_without_the_permission_sees_the_403_page(page, console, transactional_db):
    console.allow("status of 403")
    outsider = make_user(operator=False)
    demo = stored_demo()
    page.goto("/accounts/login/")
    sign_in(page, outsider)
    page.wait_for_url("/")
    expect(page.locator("h1")).to_have_text("Not allowed")
    response = page.goto(detail(demo))
    assert response.status == 403
    expect(page.locator("h1")).to_have_text("Not allowed")
    expect(page.get_by_text("Demo: api-7 latency alert")).to_have_count(0)


def test_inline_script_is_refused_by_the_csp_and_the_refusal_is_caught(operator_page, console):
    """The console watch that every test relies on does see a CSP violation."""
    page = operator_page
    with page.expect_console_message(lambda m: "Content Security Policy" in m.text):
        page.evaluate(
            """() => {
                const script = document.createElement("script");
                script.textContent = "window.__ran = 1";
                document.body.append(script);
            }"""
        )
    assert page.evaluate("typeof window.__ran") == "undefined"
    assert [e for e in console.errors if "Content Security Policy" in e], console.errors
    console.allow("Content Security Policy")


def test_readme_screenshot(page, transactional_db):
    """Takes the README's screenshot of the demo page; REPLAY_UPDATE_SCREENSHOT=1 saves it."""
    account = make_user(operator=True, username="operator")  # as `make run` names it
    demo = stored_demo()
    page.goto(detail(demo))
    sign_in(page, account)
    page.wait_for_url(detail(demo))
    expect(page.locator("#live-status")).to_have_text("live")
    page.wait_for_load_state("networkidle")
    image = page.screenshot()
    assert image.startswith(b"\x89PNG")
    page.set_viewport_size({"width": 390, "height": 844})  # and on a phone
    page.wait_for_timeout(200)
    phone = page.screenshot()
    assert phone.startswith(b"\x89PNG")
    if os.environ.get("REPLAY_UPDATE_SCREENSHOT") == "1":
        SCREENSHOT.write_bytes(image)
        PHONE_SCREENSHOT.write_bytes(phone)


def test_typing_a_search_filters_the_list_and_a_refused_one_says_why(operator_page, console):
    console.allow("status of 400")  # the refused search, which the page then explains
    page = operator_page
    conversation("Émile's notes", [("user", [{"type": "text", "text": "ΣΊΣΥΦΟΣ rolls"}])])
    conversation("Other", [("user", [{"type": "text", "text": "nothing"}])])
    page.goto("/")
    rows = page.locator("#results tr.row")
    expect(rows).to_have_count(2)
    search = page.get_by_role("searchbox", name="Search")
    search.fill("σίσυφ")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Émile's notes")
    search.fill(" ".join(f"w{n}" for n in range(17)))  # within 200 characters
    expect(page.locator("#results .error")).to_have_text(
        "q has 17 different words; a search may have at most 16."
    )
    expect(rows).to_have_count(0)
    assert search.get_attribute("maxlength") == "200"


def test_deep_link_loads_a_bounded_window_around_its_target_with_earlier_and_later(
    operator_page,
):
    page = operator_page
    long = long_conversation(700)
    page.goto(f"{detail(long)}#m-350")
    target = page.locator("#m-350")
    expect(target).to_be_in_viewport()
    messages = page.locator("#messages > article.message")
    expect(messages).to_have_count(100)
    expect(messages.first).to_have_id("m-300")
    expect(page.locator("#m-699")).to_have_count(0)
    later = page.locator("#later button")
    # The most messages the document ever holds, at every change (not only when asked).
    page.evaluate(
        """() => {
            window.__most = 0;
            const box = document.getElementById("messages");
            new MutationObserver(() => {
                const held = box.querySelectorAll(":scope > article.message").length;
                window.__most = Math.max(window.__most, held);
            }).observe(box, {childList: true});
        }"""
    )
    for last in (499, 599, 699):
        later.click()
        expect(messages.last).to_have_id(f"m-{last}")
        assert messages.count() <= 300
    assert page.evaluate("window.__most") <= 300
    expect(messages.last).to_have_id("m-699")
    expect(messages.first).to_have_id("m-400")
    expect(later).to_have_count(0)
    earlier = page.locator("#earlier button")
    expect(earlier).to_have_text("Load earlier messages (before #400)")
    earlier.click()
    expect(messages.first).to_have_id("m-300")
    assert messages.count() <= 300
    expect(later).to_have_text("Load later messages (after #599)")


def test_back_and_forward_after_a_toggle_restore_the_deep_linked_message(operator_page):
    page = operator_page
    long = long_conversation(300)
    page.goto(f"{detail(long)}?vision=1&shape=openai#m-30")
    expect(page.locator("#m-30")).to_be_in_viewport()
    page.get_by_role("link", name="Vision off").click()
    expect(page).to_have_url(re.compile(r"\?vision=0&shape=openai#m-30$"))
    expect(page.locator("#m-30")).to_be_in_viewport()
    page.go_back()
    expect(page).to_have_url(re.compile(r"\?vision=1&shape=openai#m-30$"))
    expect(page.get_by_role("link", name="Vision on")).to_have_attribute("aria-current", "true")
    expect(page.locator("#m-30")).to_be_in_viewport()
    page.go_forward()
    expect(page).to_have_url(re.compile(r"\?vision=0&shape=openai#m-30$"))
    expect(page.get_by_role("link", name="Vision off")).to_have_attribute("aria-current", "true")
    expect(page.locator("#m-30")).to_be_in_viewport()


def test_a_long_block_shows_its_start_and_loads_the_rest_on_demand(operator_page):
    page = operator_page
    big = "".join(f"row {i}\n" for i in range(300_000))
    c = conversation("huge", [("user", [{"type": "text", "text": big}])])
    page.goto(detail(c))
    note = page.locator("#m-0 .record .truncated")
    expect(note).to_contain_text("3.2 MB")
    pre = page.locator("#m-0 .record pre")
    assert len(pre.text_content()) < 70_000
    note.get_by_role("button", name="Load the rest").click()
    expect(note).to_have_count(0, timeout=20_000)
    page.wait_for_function(
        "(n) => document.querySelector('#m-0 .record pre').textContent.length === n", arg=len(big)
    )


def test_guide_screenshot_of_the_next_request_on_a_real_session(operator_page):
    """docs/guide/context-pressure.md's headline screenshot: a real Claude Code session
    (tests/fixtures/real), imported as an operator would; REPLAY_UPDATE_SCREENSHOT=1 saves it."""
    from tests.realdata import REAL

    raw = (REAL / "claude_code_tool_heavy_parallel_interrupts.jsonl").read_bytes()
    outcome = off_loop(
        lambda: transcript_import(
            raw=raw, format="claude-code", title=None, file_name="session.jsonl"
        )
    )
    page = operator_page
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(detail(outcome.conversation))
    expect(page.locator("#live-status")).to_have_text("live")
    headline = page.locator("#pressure .pressure-next")
    expect(headline).to_contain_text("tokens next request — measured at #14 + ≈")
    expect(page.locator("#pressure .kind-unrecorded")).to_contain_text("Unrecorded (inferred)")
    page.locator("#pressure .largest summary").click()
    first = page.locator("#pressure .largest li a").first
    target = first.get_attribute("href")
    image = page.locator("#pressure").screenshot()
    assert image.startswith(b"\x89PNG")
    first.click()
    expect(page.locator(str(target))).to_be_in_viewport()
    if os.environ.get("REPLAY_UPDATE_SCREENSHOT") == "1":
        (ROOT / "static" / "screenshot-next-request.png").write_bytes(image)
