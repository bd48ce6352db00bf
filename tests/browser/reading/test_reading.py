"""Reading a conversation in a real browser (docs/guide/dashboard.md): compact mode at 1440 and 390
px, fold labels with sizes, collapse / expand all (messages arriving live included), the metadata of
a real imported session in the headers, local times with UTC on hover, and the copy buttons'
clipboard against the API's record and replay."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import orjson
import pytest
from playwright.sync_api import expect

from conversations.core.counting import preview
from conversations.ingest.imports import transcript_import
from conversations.record.models.conversation import Conversation
from conversations.record.services.api_tokens import api_token_create
from tests.browser.conftest import Console, conversation, off_loop, sign_in
from tests.browser.live.test_live import open_live, post_message
from tests.conftest import Server
from tests.importdata import otel_sources
from tests.realdata import REAL

pytestmark = pytest.mark.live

DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}
# Messages on screen: those with a part below the sticky header and above the bottom edge.
VISIBLE = """() => {
  // The header sticks on desktops and scrolls away on phones: what it does not cover.
  const top = Math.max(0, document.querySelector('.conv-head').getBoundingClientRect().bottom);
  return Array.from(document.querySelectorAll('#messages > .message')).filter(m => {
    const r = m.getBoundingClientRect();
    return r.bottom > top + 8 && r.top < window.innerHeight - 8;
  }).length;
}"""


@pytest.fixture
def agent(transactional_db: None, daphne: Server) -> Iterator[Any]:
    """The agent's side: the JSON API of the shared daphne, with a real token."""
    _, token = off_loop(lambda: api_token_create(label="agent"))
    with daphne.client(token) as client:
        yield client


def imported(name: str, title: str = "Session") -> Conversation:
    """A real recording (tests/fixtures/real/, sources and licences in its SOURCES.md)."""
    raw = (REAL / name).read_bytes()
    return off_loop(
        lambda: transcript_import(raw=raw, format=None, title=title, file_name="s.jsonl")
    ).conversation


def detail(c: Conversation) -> str:
    return f"/c/{c.id}/"


def at_tail(page: Any) -> int:
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
    return int(page.evaluate(VISIBLE))


def clipboard(page: Any) -> str:
    return page.evaluate("navigator.clipboard.readText()")


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def result(call_id: str, content: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content}


LOG = "\n".join(f"line {n} of the build log" for n in range(40))
LOG_SIZE = preview.human_size(len(LOG))


# --- density ---------------------------------------------------------------------------


def test_compact_mode_shows_clearly_more_messages_and_is_remembered(operator_page):
    page = operator_page
    run = imported("claude_code_tool_heavy_parallel_interrupts.jsonl")
    page.set_viewport_size(DESKTOP)
    page.goto(detail(run))
    toggle = page.get_by_role("button", name="Compact")
    expect(toggle).to_have_attribute("aria-pressed", "false")
    before = at_tail(page)
    assert before <= 4  # the "about four messages per screen"

    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    toggle.click()
    expect(page.locator("html")).to_have_class(re.compile(r"\bcompact\b"))
    expect(toggle).to_have_attribute("aria-pressed", "true")
    after = at_tail(page)
    assert after >= before + 3 and after >= 1.6 * before, (before, after)
    assert requests == []  # no server round trip

    page.reload()  # remembered in this browser
    expect(page.locator("html")).to_have_class(re.compile(r"\bcompact\b"))
    expect(page.get_by_role("button", name="Compact")).to_have_attribute("aria-pressed", "true")
    page.get_by_role("link", name="Vision off").click()  # a toggle swaps #conversation
    expect(page).to_have_url(re.compile(r"vision=0"))
    expect(page.get_by_role("button", name="Compact")).to_have_attribute("aria-pressed", "true")
    assert at_tail(page) == after

    page.get_by_role("button", name="Compact").click()
    expect(page.locator("html")).not_to_have_class(re.compile(r"\bcompact\b"))
    page.reload()
    expect(page.locator("html")).not_to_have_class(re.compile(r"\bcompact\b"))
    assert at_tail(page) == before


