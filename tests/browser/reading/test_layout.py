"""Layout, themes and contrast in Chromium (docs/guide/dashboard.md): no horizontal overflow on
phones, labelled sides when record and projection stack, two toggle groups with one choice each, a
remembered theme switch applied before the first paint, WCAG AA contrast of every text in both
themes, and the empty conversation's empty state."""

from __future__ import annotations

import base64
import io
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from PIL import Image
from playwright.sync_api import expect

from conversations.record.models.conversation import Conversation
from conversations.record.services.api_tokens import api_token_create
from conversations.sharing.services import share_create
from tests.browser.conftest import Account, conversation, make_user, off_loop, sign_in

pytestmark = pytest.mark.live

PHONES = [360, 390, 430]
UNBROKEN = "x" * 2000
URL = "https://example.com/" + "segment-" * 200 + "?q=" + "y" * 300
CALL_ID = "toolu_" + "0123456789abcdef" * 12
TOOL_NAME = "read_" + "deeply_nested_" * 10 + "log"
THEMES = {"light": "rgb(247, 247, 245)", "dark": "rgb(21, 23, 27)"}  # --bg of each palette


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def png() -> dict[str, Any]:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 40, 40)).save(buffer, format="PNG")
    return {
        "type": "image",
        "media_type": "image/png",
        "data": base64.b64encode(buffer.getvalue()).decode(),
    }


def every_kind() -> Conversation:
    """A conversation with every block kind, folded and truncated output, and long
    unbroken text (a URL, an id, a tool name, a 2,000-character word) in each place."""
    folded = "\n".join(f"line {i} " + "z" * 80 for i in range(30))
    truncated = "\n".join(f"row {i}" for i in range(450))  # past 400 lines: truncated
    return conversation(
        "Every kind " + UNBROKEN[:300],
        [
            ("system", [text("You are careful. " + URL)]),
            ("user", [text("Look at this: " + UNBROKEN), png()]),
            (
                "assistant",
                [
                    {"type": "reasoning", "text": "First the log. " + UNBROKEN},
                    {
                        "type": "tool_use",
                        "id": CALL_ID,
                        "name": TOOL_NAME,
                        "input": {"url": URL, "id": UNBROKEN[:500]},
                    },
                ],
            ),
            ("user", [{"type": "tool_result", "tool_use_id": CALL_ID, "content": folded}]),
            ("assistant", [{"type": "tool_use", "id": "call_2", "name": "deploy", "input": {}}]),
            (
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_2",
                        "content": "permission denied " + UNBROKEN[:400],
                        "is_error": True,
                    }
                ],
            ),
            ("assistant", [text(truncated)]),
        ],
    )


def share_url(c: Conversation, **options: Any) -> str:
    _, token = off_loop(lambda: share_create(conversation=c, **options))
    return f"/s/{token}/"


def sharer(page: Any) -> Account:
    """Sign in an operator who may also share (the page then lists its share links)."""

    def create() -> Account:
        account = make_user(operator=True)
        User.objects.get(username=account.username).user_permissions.add(
            Permission.objects.get(
                content_type__app_label="conversations", codename="share_conversation"
            )
        )
        return account

    account = off_loop(create)
    page.goto("/accounts/login/")
    sign_in(page, account)
    page.wait_for_url("/")
    return account


def overflow(page: Any) -> tuple[int, int]:
    return tuple(
        page.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
    )


# --- 1. no horizontal overflow ---------------------------------------------------------


@pytest.mark.parametrize("width", [*PHONES, 1440])
def test_no_page_is_wider_than_the_screen(page, transactional_db, width):
    c = every_kind()
    conversation(TOOL_NAME * 3, [("user", [text("deploy " + URL)])])  # a long list title
    frozen = share_url(c, up_to_seq=3, images=False)
    live = share_url(c)
    sharer(page)
    off_loop(lambda: share_create(conversation=c))  # a row in the share list
    page.set_viewport_size({"width": width, "height": 900})
    for url in ["/", "/?q=deploy", f"/c/{c.id}/", live, frozen]:
        page.goto(url)
        expect(page.locator("main")).to_be_visible()
        scroll, client = overflow(page)
        assert scroll <= client, f"{url} at {width} px is {scroll} px wide"
    # The long content wraps inside its block; nothing is cut off by the page.
    page.goto(f"/c/{c.id}/")
    for selector in ["#m-1 .record pre", "#m-2 .block-tool_use h3", "#m-0 .projection pre"]:
        box = page.locator(selector).first
        assert box.evaluate("e => e.scrollWidth <= e.clientWidth"), selector


