"""axe-core over every page state (docs/guide/dashboard.md, Accessibility): the sign-in page, the
list (empty, with rows, search results, filtered by alerts), a conversation (toggles, folded blocks,
notes, alerts, the finder, the share links), the message page, the compaction preview, the diff, the
comparison and the share pages, in both themes at 1440 and 390 px. Any violation of WCAG 2.1 A/AA or
of axe's best practices fails the run, listed rule by rule.

axe is vendored for these tests only (tests/browser/vendor/README.md) and injected into
each page; the app's CSP refuses injected script, so this module's browser context
bypasses the CSP (every other test keeps it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from playwright.sync_api import expect

from conversations.alerts.services import alert_rule_create
from conversations.record.models.conversation import Conversation
from conversations.record.notes.services import note_add
from conversations.sharing.models import ShareLink
from conversations.sharing.services import share_create, share_revoke
from tests.browser.conftest import (
    Account,
    Console,
    conversation,
    make_user,
    off_loop,
    sign_in,
    watched_context,
)
from tests.browser.reading.test_compare import questions
from tests.browser.reading.test_layout import every_kind

pytestmark = pytest.mark.live

AXE = Path(__file__).parents[1] / "vendor" / "axe-4.14.1.min.js"
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]
WIDTHS = [1440, 390]
THEMES = ["light", "dark"]
BACKGROUND = {"light": "rgb(247, 247, 245)", "dark": "rgb(21, 23, 27)"}  # each palette's --bg
GRANTS = [
    "share_conversation", "add_note", "delete_note", "change_conversation", "add_conversation"
]  # fmt: skip

RUN = """
async (tags) => {
  const result = await axe.run(document, {
    runOnly: { type: "tag", values: tags }, resultTypes: ["violations"],
  });
  return result.violations.map((v) => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.map((n) => ({
      target: n.target.join(" "),
      summary: (n.failureSummary || "").replace(/\\s+/g, " ").trim(),
    })),
  }));
}
"""


@dataclass
class Scene:
    every: Conversation  # every block kind, notes, an open alert, share links
    empty: Conversation
    many: Conversation  # a message of 250 blocks: the page folds them
    run_a: Conversation  # a long run, and the same run with two messages changed
    run_b: Conversation
    live_share: str
    frozen_share: str
    revoked_share: str


def build_scene(account: Account) -> Scene:
    off_loop(lambda: alert_rule_create(kind="tool_error"))
    every = every_kind()
    empty = conversation("No messages yet", [])
    results = [
        {"type": "tool_result", "tool_use_id": f"c{i}", "content": f"out {i}"} for i in range(250)
    ]
    many = conversation(
        "Many blocks", [("user", [{"type": "text", "text": "go"}]), ("user", results)]
    )
    run_a = conversation("Run A", questions(60))
    run_b = conversation("Run B", questions(60, {40: "a different answer", 50: "and another"}))

    def annotate() -> tuple[str, str, str]:
        user = User.objects.get(username=account.username)
        note_add(
            conversation=every, message_seq=1, block_seq=0, user=user, labels=["wrong-path"],
            text="The agent guessed the path.",
        )  # fmt: skip
        note_add(conversation=every, message_seq=2, user=user, text="Ask first.")
        _, live = share_create(conversation=every, created_by=user, notes=True)
        _, frozen = share_create(conversation=every, up_to_seq=3, images=False)
        link, revoked = share_create(conversation=every)
        share_revoke(link=ShareLink.objects.get(pk=link.pk))
        return f"/s/{live}/", f"/s/{frozen}/", f"/s/{revoked}/"

    live, frozen, revoked = off_loop(annotate)
    return Scene(every, empty, many, run_a, run_b, live, frozen, revoked)


def auditor() -> Account:
    def create() -> Account:
        account = make_user(operator=True)
        user = User.objects.get(username=account.username)
        for codename in GRANTS:
            user.user_permissions.add(
                Permission.objects.get(content_type__app_label="conversations", codename=codename)
            )
        return account

    return off_loop(create)


@pytest.fixture
def audit_context(
    transactional_db: None, browser: Any, daphne: Any, console: Console, theme: str, width: int
) -> Iterator[Any]:
    with watched_context(
        browser,
        daphne,
        console,
        viewport={"width": width, "height": 900},
        color_scheme=theme,  # the theme switch left on System: the system's scheme decides
        bypass_csp=True,  # for axe's injected script only
    ) as ctx:
        yield ctx


class Audit:
    """axe run on one page after another; violations kept by page state."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.found: dict[str, list[dict[str, Any]]] = {}
        self.states = 0

    def check(self, state: str) -> None:
        if not self.page.evaluate("typeof window.axe === 'object'"):
            self.page.add_script_tag(path=str(AXE))
        assert self.page.evaluate("axe.version") == "4.14.1"
        violations = self.page.evaluate(RUN, TAGS)
        self.states += 1
        if violations:
            self.found[state] = violations

    def visit(self, url: str, state: str, ready: Callable[[Any], None] | None = None) -> None:
        self.page.goto(url)
        expect(self.page.locator("main")).to_be_visible()
        if ready:
            ready(self.page)
        self.check(state)

    def report(self) -> str:
        lines = []
        for state, violations in self.found.items():
            lines.append(f"{state}:")
            for v in violations:
                lines.append(f"  {v['id']} ({v['impact']}, {len(v['nodes'])} nodes): {v['help']}")
                for node in v["nodes"][:4]:
                    lines.append(f"    {node['target']} — {node['summary'][:220]}")
                if len(v["nodes"]) > 4:
                    lines.append(f"    … and {len(v['nodes']) - 4} more")
        return "\n".join(lines)

    def rules(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for violations in self.found.values():
            for v in violations:
                counts[v["id"]] = counts.get(v["id"], 0) + len(v["nodes"])
        return counts


def live(page: Any) -> None:
    expect(page.locator("#live-status")).to_have_text("live")


def frozen(page: Any) -> None:
    expect(page.locator("#live-status")).to_have_text("frozen")


def shows(selector: str) -> Callable[[Any], None]:
    def ready(page: Any) -> None:
        expect(page.locator(selector).first).to_be_visible()
        if page.locator("#live-status").count():  # a conversation: its socket open first
            live(page)

    return ready


def conversation_states(audit: Audit, scene: Scene) -> None:
    page, every = audit.page, scene.every
    audit.visit(f"/c/{every.id}/", "conversation", live)
    expect(page.locator("#alert-badge")).to_have_text("1 open alert")
    expect(page.locator("#notes-1 .note")).to_have_count(1)
    expect(page.locator("#shares tbody tr")).to_have_count(3)
    page.locator("#alert-badge").click()  # the alerts' list open
    page.evaluate("document.querySelectorAll('details').forEach((d) => { d.open = true; })")
    audit.check("conversation, alerts, reasoning and note forms open")

    page.locator("#m-0 .show-all").first.click()
    page.locator("#m-3 .output-toggle").first.click()  # one tool output collapsed
    page.locator(".find-filter[data-filter='error']").click()
    expect(page.locator("#filter-summary")).to_be_visible()
    audit.check("conversation, filtered to errors")
    page.locator(".find-filter[data-filter='']").click()
    page.locator("#find-q").fill("deploy")
    page.locator("#find-q").press("Enter")
    expect(page.locator("#find-status")).not_to_be_empty()
    audit.check("conversation, a search's hit")
    page.locator("#find-q").press("Escape")

    page.get_by_role("link", name="Vision off").click()
    expect(page.get_by_role("link", name="Vision off")).to_have_attribute("aria-current", "true")
    page.get_by_role("link", name="Anthropic").click()
    expect(page.locator("#m-0 .projection .note")).to_be_visible()
    audit.check("conversation, Vision off and Anthropic")

    page.locator("#compact-toggle").click()
    audit.check("conversation, compact")
    page.locator("#compact-toggle").click()

    shares = page.locator("#shares")
    shares.get_by_label("Up to message #").fill("3")
    shares.get_by_role("button", name="Share").click()
    expect(page.locator("#new-share-url")).to_be_visible()
    audit.check("conversation, a new share link shown once")

    # the new link's field holds the focus (selected, for copying): leave it, then "?"
    page.evaluate("document.activeElement.blur()")
    page.keyboard.press("?")
    expect(page.locator("#shortcuts")).to_be_visible()
    audit.check("conversation, the shortcuts' help")
    page.keyboard.press("Escape")

    audit.visit(f"/c/{scene.empty.id}/", "empty conversation", live)
    audit.visit(f"/c/{scene.many.id}/", "conversation, folded blocks", shows("#m-1 .block-fold"))
    audit.visit(f"/c/{scene.run_a.id}/#m-3", "message page (a message's link)", shows("#m-3"))


def other_states(audit: Audit, scene: Scene) -> None:
    every, a, b = scene.every.id, scene.run_a.id, scene.run_b.id
    audit.visit(f"/c/{every}/context", "compaction preview, no policy")
    audit.visit(f"/c/{every}/context?compact=clear_tool_uses", "compaction preview, a policy")
    audit.visit(
        f"/c/{every}/context?compact=microcompact&upto=4&payload=full",
        "compaction preview, a policy up to #4, the full payload",
    )
    audit.visit(f"/c/{every}/diff?b_vision=0", "diff, vision on against off")
    audit.visit(f"/c/{every}/diff?b_shape=anthropic", "diff, OpenAI against Anthropic")
    audit.visit(f"/c/{a}/diff?b_conversation={b}", "diff, two conversations")
    audit.visit(f"/compare/?a={a}&b={b}", "comparison")
    audit.visit(f"/compare/?a={a}&b={a}", "comparison of identical runs")
    audit.visit(f"/compare/?a={a}&q=Run", "comparison, picking the other run")
    audit.visit(scene.live_share, "share link, live with notes", live)
    audit.visit(scene.frozen_share, "share link, frozen without images", frozen)
    audit.visit(scene.revoked_share, "share link, revoked")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("theme", THEMES)
def test_axe_finds_no_violation_on_any_page_state(audit_context, console, capsys, theme, width):
    vendored = (AXE.parent / "README.md").read_text()
    assert hashlib.sha256(AXE.read_bytes()).hexdigest() in vendored  # the file it names
    page = audit_context.new_page()
    audit = Audit(page)
    console.allow("status of 410")  # the revoked link's page
    console.allow("status of 404")
    audit.visit("/accounts/login/", "sign-in")
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == BACKGROUND[theme]
    page.get_by_label("Username").fill("nobody")
    page.get_by_label("Password").fill("wrong")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator(".login .error")).to_be_visible()
    audit.check("sign-in, refused")

    account = auditor()
    sign_in(page, account)
    page.wait_for_url("/")
    audit.check("list, empty")
    scene = build_scene(account)
    audit.visit("/", "list, with rows")
    audit.visit("/?q=deploy", "list, search results", shows("#results .hit"))
    audit.visit("/?alerts=open", "list, open alerts only", shows("#results .badge.alert"))
    audit.visit("/?q=nothing-matches-this", "list, no result")

    conversation_states(audit, scene)
    other_states(audit, scene)
    audit.visit("/c/no-such-conversation/", "not found")

    counts = audit.rules()
    with capsys.disabled():
        print(f"\naxe {theme} {width} px, {audit.states} states: {counts or 'no violations'}")
    assert audit.states >= 30
    assert not audit.found, "axe violations:\n" + audit.report()