def test_compact_mode_on_a_phone_fits_the_width(operator_page):
    page = operator_page
    run = imported("claude_code_tool_heavy_parallel_interrupts.jsonl")
    page.set_viewport_size(PHONE)
    page.goto(detail(run))
    before = at_tail(page)
    page.get_by_role("button", name="Compact").click()
    after = at_tail(page)
    assert after > before, (before, after)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    wide = page.evaluate(
        """(w) => Array.from(document.querySelectorAll(
             '.conv-meta li, .reading-tools button, .message header > *, .output-toggle'))
           .filter(e => e.getBoundingClientRect().right > w + 0.5).map(e => e.outerHTML)""",
        PHONE["width"],
    )
    assert wide == []


# --- folding ---------------------------------------------------------------------------


def test_folds_say_their_size_and_collapse_or_expand_all_holds_for_live_messages(
    operator_page, agent
):
    page = operator_page
    run = conversation(
        "Build",
        [
            ("assistant", [{"type": "tool_use", "id": "c1", "name": "make", "input": {}}]),
            ("user", [result("c1", LOG)]),
            ("assistant", [{"type": "reasoning", "text": "Read it."}, text("The build passed.")]),
        ],
    )
    open_live(page, detail(run))
    output = page.locator("#m-1 .record .block-tool_result")
    fold = output.locator(".show-all")
    expect(fold).to_have_text(f"show all 40 lines, {LOG_SIZE}")
    expect(output.locator(".output-toggle")).to_have_text(f"40 lines, {LOG_SIZE}")
    expect(page.locator("#m-0 .record pre")).to_have_text("{}")  # a short input, one line
    fold.click()
    expect(fold).to_have_text("show less")
    fold.click()
    expect(fold).to_have_text(f"show all 40 lines, {LOG_SIZE}")

    # One result hidden and shown again by its size button.
    output.locator(".output-toggle").click()
    expect(output.locator("pre")).to_be_hidden()
    expect(output.locator(".output-toggle")).to_have_attribute("aria-expanded", "false")
    output.locator(".output-toggle").click()
    expect(output.locator("pre")).to_be_visible()

    collapse = page.get_by_role("button", name="Collapse all tool output")
    collapse.click()
    expect(collapse).to_have_attribute("aria-pressed", "true")
    expect(output.locator("pre")).to_be_hidden()
    expect(output.locator("h3")).to_be_visible()
    expect(page.locator("#m-2 .record .block-text pre")).to_be_visible()  # text stays
    expect(page.locator("#m-1 .projection pre")).to_have_class(re.compile(r"\bfolded\b"))
    expect(page.locator("#m-1")).to_have_class(re.compile(r"\boutput-collapsed\b"))
    assert page.locator("#m-1 .projection pre").bounding_box()["height"] < 100  # a few lines

    post_message(agent, run, "user", [result("c1", "second run: ok")])
    arrived = page.locator("#m-3 .record .block-tool_result")
    expect(arrived).to_have_class(re.compile(r"\bcollapsed\b"))
    expect(arrived.locator("pre")).to_be_hidden()

    expand = page.get_by_role("button", name="Expand all")
    expand.click()
    expect(expand).to_have_attribute("aria-pressed", "true")
    expect(collapse).to_have_attribute("aria-pressed", "false")
    expect(arrived.locator("pre")).to_be_visible()
    expect(output.locator("pre")).not_to_have_class(re.compile(r"\bfolded\b"))
    expect(fold).to_have_text("show less")
    expect(page.locator("#m-2 .block-reasoning details")).to_have_attribute("open", "")

    post_message(agent, run, "user", [result("c1", LOG)])
    late = page.locator("#m-4 .record .block-tool_result")
    expect(late.locator("pre")).not_to_have_class(re.compile(r"\bfolded\b"))
    expect(late.locator(".show-all")).to_have_text("show less")

    page.get_by_role("link", name="Anthropic").click()  # the state outlives a toggle's swap
    expect(page).to_have_url(re.compile(r"shape=anthropic"))
    expect(page.get_by_role("button", name="Expand all")).to_have_attribute("aria-pressed", "true")
    expect(page.locator("#m-4 .record .block-tool_result pre")).not_to_have_class(
        re.compile(r"\bfolded\b")
    )
    page.get_by_role("button", name="Expand all").click()  # off: back to the page as served
    expect(page.locator("#m-4 .record .block-tool_result pre")).to_have_class(
        re.compile(r"\bfolded\b")
    )
    expect(page.locator("#m-2 .block-reasoning details")).not_to_have_attribute("open", "")