# --- 2. labelled sides when they stack --------------------------------------------------


def side_label(page: Any, selector: str) -> str:
    return page.locator(selector).evaluate("e => getComputedStyle(e, '::before').content")


def test_stacked_sides_say_which_is_the_record_and_which_the_projection(operator_page):
    page = operator_page
    c = every_kind()
    page.set_viewport_size({"width": 390, "height": 900})
    page.goto(f"/c/{c.id}/")
    record, projection = page.locator("#m-3 .record"), page.locator("#m-3 .projection")
    assert projection.bounding_box()["y"] >= (
        record.bounding_box()["y"] + record.bounding_box()["height"]
    ), "not stacked at 390 px"
    assert side_label(page, "#m-3 .record") == '"Record"'
    assert side_label(page, "#m-3 .projection") == '"Projection — what the model receives"'
    expect(page.locator(".columns-head")).to_be_hidden()
    # The labels are in the accessibility tree, as text before each side's content.
    snapshot = page.locator("#m-3").aria_snapshot()
    assert snapshot.index("Record") < snapshot.index("Projection — what the model receives")

    page.set_viewport_size({"width": 1440, "height": 900})
    assert abs(projection.bounding_box()["y"] - record.bounding_box()["y"]) < 2
    assert side_label(page, "#m-3 .record") == "none"
    expect(page.locator(".columns-head")).to_be_visible()


# --- 3. two toggle groups, one choice each, touch-sized on phones -----------------------


def group(page: Any, name: str) -> Any:
    return page.get_by_role("group", name=name, exact=True)


def current(page: Any, name: str) -> list[str]:
    links = group(page, name).get_by_role("link")
    return [
        links.nth(i).text_content()
        for i in range(links.count())
        if links.nth(i).get_attribute("aria-current") == "true"
    ]


def test_toggles_are_two_labelled_groups_with_one_choice_each(operator_page):
    page = operator_page
    c = every_kind()
    page.goto(f"/c/{c.id}/")
    vision, shape = group(page, "Vision"), group(page, "Shape")
    expect(vision).to_contain_text("Vision")
    expect(vision.get_by_role("link")).to_have_count(2)
    expect(shape.get_by_role("link")).to_have_count(2)
    expect(vision.get_by_role("link", name="Vision on")).to_be_visible()
    assert (current(page, "Vision"), current(page, "Shape")) == (["Vision on"], ["OpenAI"])

    page.get_by_role("link", name="Vision off").click()
    expect(page.get_by_role("link", name="Vision off")).to_have_attribute("aria-current", "true")
    assert (current(page, "Vision"), current(page, "Shape")) == (["Vision off"], ["OpenAI"])
    page.get_by_role("link", name="Anthropic").click()
    expect(page.get_by_role("link", name="Anthropic")).to_have_attribute("aria-current", "true")
    assert (current(page, "Vision"), current(page, "Shape")) == (["Vision off"], ["Anthropic"])
    # The two groups are two boxes, not one run of four.
    a, b = vision.locator(".segmented").bounding_box(), shape.locator(".segmented").bounding_box()
    assert a["x"] + a["width"] < b["x"] or a["y"] + a["height"] <= b["y"]


@pytest.mark.parametrize("width", [360, 390])
def test_toggles_and_the_theme_switch_are_touch_sized_on_phones(operator_page, width):
    page = operator_page
    c = every_kind()
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/c/{c.id}/")
    targets = page.locator(".toggles a, .theme-switch button")
    expect(targets).to_have_count(7)
    for i in range(7):
        box = targets.nth(i).bounding_box()
        assert box["height"] >= 44 and box["width"] >= 44, (i, box)


