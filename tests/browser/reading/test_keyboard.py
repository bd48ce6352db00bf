"""Keyboard and screen-reader users in Chromium (docs/contract.md §4, Keyboard and screen readers):
focus never falls to <body> when the page changes under it (Load earlier/later, the toggles, Share,
Revoke, the new-messages pill, Esc in the search box), the list's import works without a mouse, and
the page's one polite status region says what changed, summarised, without taking the focus."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx2 as httpx
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from playwright.sync_api import expect

from conversations.record.models.conversation import Conversation
from conversations.record.schemas import MessageIn
from conversations.record.services.api_tokens import api_token_create
from conversations.record.services.appending import messages_append
from conversations.record.services.conversations import conversation_create
from tests.browser.conftest import Account, conversation, make_user, off_loop, sign_in
from tests.browser.reading.test_block_folds import many_blocks
from tests.conftest import Server
from tests.realdata import REAL

pytestmark = pytest.mark.live

ACTIVE = """() => {
  const a = document.activeElement;
  if (!a || a === document.body) { return "body"; }
  return a.id ? "#" + a.id : a.tagName.toLowerCase() + ":" + (a.textContent || "").trim();
}"""
# Every write to the status region, with when it was made (an init script: in place before
# the page's own scripts, and not subject to its CSP).
WATCH_REGION = """
window.__said = [];
document.addEventListener("DOMContentLoaded", () => {
  const region = document.getElementById("announce");
  new MutationObserver(() => {
    window.__said.push({at: performance.now(), text: region.textContent});
  }).observe(region, {childList: true, characterData: true, subtree: true});
});
"""
LIVE_REGIONS = (
    "[aria-live]:not([aria-live=off]), [role=status], [role=alert], [role=log], "
    "[role=marquee], [role=timer], output"
)


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def stored(count: int, title: str = "run") -> Conversation:
    def store() -> Conversation:
        created = conversation_create(title=title)
        messages_append(
            conversation=created,
            messages=[
                MessageIn.model_validate({"role": "user", "blocks": [text(f"message {n}")]})
                for n in range(count)
            ],
        )
        return created

    return off_loop(store)


def active(page: Any) -> str:
    return str(page.evaluate(ACTIVE))


def focused(page: Any, expected: str) -> None:
    """The focused element is `expected` (an id as "#id", else "tag:text"), waiting for it."""
    page.wait_for_function(f"() => ({ACTIVE})() === {expected!r}")
    assert active(page) == expected


def region(page: Any) -> Any:
    return page.locator("#announce")


def said(page: Any) -> list[str]:
    return [entry["text"].strip() for entry in page.evaluate("window.__said")]


def grant(account: Account, codename: str) -> None:
    def add() -> None:
        get_user_model().objects.get(username=account.username).user_permissions.add(
            Permission.objects.get(content_type__app_label="conversations", codename=codename)
        )

    off_loop(add)


def signed_in(page: Any, account: Account) -> Any:
    page.goto("/accounts/login/")
    sign_in(page, account)
    page.wait_for_url("/")
    return page


@pytest.fixture
def agent(daphne: Server, transactional_db: None) -> Iterator[httpx.Client]:
    _, token = off_loop(lambda: api_token_create(label="agent"))
    with daphne.client(token) as client:
        yield client


def post(agent: httpx.Client, c: Any, body: dict[str, Any]) -> None:
    response = agent.post(f"/api/conversations/{c.id}/messages", json=body)
    assert response.status_code == 201, response.text


# --- focus ----------------------------------------------------------------------------------


def test_load_earlier_and_later_keep_focus_on_the_button_or_the_first_loaded_message(
    operator_page: Any,
) -> None:
    page = operator_page
    c = stored(400)
    page.goto(f"/c/{c.id}/")
    expect(page.locator("#messages > article.message").first).to_have_id("m-300")
    page.locator("#earlier button").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#m-200")).to_have_count(1)
    # Its button again, now above what it brought: Tab goes on into #m-200.
    focused(page, "button:Load earlier messages (before #200)")
    page.keyboard.press("Enter")
    expect(page.locator("#m-100")).to_have_count(1)
    focused(page, "button:Load earlier messages (before #100)")
    page.keyboard.press("Enter")  # the rest: no button left, so the first message it brought
    expect(page.locator("#earlier")).to_have_count(0)
    focused(page, "#m-0")
    expect(page.locator("#m-0")).to_be_in_viewport()
    # The far end was trimmed; "Load later" brings it back, and focus goes to its first.
    later = page.locator("#later button")
    expect(later).to_have_text("Load later messages (after #299)")
    later.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#m-399")).to_have_count(1)
    focused(page, "#m-300")
    expect(page.locator("#m-300")).to_be_in_viewport()


def test_load_more_blocks_moves_focus_to_the_first_block_it_brought(operator_page: Any) -> None:
    page = operator_page
    page.goto(f"/c/{many_blocks()}/")
    page.locator("#m-1 .load-blocks").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#m-1 .record section.block")).to_have_count(200)
    page.wait_for_function("() => document.activeElement.matches('section.block')")
    assert page.evaluate("document.activeElement.dataset.block") == "100"


def test_a_toggle_keeps_focus_on_the_same_toggle_in_the_new_page(operator_page: Any) -> None:
    page = operator_page
    c = conversation("toggled", [("user", [text("hello")])])
    page.goto(f"/c/{c.id}/")
    for name in ("Vision off", "Anthropic"):
        link = page.get_by_role("link", name=name)
        link.focus()
        page.keyboard.press("Enter")
        expect(page.get_by_role("link", name=name)).to_have_attribute("aria-current", "true")
        page.wait_for_function(
            "() => document.activeElement && document.activeElement.getAttribute('aria-current')"
        )
        assert page.evaluate("document.activeElement.closest('.toggle-group') !== null")
        expect(page.get_by_role("link", name=name)).to_be_focused()


def test_share_focuses_the_new_link_and_revoke_moves_to_the_next_revoke(
    page: Any, transactional_db: None
) -> None:
    account = make_user(operator=True)
    grant(account, "share_conversation")
    c = conversation("shared", [("user", [text(f"step {n}")]) for n in range(3)])
    signed_in(page, account)
    page.add_init_script(WATCH_REGION)
    page.goto(f"/c/{c.id}/")
    share = page.locator("#shares").get_by_role("button", name="Share")
    for _ in range(2):
        share.focus()
        page.keyboard.press("Enter")
        focused(page, "#new-share-url")
        assert page.evaluate("getSelection().toString() || document.activeElement.selectionEnd")
        expect(region(page)).to_contain_text("Share link created")
    rows = page.locator("#shares tbody tr")
    expect(rows).to_have_count(2)
    second = rows.nth(1).get_attribute("id")
    rows.first.get_by_role("button", name="Revoke").focus()
    page.keyboard.press("Enter")
    expect(rows.first).to_have_attribute("data-state", "revoked")
    page.wait_for_function(
        f"() => document.activeElement.closest('tr') && "
        f"document.activeElement.closest('tr').id === {second!r}"
    )
    expect(page.locator(f"#{second}").get_by_role("button", name="Revoke")).to_be_focused()
    expect(region(page)).to_contain_text("Share link revoked")
    page.keyboard.press("Enter")  # the last one: back to Share
    expect(page.locator(f"#{second}")).to_have_attribute("data-state", "revoked")
    focused(page, "button:Share")
    assert active(page) != "body"


def test_the_pill_is_announced_and_moves_focus_to_the_first_new_message(
    operator_page: Any, agent: httpx.Client
) -> None:
    page = operator_page
    c = stored(60)
    page.add_init_script(WATCH_REGION)
    page.goto(f"/c/{c.id}/")
    expect(page.locator("#live-status")).to_have_text("live")
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_function("() => window.scrollY === 0")
    page.locator("#m-0 .permalink").focus()
    post(agent, c, {"role": "assistant", "blocks": [text("new 60")]})
    post(agent, c, {"role": "assistant", "blocks": [text("new 61")]})
    pill = page.get_by_role("button", name="2 new messages")
    expect(pill).to_be_visible()
    expect(region(page)).to_have_text(re.compile(r"^2 new messages below\s*$"))
    assert active(page) == "a:#0 · copy link"  # announced, not focused
    pill.focus()
    page.keyboard.press("Enter")
    focused(page, "#m-60")
    expect(pill).to_be_hidden()


def test_esc_in_the_search_box_clears_it_then_returns_to_the_message(operator_page: Any) -> None:
    page = operator_page
    c = stored(5)
    page.goto(f"/c/{c.id}/")
    expect(page.locator("#live-status")).to_have_text("live")
    page.keyboard.press("/")
    page.keyboard.type("message 2")
    page.keyboard.press("Enter")
    expect(page.locator("#m-2 .find-hit")).to_have_count(1)
    page.keyboard.press("Escape")
    focused(page, "#find-q")
    expect(page.locator("#find-q")).to_have_value("")
    expect(region(page)).to_contain_text("Search cleared")
    page.keyboard.press("Escape")  # an empty box: back to the message the search was on
    focused(page, "#m-2")
    page.keyboard.press("j")  # and the page's keys work from there
    focused(page, "#m-3")


def test_esc_in_the_list_search_clears_it_and_keeps_the_focus(operator_page: Any) -> None:
    page = operator_page
    conversation("disk check", [("user", [text("df -h")])])
    conversation("other", [("user", [text("ls")])])
    page.add_init_script(WATCH_REGION)
    page.goto("/")
    box = page.locator("#list-q")
    box.focus()
    page.keyboard.type("disk")
    expect(page.locator("#results tbody tr")).to_have_count(1)
    expect(region(page)).to_have_text(re.compile(r"^1 conversation matches “disk”\s*$"))
    page.keyboard.press("Escape")
    expect(box).to_have_value("")
    expect(page.locator("#results tbody tr")).to_have_count(2)
    focused(page, "#list-q")


# --- import without a mouse -------------------------------------------------------------------


def test_import_by_keyboard_tab_to_the_file_choice_and_enter_opens_the_chooser(
    page: Any, transactional_db: None
) -> None:
    account = make_user(operator=True)
    grant(account, "add_conversation")
    signed_in(page, account)
    # Playwright turns on the browser's file chooser interception when a listener is first
    # added, without waiting for it: a listener from the start, so no key beats it.
    choosers: list[Any] = []
    page.on("filechooser", lambda chooser: choosers.append(chooser))
    page.reload()
    page.locator("#list-q").focus()
    for _ in range(20):
        if active(page) == "#import-file":
            break
        page.keyboard.press("Tab")
    assert active(page) == "#import-file"
    label = page.locator("label.file-choice")
    assert label.evaluate("l => getComputedStyle(l).outlineStyle") != "none"  # the focus shows
    with page.expect_file_chooser() as space:
        page.keyboard.press("Space")
    assert space.value.element.evaluate("e => e.id") == "import-file"
    with page.expect_file_chooser() as enter:
        page.keyboard.press("Enter")
    enter.value.set_files(str(REAL / "claude_code_compact_boundary.jsonl"))
    page.wait_for_url("**/c/*/")
    assert len(choosers) == 2  # Space and Enter each opened it
    imported = off_loop(lambda: Conversation.objects.get())
    assert page.url.endswith(f"/c/{imported.id}/")
    expect(page.locator("#import-source")).to_contain_text("claude_code_compact_boundary.jsonl")


# --- the status region ------------------------------------------------------------------------


def test_the_status_region_is_the_only_live_region_on_each_page(
    operator_page: Any, agent: httpx.Client
) -> None:
    page = operator_page
    c = conversation("regions", [("user", [text("hello")])])
    made = agent.post(f"/api/conversations/{c.id}/shares", json={})
    assert made.status_code == 201, made.text
    for url in ("/", f"/c/{c.id}/", made.json()["url"], f"/c/{c.id}/context", f"/c/{c.id}/diff"):
        page.goto(url)
        regions = page.locator(LIVE_REGIONS)
        expect(regions).to_have_count(1)
        expect(regions).to_have_id("announce")
        expect(regions).to_have_attribute("role", "status")
        expect(regions).to_have_attribute("aria-live", "polite")


def test_live_changes_are_summarised_at_most_once_a_second_without_taking_focus(
    operator_page: Any, agent: httpx.Client
) -> None:
    page = operator_page
    c = stored(2)
    page.add_init_script(WATCH_REGION)
    page.goto(f"/c/{c.id}/")
    expect(page.locator("#live-status")).to_have_text("live")
    page.locator("#find-q").focus()
    for n in range(6):
        post(agent, c, {"role": "assistant", "blocks": [text(f"turn {n}")]})
    expect(page.locator("#m-7")).to_have_count(1)
    page.wait_for_timeout(1200)  # the last summary
    writes = page.evaluate("window.__said")
    counts = [re.fullmatch(r"(\d+) new messages?", w["text"].strip()) for w in writes]
    assert all(counts), writes
    assert sum(int(m.group(1)) for m in counts if m) == 6, writes  # every message, once
    assert len(writes) < 6, writes  # summarised
    gaps = [b["at"] - a["at"] for a, b in zip(writes, writes[1:], strict=False)]
    assert all(gap >= 950 for gap in gaps), gaps
    focused(page, "#find-q")  # never moved


def test_the_list_says_new_and_updated_conversations_and_search_results_as_text(
    operator_page: Any, agent: httpx.Client
) -> None:
    page = operator_page
    old = conversation("old", [("user", [text("one")])])
    page.add_init_script(WATCH_REGION)
    page.goto("/")
    page.wait_for_function("() => document.querySelector('#results[ws-connect]') !== null")
    expect(page.locator("#results tbody tr")).to_have_count(1)
    page.wait_for_timeout(300)  # the socket is open (no event exposes it on the list)
    created = agent.post("/api/conversations", json={"title": "brand new"})
    assert created.status_code == 201, created.text
    expect(page.locator("#results tbody tr")).to_have_count(2)
    expect(region(page)).to_contain_text("1 new conversation")
    post(agent, old, {"role": "assistant", "blocks": [text("activity")]})
    expect(region(page)).to_contain_text("1 conversation updated")
    # A search's count, with the words as typed, as text (never parsed as markup).
    page.locator("#list-q").fill("<b>zz</b>")
    expect(region(page)).to_have_text(re.compile(r"^No conversation matches “<b>zz</b>”\.\s*$"))
    assert page.locator("#announce b").count() == 0


def test_copied_and_a_saved_note_are_said(page: Any, transactional_db: None) -> None:
    account = make_user(operator=True)
    grant(account, "add_note")
    c = conversation("notes", [("user", [text("hello")])])
    signed_in(page, account)
    page.goto(f"/c/{c.id}/")
    copy = page.get_by_role("button", name="Copy payload")
    copy.focus()
    page.keyboard.press("Enter")
    expect(region(page)).to_have_text(re.compile(r"^Copied\s*$"))
    page.locator("#m-0 .note-add summary").click()
    page.get_by_label("Note on message #0").fill("a note")
    page.get_by_role("button", name="Add note").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#m-0 .note-text")).to_have_text("a note")
    expect(region(page)).to_contain_text("Note added")
    focused(page, "#notes-0")  # the notes it went into, not <body>


def test_a_message_growing_live_keeps_the_focus_on_it_and_on_a_note_being_written(
    page: Any, agent: httpx.Client
) -> None:
    account = make_user(operator=True)
    grant(account, "add_note")
    c = stored(3)
    signed_in(page, account)
    page.goto(f"/c/{c.id}/")
    expect(page.locator("#live-status")).to_have_text("live")

    def grow(seq: int) -> None:
        url = f"/api/conversations/{c.id}/messages/{seq}/blocks"
        response = agent.post(url, json=text(f"more of {seq}"))
        assert response.status_code == 201, response.text
        expect(page.locator(f"#m-{seq} .record .block")).to_have_count(2)

    page.locator("#m-1").focus()
    grow(1)
    focused(page, "#m-1")
    page.locator("#m-2 .note-add summary").click()
    field = page.get_by_label("Note on message #2")
    field.fill("a draft")
    grow(2)
    expect(field).to_be_focused()
    expect(field).to_have_value("a draft")