def test_a_truncated_fold_says_it_is_a_start_and_the_whole_after_load_the_rest(operator_page):
    page = operator_page
    big = "".join(f"row {n}\n" for n in range(1000))
    run = conversation("Long", [("user", [result("c1", big)])])
    page.goto(detail(run))
    block = page.locator("#m-0 .record .block-tool_result")
    fold = block.locator(".show-all")
    start = preview.human_size(len(preview.cut(big)))
    expect(fold).to_have_text(
        f"show the first 400 lines, {start} of {preview.human_size(len(big))}"
    )
    block.get_by_role("button", name="Load the rest").click()
    expect(block.locator(".truncated")).to_have_count(0)
    whole = f"1,000 lines, {preview.human_size(len(big))}"
    expect(fold).to_have_text(f"show all {whole}")
    expect(block.locator(".output-toggle")).to_have_text(whole)
    fold.click()
    fold.click()
    expect(fold).to_have_text(f"show all {whole}")


# --- metadata --------------------------------------------------------------------------


def test_metadata_of_a_real_session_is_in_the_headers_and_nothing_says_none(operator_page):
    page = operator_page
    run = imported("claude_code_tool_heavy_parallel_interrupts.jsonl")
    page.goto(detail(run))
    about = page.locator(".conv-meta")
    for fact in ["model claude-opus-4-6", "source claude-code", "gitBranch master", "version 2.1"]:
        expect(about).to_contain_text(fact)
    assistant = page.locator("article.role-assistant").last.locator(".record header")
    expect(assistant.locator(".meta-model")).to_have_text("claude-opus-4-6")
    expect(assistant.locator(".usage")).to_contain_text("measured ")
    expect(assistant.locator("time")).to_have_attribute("title", re.compile(r"^source time "))
    assert "None" not in page.locator("#messages").inner_text()

    label, body = next((label, b) for label, b in otel_sources("otel_genai_semconv_examples.json")
                       if b'"finish_reason": "tool_call"' in b)  # fmt: skip
    otel = off_loop(
        lambda: transcript_import(raw=body, format=None, title=label, file_name=None)
    ).conversation
    page.goto(detail(otel))
    expect(page.locator(".message .meta-stop").first).to_have_text("stop: tool_call")
    assert "None" not in page.locator("#messages").inner_text()


def test_metadata_posted_with_a_message_shows_and_hostile_values_stay_text(operator_page, agent):
    page = operator_page
    run = conversation("API run", [("user", [text("Go.")])])
    open_live(page, detail(run))
    hostile = '<img src=x onerror="window.__pwned=1">'
    body = {
        "role": "assistant",
        "blocks": [text("Done.")],
        "metadata": {
            "model": hostile,
            "usage": {"input_tokens": 1200, "output_tokens": 34},
            "stop_reason": "end_turn",
            "latency_ms": 1830,
        },
    }
    assert agent.post(f"/api/conversations/{run.id}/messages", json=body).status_code == 201
    header = page.locator("#m-1 .record header")
    expect(header.locator(".meta-model")).to_have_text(hostile)
    expect(header.locator(".meta-stop")).to_have_text("stop: end_turn")
    expect(header.locator(".meta-latency")).to_have_text("1.8 s")
    expect(header.locator(".usage")).to_contain_text("measured 1,200 in · 34 out")
    assert page.evaluate("window.__pwned") is None


# --- times -----------------------------------------------------------------------------


@pytest.fixture
def kolkata(
    transactional_db: None, browser: Any, daphne: Server, operator: Any
) -> Iterator[tuple[Any, Console]]:
    """A signed-in page in a browser set to Asia/Kolkata (UTC+5:30), its console watched."""
    console = Console()
    ctx = browser.new_context(base_url=daphne.url, viewport=DESKTOP, timezone_id="Asia/Kolkata")
    ctx.set_default_timeout(10_000)
    ctx.on("page", console.watch)
    page = ctx.new_page()
    page.goto("/accounts/login/")
    sign_in(page, operator)
    page.wait_for_url("/")
    yield page, console
    ctx.close()
    assert not console.unexpected(), console.unexpected()