# --- 4. the theme switch ----------------------------------------------------------------

# Records data-theme on <html> the moment <body> is created: anything the page paints comes
# after that, so a theme set then is set before the first paint.
AT_BODY = """
window.__themeAtBody = "unset";
new MutationObserver((changes, observer) => {
  if (document.body) {
    window.__themeAtBody = document.documentElement.getAttribute("data-theme");
    observer.disconnect();
  }
}).observe(document, { childList: true, subtree: true });
"""


def background(page: Any) -> str:
    return page.evaluate("getComputedStyle(document.body).backgroundColor")


def pressed(page: Any) -> list[str]:
    buttons = page.locator(".theme-switch button[aria-pressed='true']")
    return [buttons.nth(i).inner_text() for i in range(buttons.count())]


def test_theme_switch_is_remembered_and_applied_before_the_first_paint(operator_page):
    page = operator_page  # a light system (the context's colour scheme)
    page.add_init_script(AT_BODY)
    page.reload()
    assert background(page) == THEMES["light"]
    assert pressed(page) == ["System"]
    switch = page.get_by_role("group", name="Colour theme")

    switch.get_by_role("button", name="Dark").click()
    assert background(page) == THEMES["dark"]
    assert pressed(page) == ["Dark"]
    c = every_kind()
    page.goto(f"/c/{c.id}/")  # another page, then a reload: still dark, from the start
    page.reload()
    assert page.evaluate("window.__themeAtBody") == "dark"
    assert background(page) == THEMES["dark"]
    assert pressed(page) == ["Dark"]

    # System follows the system, whichever it is; Light overrides a dark system.
    switch.get_by_role("button", name="System").click()
    assert background(page) == THEMES["light"]
    page.emulate_media(color_scheme="dark")
    assert background(page) == THEMES["dark"]
    switch.get_by_role("button", name="Light").click()
    assert background(page) == THEMES["light"]
    page.reload()
    assert page.evaluate("window.__themeAtBody") == "light"
    assert (background(page), pressed(page)) == (THEMES["light"], ["Light"])
    switch.get_by_role("button", name="System").click()
    page.reload()
    assert page.evaluate("window.__themeAtBody") == "system"
    assert (background(page), pressed(page)) == (THEMES["dark"], ["System"])


# --- 5. contrast ------------------------------------------------------------------------

