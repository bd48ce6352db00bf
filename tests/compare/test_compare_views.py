"""The compare page and its picker (docs/contract.md §9): as an operator, an outsider and
anonymously; opening on the page of the first divergence; folding; hostile text as text;
unreachable under share links."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from conversations.sharing.services import share_create
from tests.builders import text, tool_result, tool_use
from tests.compare.test_compare_api import run, task

PAGE = "/compare/"


def page(client: Client, a: Any, b: Any | None = None, **params: Any) -> Any:
    query = {"a": str(a.id)} | ({"b": str(b.id)} if b is not None else {}) | params
    return client.get(PAGE, query)


@pytest.mark.sqlite
def test_the_page_shows_both_runs_and_what_changed(operator_client: Client) -> None:
    a = run(*task(tools=("read_file", "read_file", "grep")), title="Run A")
    b = run(*task(tools=("read_file", "grep", "grep")), title="Run B")
    response = page(operator_client, a, b)
    assert response.status_code == 200
    html = response.content.decode()
    assert "B called `grep` where A called `read_file` at #4" in html
    assert 'id="compare-summary"' in html and "read_file 2 · grep 1" in html
    # The first divergence is marked, and every row links to its message.
    first = re.search(r'<div class="compare-row [^"]*first-divergence"[^>]*>', html)
    assert first is not None and 'id="row-4"' in first.group(0)
    assert f'href="/c/{a.id}/#m-4"' in html
    assert f'href="/c/{b.id}/#m-4"' in html
    assert 'data-status="only-a"' in html and 'data-status="only-b"' in html
    # The differing pair marks the words that differ (the tool's name in the result).
    assert '<del class="diff">read_file</del>' in html
    assert '<ins class="diff">grep</ins>' in html
    assert 'data-first-row="4"' in html


@pytest.mark.sqlite
def test_unchanged_runs_are_folded_and_open_on_demand(operator_client: Client) -> None:
    messages = [("user", [text(f"question {i}")]) for i in range(30)]
    changed = list(messages)
    changed[25] = ("user", [text("another question")])
    a, b = run(*messages), run(*changed)
    html = page(operator_client, a, b).content.decode()
    assert "24 identical messages" in html
    assert f'<a href="/c/{a.id}/#m-0">A #0–#23</a>' in html  # a fold links to its start
    assert "3 identical messages" in html  # the tail, past one row of context
    assert html.count('class="compare-row') == 3  # the change and one row either side
    opened = page(operator_client, a, b, open="0").content.decode()
    assert "24 identical messages" not in opened and "3 identical messages" in opened
    assert opened.count('class="compare-row') == 27


@pytest.mark.sqlite
def test_the_page_opens_on_the_page_of_the_first_divergence(operator_client: Client) -> None:
    messages = [("user", [text(f"q{i}")]) for i in range(1100)]
    changed = list(messages)
    changed[700] = ("user", [text("different")])
    a, b = run(*messages), run(*changed)
    html = page(operator_client, a, b).content.decode()
    assert 'data-page="2"' in html and 'data-pages="3"' in html
    assert 'id="row-700"' in html and "first-divergence" in html
    first = page(operator_client, a, b, page="1").content.decode()
    assert 'data-page="1"' in first and "500 identical messages" in first
    assert page(operator_client, a, b, page="4").status_code == 404


@pytest.mark.sqlite
def test_hostile_content_shows_as_text(operator_client: Client) -> None:
    hostile = '<script>alert(1)</script><div hx-get="/x" hx-trigger="load">'
    a = run(("user", [text(hostile)]), title=hostile)
    b = run(("user", [text(hostile + " more")]), title="<img src=x onerror=alert(2)>")
    html = page(operator_client, a, b).content.decode()
    assert "<script>alert(1)" not in html and 'hx-get="/x"' not in html
    assert "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


@pytest.mark.sqlite
@pytest.mark.parametrize(
    ("query", "status", "named"),
    [
        ({}, 400, "a is required"),
        ({"a": "nope"}, 400, "a must be a conversation id"),
        ({"a": "A", "b": "<b>bold</b>"}, 400, "b must be a conversation id"),
        ({"a": "A", "b": "00000000-0000-0000-0000-000000000002"}, 404, "Conversation b"),
        ({"a": "00000000-0000-0000-0000-000000000001", "b": "A"}, 404, "Conversation a"),
        ({"a": "A", "b": "A", "shape": "gemini"}, 400, "shape must be"),
        ({"a": "A", "b": "A", "page": "x"}, 400, "page must be"),
    ],
)
def test_bad_or_unknown_ids_name_a_or_b(
    operator_client: Client, query: dict[str, str], status: int, named: str
) -> None:
    a = run(*task())
    response = operator_client.get(
        PAGE, {k: str(a.id) if v == "A" else v for k, v in query.items()}
    )
    assert response.status_code == status
    html = response.content.decode()
    assert named in html
    assert "<b>bold</b>" not in html


@pytest.mark.sqlite
def test_outsiders_and_the_anonymous_are_refused(outsider_client: Client, client: Client) -> None:
    a, b = run(*task()), run(*task())
    assert page(outsider_client, a, b).status_code == 403
    assert page(outsider_client, a).status_code == 403
    anonymous = page(client, a, b)
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]


@pytest.mark.sqlite
def test_the_picker_lists_runs_of_the_same_cwd_most_recent_first(operator_client: Client) -> None:
    here = run(*task(), title="Here", metadata={"cwd": "/srv/app"})
    older = run(*task(), title="Older sibling", metadata={"cwd": "/srv/app"})
    newer = run(*task(), title="Newer sibling", metadata={"cwd": "/srv/app"})
    run(*task(), title="Elsewhere", metadata={"cwd": "/srv/other"})
    html = page(operator_client, here).content.decode()
    assert "Sharing its cwd /srv/app" in html
    assert html.index("Newer sibling") < html.index("Older sibling")
    assert "Elsewhere" not in html
    assert f"b={newer.id}" in html and f"b={older.id}" in html
    found = page(operator_client, here, q="Elsewhere").content.decode()
    assert 'id="pick-found"' in found and "Elsewhere" in found


@pytest.mark.sqlite
def test_the_conversation_page_offers_compare_with(operator_client: Client) -> None:
    a = run(*task())
    html = operator_client.get(f"/c/{a.id}/").content.decode()
    assert f'href="/compare/?a={a.id}" id="compare-link"' in html


@pytest.mark.sqlite
def test_share_links_do_not_reach_the_comparison(client: Client, operator_client) -> None:
    a, b = run(*task()), run(*task())
    _link, token = share_create(conversation=a)
    shared = client.get(f"/s/{token}/")
    assert shared.status_code == 200
    assert "compare-link" not in shared.content.decode()
    assert client.get(f"/s/{token}/compare/", {"a": str(a.id), "b": str(b.id)}).status_code == 404
    # Holding a link signs no one in: the page itself still wants an operator.
    assert page(client, a, b).status_code == 302


@pytest.mark.sqlite
def test_a_real_session_against_itself_is_one_fold(operator_client: Client, api) -> None:
    from tests.compare.test_compare_api import imported

    cid = imported(api, "claude_code_tool_heavy_parallel_interrupts.jsonl")
    html = operator_client.get(PAGE, {"a": cid, "b": cid}).content.decode()
    assert "The runs are the same throughout." in html
    assert 'class="compare-row' not in html and "identical messages" in html


def test_tool_rounds_fixture_is_used() -> None:
    assert tool_use("c", "x")["name"] == "x" and tool_result("c")["tool_use_id"] == "c"


@pytest.mark.sqlite
def test_the_pickers_metadata_is_plain_muted_text_not_a_note(operator_client: Client) -> None:
    here = run(*task(), title="Here", metadata={"cwd": "/srv/app"})
    run(*task(), title="Sibling", metadata={"cwd": "/srv/app"})
    html = page(operator_client, here).content.decode()
    items = re.findall(r'<ol class="pick-list">.*?</ol>', html, re.DOTALL)
    assert items and all('class="note"' not in item for item in items)
    assert all('class="pick-meta"' in item for item in items)
    css = (Path(settings.BASE_DIR) / "static" / "replay.css").read_text()
    assert re.search(r"\.pick-meta\s*\{[^}]*color: var\(--muted\)", css)
