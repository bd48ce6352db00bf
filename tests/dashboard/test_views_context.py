"""The pressure view, the compaction preview and the projection diff pages (docs/contract.md §7):
their numbers equal the API's, every policy change is marked, bad input is an escaped 400."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.test import Client

from conversations.core.counting import compact
from tests import builders as b
from tests.api.test_api_context import append, context, create
from tests.conftest import ApiClient


def numbers(html: str, pattern: str) -> list[int]:
    return [int(x) for x in re.findall(pattern, html)]


@pytest.fixture
def agent(api: ApiClient) -> str:
    cid = create(api, "Agent run", metadata={"model": "gpt-4o"})
    append(api, cid, "system", [b.text("You are terse.")])
    append(api, cid, "user", [b.text("Look <b>here</b>:"), b.png()])
    for i in range(5):
        append(
            api,
            cid,
            "assistant",
            [
                {"type": "reasoning", "text": f"step {i}"},
                b.tool_use(f"c{i}", "read", path=f"/f{i}"),
            ],
            metadata={"usage": {"prompt_tokens": 500 + i, "completion_tokens": 9}},
        )
        append(api, cid, "user", [b.tool_result(f"c{i}", f"file {i} <script>x</script> " * 30)])
    return cid


def test_the_pressure_view_shows_the_apis_numbers(api, operator_client: Client, agent) -> None:
    for query in ({}, {"vision": "0", "shape": "anthropic"}, {"window": "2000"}):
        html = operator_client.get(f"/c/{agent}/", query).content.decode()
        data = context(api, agent, **query)
        assert numbers(html, r'id="pressure"[^>]*data-total="(\d+)"') == [data["total"]]
        assert numbers(html, r'class="tokens[^"]*" data-tokens="(\d+)"') == [
            m["tokens"] for m in data["messages"]
        ]
        for kind, n in data["by_kind"].items():
            assert f'data-kind="{kind}" data-tokens="{n}"' in html
        assert "o200k_base" in html
        window = re.search(r'id="pressure"[^>]*data-window="(\d*)"', html).group(1)
        assert window == str(data["window"])
    assert "measured 500 in" in unescape(html)


def test_the_trigger_mark_sits_at_the_apis_threshold(api, operator_client, agent) -> None:
    data = context(api, agent, compact="clear_tool_uses", trigger="300", keep="9")
    seq = data["threshold"]["seq"]
    # The page marks where the default trigger (100,000) would be reached: not here.
    html = operator_client.get(f"/c/{agent}/").content.decode()
    assert "not reached" in html
    assert seq is not None


def test_the_compaction_preview_marks_each_changed_block(api, operator_client, agent) -> None:
    data = context(api, agent, compact="microcompact", keep="2")
    html = operator_client.get(
        f"/c/{agent}/context", {"compact": "microcompact", "keep": "2"}
    ).content.decode()
    summary = re.search(r'data-before="(\d+)" data-after="(\d+)" data-changed="(\d+)"', html)
    assert [int(x) for x in summary.groups()] == [
        data["compact"]["before"],
        data["compact"]["after"],
        len(data["compact"]["changed"]),
    ]
    assert html.count('data-changed="1"') == len(data["compact"]["changed"])
    assert compact.CLEARED_RESULT in unescape(html)
    assert "<script>x</script>" not in html  # hostile content is text
    download = "replay.json?vision=1&amp;shape=openai&amp;compact=microcompact&amp;keep=2"
    assert f'href="/c/{agent}/{download}"' in html


def test_the_full_payload_toggle_shows_what_the_policy_would_change(operator_client, agent):
    html = operator_client.get(
        f"/c/{agent}/context", {"compact": "microcompact", "keep": "2", "payload": "full"}
    ).content.decode()
    assert "the policy changes this" in html
    assert compact.CLEARED_RESULT not in unescape(html)
    assert f'href="/c/{agent}/replay.json?vision=1&amp;shape=openai"' in html


def test_the_download_follows_the_policy(api, operator_client, agent) -> None:
    query = {"compact": "clear_tool_uses", "trigger": "0", "keep": "1"}
    page = operator_client.get(f"/c/{agent}/replay.json", query)
    assert page.status_code == 200
    assert page.content == api.get(f"/api/conversations/{agent}/replay", **query).content


def test_the_policy_form_ignores_fields_of_other_policies(operator_client, agent) -> None:
    response = operator_client.get(
        f"/c/{agent}/context",
        {"compact": "microcompact", "keep": "1", "trigger": "", "exclude_tools": ""},
    )
    assert response.status_code == 200


@pytest.mark.parametrize(
    "query",
    [
        {"compact": "nope<b>"},
        {"compact": "microcompact", "keep": "<i>x"},
        {"window": "-1"},
        {"from": "x"},
    ],
)
def test_bad_input_is_an_escaped_400(operator_client, agent, query) -> None:
    for path in (f"/c/{agent}/context", f"/c/{agent}/diff", f"/c/{agent}/"):
        if path.endswith(f"{agent}/") and ("compact" in query or "from" in query):
            continue  # the conversation page takes neither
        if path.endswith("/diff") and "window" in query:
            continue  # a diff counts no tokens
        response = operator_client.get(path, query)
        assert response.status_code == 400, (path, query)
        body = response.content.decode()
        assert "<b>" not in body and "<i>" not in body  # quoted input is escaped


def test_the_diff_aligns_vision_on_against_off(operator_client, agent) -> None:
    html = operator_client.get(
        f"/c/{agent}/diff", {"vision": "1", "b_vision": "0"}
    ).content.decode()
    statuses = re.findall(r'data-status="(\w+)"', html)
    assert statuses == ["same", "changed"] + ["same"] * 10
    assert '<ins class="diff">' in html and '<del class="diff">' in html
    assert "cannot view images" in unescape(html)


def test_the_diff_of_full_against_compacted_and_against_another_run(api, operator_client, agent):
    html = operator_client.get(f"/c/{agent}/diff", {"b_compact": "microcompact"}).content.decode()
    assert re.findall(r'data-status="(\w+)"', html).count("changed") == 2
    other = create(api, "Second run")
    append(api, other, "system", [b.text("You are terse.")])
    append(api, other, "user", [b.text("Look <b>there</b>:"), b.png()])
    html = operator_client.get(f"/c/{agent}/diff", {"b_conversation": other}).content.decode()
    statuses = re.findall(r'data-status="(\w+)"', html)
    assert statuses[:2] == ["same", "changed"] and set(statuses[2:]) == {"left"}
    assert (
        operator_client.get(
            f"/c/{agent}/diff", {"b_conversation": "00000000-0000-0000-0000-000000000000"}
        ).status_code
        == 404
    )


@pytest.mark.parametrize("page", ["context", "diff"])
def test_pages_need_an_operator(client: Client, outsider_client: Client, agent, page) -> None:
    anonymous = client.get(f"/c/{agent}/{page}")
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    assert outsider_client.get(f"/c/{agent}/{page}").status_code == 403


def test_the_compaction_summary_words_one_changed_block_in_the_singular(
    api, operator_client, agent
) -> None:
    data = context(api, agent, compact="microcompact", keep="4")
    assert len(data["compact"]["changed"]) == 1
    html = operator_client.get(
        f"/c/{agent}/context", {"compact": "microcompact", "keep": "4"}
    ).content.decode()
    assert "· 1 block changed" in html and "1 blocks" not in html


def test_a_conversation_without_a_boundary_names_none(api, operator_client) -> None:
    cid = create(api, "No usage", metadata={"model": "gpt-4o"})
    append(api, cid, "user", [b.text("hello")])
    html = operator_client.get(f"/c/{cid}/").content.decode()
    assert "estimated from the record alone (no measured usage)" in html
    assert "boundary" not in html.split('id="pressure"', 1)[1].split("</section>", 1)[0]


def test_the_page_counts_a_claude_code_import_in_the_anthropic_shape(api, operator_client):
    """Without `?shape=`, the page's headline and bar follow the source as the context API
    does, and say so; an explicit `?shape=` wins (docs/contract.md §7)."""
    from tests.realdata import REAL

    raw = (REAL / "large/claude_code_screenshot_tool_result_image.jsonl").read_bytes()
    cid = api.post("/api/imports?format=claude-code", raw).json()["id"]
    for query in ({}, {"shape": "openai"}):
        html = operator_client.get(f"/c/{cid}/", query).content.decode()
        data = context(api, cid, **query)
        assert numbers(html, r'id="pressure"[^>]*data-total="(\d+)"') == [data["total"]]
        assert numbers(html, r'id="pressure"[^>]*data-next="(\d+)"') == [
            data["next_request"]["tokens"]
        ]
        assert f'data-shape="{data["shape"]}"' in html
        assert f'data-shape-source="{data["shape_source"]}"' in html
    assert data["shape"] == "openai"
    assert context(api, cid)["shape"] == "anthropic"