# Every visible element with text of its own (text nodes, a form control's value, or a
# ::before/::after label): its computed colour against its effective background (its own
# and its ancestors' background colours, composited from the first opaque one), as WCAG 2
# computes contrast. Large text (≥ 24 px, or ≥ 18.66 px bold) needs 3:1, the rest 4.5:1.
CONTRAST = r"""
() => {
  function rgba(value) {
    let m = /^rgba?\(([^)]*)\)$/.exec(value);
    if (m) {
      const p = m[1].split(/[\s,\/]+/).filter(Boolean).map(Number);
      return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
    }
    m = /^color\(srgb ([^)]*)\)$/.exec(value);
    if (m) {
      const p = m[1].split(/[\s\/]+/).filter(Boolean).map(Number);
      return [p[0] * 255, p[1] * 255, p[2] * 255, p.length > 3 ? p[3] : 1];
    }
    throw new Error("unparsed colour " + value);
  }
  function over(top, below) {  // top composited onto an opaque colour
    const a = top[3];
    return [0, 1, 2].map((i) => top[i] * a + below[i] * (1 - a)).concat([1]);
  }
  function backdrop(element) {
    const layers = [];
    for (let e = element; e; e = e.parentElement) {
      const style = getComputedStyle(e);
      if (style.backgroundImage !== "none" && e !== document.documentElement) {
        throw new Error("background image under text: " + e.outerHTML.slice(0, 80));
      }
      const c = rgba(style.backgroundColor);
      if (c[3] > 0) { layers.push(c); }
      if (c[3] >= 1) { break; }
    }
    let result = [255, 255, 255, 1];
    for (let i = layers.length - 1; i >= 0; i--) { result = over(layers[i], result); }
    return result;
  }
  function luminance(c) {
    const [r, g, b] = c.slice(0, 3).map((v) => {
      const s = v / 255;
      return s <= 0.03928 ? s / 12.92 : Math.pow((s + 0.055) / 1.055, 2.4);
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  }
  function ratio(a, b) {
    const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
    return (hi + 0.05) / (lo + 0.05);
  }
  function ownText(e) {
    let said = "";
    for (const node of e.childNodes) {
      if (node.nodeType === Node.TEXT_NODE) { said += node.textContent; }
    }
    if (e instanceof HTMLSelectElement) {
      said = e.selectedOptions[0] ? e.selectedOptions[0].text : "";
    }
    const valued = !["checkbox", "radio", "file", "hidden"].includes(e.type);
    if (e instanceof HTMLInputElement && valued) { said = e.value || e.placeholder; }
    return said.trim();
  }
  function pseudo(e, which) {
    const content = getComputedStyle(e, which).content;
    return /^".*[A-Za-z].*"$/.test(content) ? content.slice(1, -1) : "";
  }
  function describe(e) {
    return e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") +
      (e.classList.length ? "." + Array.from(e.classList).join(".") : "");
  }
  function check(e, which, said) {
    const style = which ? getComputedStyle(e, which) : getComputedStyle(e);
    for (let a = e; a; a = a.parentElement) {
      if (parseFloat(getComputedStyle(a).opacity) < 1) {
        throw new Error("translucent text: " + describe(a));
      }
    }
    const bg = backdrop(e);
    const fg = over(rgba(style.color), bg);
    const size = parseFloat(style.fontSize);
    const large = size >= 24 || (size >= 18.66 && parseInt(style.fontWeight, 10) >= 700);
    return { element: describe(e) + (which || ""), text: said.slice(0, 40),
      ratio: ratio(fg, bg), needed: large ? 3 : 4.5, color: style.color,
      background: "rgb(" + bg.slice(0, 3).map(Math.round).join(", ") + ")" };
  }
  const found = [];
  for (const e of document.body.querySelectorAll("*")) {
    const box = e.getBoundingClientRect();
    if (!box.width || !box.height) { continue; }
    if (!e.checkVisibility({ opacityProperty: true, visibilityProperty: true })) { continue; }
    const said = ownText(e);
    if (said) { found.push(check(e, "", said)); }
    for (const which of ["::before", "::after"]) {
      const label = pseudo(e, which);
      if (label) { found.push(check(e, which, label)); }
    }
  }
  return found;
}
"""


def measure(page: Any) -> list[dict[str, Any]]:
    return page.evaluate(CONTRAST)


def reveal_everything(page: Any) -> None:
    """Open what is folded away and show what only appears on events: reasoning, the live
    notice and the new-messages pill."""
    page.evaluate(
        """() => {
          document.querySelectorAll("details").forEach((d) => { d.open = true; });
          const notice = document.getElementById("live-notice");
          notice.textContent = "Live updates stopped: you are signed out.";
          notice.hidden = false;
          const pill = document.getElementById("new-messages");
          if (pill) { pill.textContent = "3 new messages"; pill.hidden = false; }
        }"""
    )