def test_times_are_in_the_viewers_zone_with_utc_on_hover_and_recent_ones_relative(kolkata, agent):
    page, _ = kolkata
    run = imported("claude_code_tool_heavy_parallel_interrupts.jsonl")
    page.goto(detail(run))
    first = page.locator("#m-0 .record header time")
    source = off_loop(lambda: run.messages.get(seq=0).metadata["timestamp"])
    when = datetime.fromisoformat(source).astimezone(UTC)
    here = when.astimezone(ZoneInfo("Asia/Kolkata")).strftime("%Y-%m-%d %H:%M:%S")
    expect(first).to_have_text(here)
    title = first.get_attribute("title")
    # ICU may name the zone by its older id.
    assert re.match(rf"source time {here} \(Asia/(Kolkata|Calcutta)\) · ", title), title
    assert when.strftime("%Y-%m-%d %H:%M:%S UTC") in title and " · stored " in title

    fresh = conversation("Now", [("user", [text("Just posted.")])])
    page.clock.install()  # the page's clock, to move it forward below
    open_live(page, detail(fresh))
    expect(page.locator("#m-0 time")).to_have_text("just now")
    stamp = page.locator("#m-0 time").get_attribute("datetime")
    created = datetime.fromisoformat(stamp)
    assert created.utcoffset() == timedelta(0)  # the server's HTML stays UTC
    assert created.strftime("%Y-%m-%d %H:%M:%S UTC") in page.locator("#m-0 time").get_attribute(
        "title"
    )
    post_message(agent, fresh, "assistant", [text("Live.")])
    expect(page.locator("#m-1 time")).to_have_text("just now")  # a live message too
    page.clock.fast_forward("03:10")
    expect(page.locator("#m-0 time")).to_have_text("3 min ago")
    expect(page.locator("#m-1 time")).to_have_text("3 min ago")
    page.get_by_role("link", name="Vision off").click()  # a swap brings the server's HTML back
    expect(page).to_have_url(re.compile(r"vision=0"))
    expect(page.locator("#m-1 time")).to_have_text("3 min ago")
    page.clock.fast_forward("01:00:00")
    local = created.astimezone(ZoneInfo("Asia/Kolkata")).strftime("%Y-%m-%d %H:%M:%S")
    expect(page.locator("#m-0 time")).to_have_text(local)


# --- copies ----------------------------------------------------------------------------


def test_copy_record_and_copy_projection_are_the_apis_message(operator_page, agent):
    page = operator_page
    big = "x" * 3_000_000  # a large block: fetched on click, never held in the page
    run = conversation(
        "Copies",
        [
            ("system", [text("Be terse.")]),
            (
                "user",
                [
                    text("Look at <b>this</b>:"),
                    {"type": "tool_result", "tool_use_id": "c0", "content": big},
                ],
            ),  # fmt: skip
            (
                "assistant",
                [{"type": "tool_use", "id": "c1", "name": "zoom", "input": {"z": 2, "a": "ü"}}],
            ),  # fmt: skip
        ],
    )
    record = agent.get(f"/api/conversations/{run.id}").json()
    replays = {
        (vision, shape): agent.get(
            f"/api/conversations/{run.id}/replay", params={"vision": vision, "shape": shape}
        ).json()
        for vision, shape in [(1, "openai"), (0, "anthropic")]
    }
    page.goto(detail(run))
    assert len(page.content()) < 600_000
    for seq in (1, 2):
        button = page.locator(f"#m-{seq} .copy-record")
        button.click()
        expect(button).to_have_text("Copied")
        assert json.loads(clipboard(page)) == record["messages"][seq]
        projection = page.locator(f"#m-{seq} .copy-projection")
        projection.click()
        expect(projection).to_have_text("Copied")
        wire = replays[(1, "openai")]["messages"][seq]
        assert clipboard(page) == orjson.dumps(wire).decode()
    expect(page.locator("#m-1 .copy-record")).to_have_text("Copy record JSON")

    for name in ["Vision off", "Anthropic"]:  # one at a time: each swap replaces the links
        page.get_by_role("link", name=name).click()
        expect(page.get_by_role("link", name=name)).to_have_attribute("aria-current", "true")
    expect(page).to_have_url(re.compile(r"vision=0&shape=anthropic"))
    page.locator("#m-2 .copy-projection").click()
    expect(page.locator("#m-2 .copy-projection")).to_have_text("Copied")
    anthropic = replays[(0, "anthropic")]
    assert json.loads(clipboard(page)) == anthropic["messages"][1]
    page.locator("#m-0 .copy-projection").click()
    expect(page.locator("#m-0 .copy-projection")).to_have_text("Copied")
    assert json.loads(clipboard(page)) == {"role": "system", "content": anthropic["system"]}