def each_state(page: Any, selector: str, states: list[str]) -> list[dict[str, Any]]:
    """Measure again with `selector`'s data-state set to each of `states`."""
    found = []
    for state in states:
        page.locator(selector).evaluate(f"e => e.setAttribute('data-state', '{state}')")
        found += measure(page)
    return found


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_text_meets_wcag_aa_contrast(page, transactional_db, theme, capsys):
    page.add_init_script(f"localStorage.setItem('replay-theme', '{theme}')")
    c = every_kind()
    empty = conversation("No messages yet", [])
    live = share_url(c)
    frozen = share_url(c, up_to_seq=3, images=False)
    page.goto("/accounts/login/")
    found = measure(page)  # the sign-in page
    sharer(page)
    off_loop(lambda: share_create(conversation=c))
    assert page.evaluate("document.documentElement.dataset.theme") == theme
    assert background(page) == THEMES[theme]
    found += measure(page)
    page.goto("/?q=deploy")
    expect(page.locator("#results .hit").first).to_be_visible()
    found += measure(page)

    page.goto(f"/c/{c.id}/")
    expect(page.locator("#live-status")).to_have_text("live")
    reveal_everything(page)
    expect(page.locator(".toggles a.active")).to_have_count(2)
    expect(page.locator("#new-messages")).to_be_visible()
    for kind in [".block-text", ".block-tool_use", ".block-tool_result", ".is-error",
                 ".block-reasoning pre", ".block-image img", ".truncated", ".show-all",
                 "#pressure", "#shares tbody tr"]:  # fmt: skip
        expect(page.locator(kind).first).to_be_visible()
    found += measure(page)
    states = ["connecting", "reconnecting", "offline", "stopped", "frozen"]
    found += each_state(page, "#live-status", states)
    page.locator(".show-all").first.click()  # "show less"
    page.get_by_role("link", name="Vision off").click()
    expect(page.get_by_role("link", name="Vision off")).to_have_attribute("aria-current", "true")
    page.get_by_role("link", name="Anthropic").click()
    expect(page.locator("#m-0 .projection .note")).to_be_visible()  # lifted into system
    found += measure(page)

    page.goto(f"/c/{empty.id}/")
    expect(page.locator("#empty-state")).to_be_visible()
    found += measure(page)

    page.goto(frozen)
    expect(page.locator(".withheld").first).to_be_visible()
    found += measure(page)
    page.goto(live)
    expect(page.locator("#share-notice")).to_be_visible()
    found += each_state(page, "#share-notice", ["active", "revoked", "expired", "deleted"])

    assert len(found) > 100  # the walk saw the pages, not an empty body
    failing = [f for f in found if f["ratio"] < f["needed"]]
    assert not failing, "\n".join(
        f"{f['element']} {f['text']!r}: {f['ratio']:.2f} < {f['needed']} "
        f"({f['color']} on {f['background']})"
        for f in failing
    )
    lowest = min(found, key=lambda f: f["ratio"])
    with capsys.disabled():
        print(
            f"\n{theme}: {len(found)} texts, minimum contrast {lowest['ratio']:.2f}:1 "
            f"({lowest['element']} {lowest['text']!r}, {lowest['color']} on "
            f"{lowest['background']})"
        )


# --- 6. the empty state -----------------------------------------------------------------


def test_an_empty_conversation_says_so_until_its_first_message_arrives(operator_page, daphne):
    page = operator_page
    empty = conversation("Just started", [])
    page.goto(f"/c/{empty.id}/")
    state = page.locator("#empty-state")
    expect(state).to_have_text("No messages yet — this page updates live as the agent writes.")
    expect(page.locator("#live-status")).to_have_text("live")

    # Through the API, as an agent writes: daphne publishes it to the open page.
    _, token = off_loop(lambda: api_token_create(label="agent"))
    with daphne.client(token) as agent:
        body = {"role": "user", "blocks": [text("The first message.")]}
        response = agent.post(f"/api/conversations/{empty.id}/messages", json=body)
        assert response.status_code == 201, response.text
    expect(page.locator("#m-0 .record")).to_contain_text("The first message.")
    expect(state).to_be_hidden()
    page.reload()
    expect(page.locator("#m-0")).to_be_visible()
    expect(page.locator("#empty-state")).to_have_count(0)


# --- 7. /favicon.ico --------------------------------------------------------------------


def test_favicon_ico_is_the_svg_icon(page, daphne):
    response = page.request.get(f"{daphne.url}/favicon.ico")
    assert response.ok
    assert response.headers["content-type"].startswith("image/svg+xml")
    assert response.url.endswith("favicon.svg")
    assert "<svg" in response.text()
