"""The headline of docs/contract.md §7 through the context API: `?upto=`, next_request,
unrecorded, largest and compactions, on real Claude Code sessions imported as an operator
would (tests/fixtures/real, sources and licences in its SOURCES.md) and on hand-made ones."""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from conversations.core.counting import next_request as nr
from tests import builders as b
from tests.conftest import ApiClient
from tests.realdata import REAL

LIST = "/api/conversations"
CLAUDE_CODE = sorted(p for p in Path(REAL).rglob("claude_code*.jsonl"))
pytestmark = pytest.mark.django_db


def imported(api: ApiClient, path: Path) -> list[str]:
    response = api.client.post(
        "/api/imports?format=claude-code",
        path.read_bytes(),
        content_type="application/octet-stream",
        headers=api._headers(None),
    )
    assert response.status_code == 201, response.content[:300]
    return [response.json()["id"], *(response.json().get("linked") or [])]


def context(api: ApiClient, cid: str, **params: Any) -> dict[str, Any]:
    response = api.get(f"{LIST}/{cid}/context", **params)
    assert response.status_code == 200, response.content[:300]
    return response.json()


def measured_turns(data: dict[str, Any], metadata: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(first seq of the turn, its measured input) for each provider turn, in order."""
    turns: list[tuple[int, int]] = []
    first: dict[str, int] = {}
    for m, meta in zip(data["messages"], metadata, strict=True):
        turn = meta.get("id")
        if isinstance(turn, str):
            first.setdefault(turn, m["seq"])
        usage = m.get("usage") or {}
        if m["role"] == "assistant" and usage.get("input"):
            start = first.get(turn, m["seq"]) if isinstance(turn, str) else m["seq"]
            if turns and turns[-1][0] == start:
                continue
            turns.append((start, usage["input"]))
    return turns


def record_metadata(api: ApiClient, cid: str) -> list[dict[str, Any]]:
    return [m["metadata"] for m in api.get(f"{LIST}/{cid}").json()["messages"]]


def test_next_request_predicts_each_measured_input_of_real_sessions(api: ApiClient) -> None:
    errors: list[tuple[float, str]] = []
    for path in CLAUDE_CODE:
        for cid in imported(api, path):
            whole = context(api, cid)
            for start, measured in measured_turns(whole, record_metadata(api, cid))[1:]:
                got = context(api, cid, upto=start - 1)
                assert got["upto"] == start - 1 and got["next_request"]["basis"] == "measured"
                errors.append((abs(got["next_request"]["tokens"] - measured) / measured, path.name))
    ratios = sorted(e for e, _ in errors)
    assert len(ratios) >= 7
    median, p90 = statistics.median(ratios), ratios[math.ceil(0.9 * len(ratios)) - 1]
    said = f"median {median:.2%}, p90 {p90:.2%}, worst {ratios[-1]:.2%} over {len(ratios)}"
    assert median <= 0.01 and p90 <= 0.04 and ratios[-1] <= 0.08, said


def test_the_headline_of_a_real_session_is_its_measurement_not_the_record_alone(api) -> None:
    (cid,) = imported(api, Path(REAL) / "claude_code_tool_heavy_parallel_interrupts.jsonl")
    data = context(api, cid)
    head = data["next_request"]
    # The last measured turn (#14, one response with #12) read 27,666 tokens of input;
    # the record alone holds a tenth of that.
    assert head["basis"] == "measured" and head["measured_seq"] == 14
    assert 27_666 < head["tokens"] < 27_666 * 1.1
    assert data["total"] < 27_666 / 5
    unrecorded = data["unrecorded"]
    assert unrecorded["measured_seq"] == 1
    first_input = next(m["usage"]["input"] for m in data["messages"] if m["seq"] == 1)
    assert unrecorded["tokens"] == first_input - data["overhead"] - data["messages"][0]["tokens"]


def test_without_usage_the_next_request_is_the_estimate(api: ApiClient) -> None:
    cid = api.post(LIST, {"title": "plain"}).json()["id"]
    for role, words in (("user", "hello there"), ("assistant", "hi")):
        api.post(f"{LIST}/{cid}/messages", {"role": role, "blocks": [b.text(words)]})
    data = context(api, cid)
    assert data["next_request"] == {
        "tokens": data["total"],
        "basis": "estimated",
        "measured_seq": None,
    }
    assert data["unrecorded"] == {"tokens": None, "measured_seq": None}
    assert context(api, cid, upto=0)["total"] == data["overhead"] + data["messages"][0]["tokens"]


def test_largest_are_the_heaviest_blocks_of_the_request(api: ApiClient) -> None:
    (cid,) = imported(api, Path(REAL) / "claude_code_tool_heavy_parallel_interrupts.jsonl")
    data = context(api, cid)
    largest = data["largest"]
    assert 0 < len(largest) <= nr.LARGEST
    assert [x["tokens"] for x in largest] == sorted((x["tokens"] for x in largest), reverse=True)
    record = api.get(f"{LIST}/{cid}").json()["messages"]
    for item in largest:
        block = record[item["seq"]]["blocks"][item["block"]]
        assert item["kind"] == block["type"]
    # Nothing heavier was left out: every message's kinds sum past the lightest listed.
    heaviest_kinds = max(max(m["by_kind"].values(), default=0) for m in data["messages"])
    assert largest[0]["tokens"] <= heaviest_kinds


def test_a_stored_compaction_is_listed_with_its_figures(api: ApiClient) -> None:
    (cid,) = imported(api, Path(REAL) / "claude_code_compact_boundary.jsonl")
    data = context(api, cid)
    assert data["compactions"] == [
        {"seq": 5, "trigger": "manual", "pre_tokens": 15808, "post_tokens": None, "summary_seq": 5}
    ]
    # The request after the boundary holds what the model still receives, from #5 on.
    assert data["next_request"]["basis"] == "estimated"
    after = sum(m["tokens"] for m in data["messages"] if m["seq"] >= 5)
    unrecorded = data["unrecorded"]["tokens"]  # carried across the boundary
    assert data["next_request"]["tokens"] == data["overhead"] + after + unrecorded
    # As of a message before the boundary, there was no compaction yet.
    assert context(api, cid, upto=4)["compactions"] == []
    assert context(api, cid, upto=4)["next_request"]["measured_seq"] == 4


def test_the_boundary_policy_keeps_the_model_and_its_window(api: ApiClient) -> None:
    # The message naming the model is before the boundary: the window must not be lost.
    (cid,) = imported(api, Path(REAL) / "claude_code_compact_boundary.jsonl")
    whole = context(api, cid)
    compacted = context(api, cid, compact="boundary")
    assert whole["window"] and compacted["window"] == whole["window"]
    assert compacted["model"] == whole["model"] == "claude-sonnet-4-5-20250929"


@pytest.mark.parametrize("value", ["-1", "x", "9", "1.0", "٣", " 1"])
def test_upto_not_a_stored_seq_is_a_400_naming_it(api: ApiClient, value: str) -> None:
    cid = api.post(LIST, {"title": "short"}).json()["id"]
    for _ in range(3):
        api.post(f"{LIST}/{cid}/messages", {"role": "user", "blocks": [b.text("x")]})
    response = api.get(f"{LIST}/{cid}/context", upto=value)
    assert response.status_code == 400
    assert response.json()["field"] == "upto"
    assert "upto" in response.json()["error"]


def test_a_streamed_turn_s_output_of_one_is_not_taken_for_a_count(
    api: ApiClient, operator_client: Any
) -> None:
    # Every measured turn of the real subagent session records output_tokens 1.
    (cid, *_) = imported(api, Path(REAL) / "claude_code_subagent_long_tool_output.jsonl")
    usages = [m["usage"] for m in context(api, cid)["messages"] if "usage" in m]
    assert usages and all(u["output_recorded"] == 1 for u in usages)
    assert all(u["output"] is None and u["output_ratio"] is None for u in usages)
    page = operator_client.get(f"/c/{cid}/").content.decode()
    assert "out recorded as 1, not trusted" in page and "1 out" not in page


# -- the page leads with it ------------------------------------------------------------------


def test_the_page_leads_with_the_next_request_and_names_its_basis(
    api: ApiClient, operator_client: Any
) -> None:
    (cid,) = imported(api, Path(REAL) / "claude_code_tool_heavy_parallel_interrupts.jsonl")
    data = context(api, cid)
    html = operator_client.get(f"/c/{cid}/").content.decode()
    head = data["next_request"]
    lead = f"≈{head['tokens']:,} tokens next request</strong> — "
    assert lead in html and "measured at #14 + ≈" in html
    assert html.index("pressure-next") < html.index("pressure-total")  # it comes first
    assert f'data-next="{head["tokens"]}" data-basis="measured"' in html
    unrecorded = data["unrecorded"]["tokens"]
    assert f"≈{unrecorded:,} unrecorded, inferred from usage at" in html
    assert 'class="seg seg-unrecorded"' in html
    for item in data["largest"]:
        assert f'<a href="#m-{item["seq"]}">#{item["seq"]}, block {item["block"]}</a>' in html
    assert html.count('class="share-bar"') == len(data["messages"])  # each message's share


def test_a_compaction_divider_shows_its_figures_and_links(
    api: ApiClient, operator_client: Any
) -> None:
    (cid,) = imported(api, Path(REAL) / "claude_code_compact_boundary.jsonl")
    data = context(api, cid)
    html = operator_client.get(f"/c/{cid}/").content.decode()
    before = data["messages"][4]["cumulative"]
    assert f"left out 5 earlier messages (≈{before:,} tokens)" in html
    assert '<a href="#m-5">the summary it continued from</a>' in html
    assert f'href="/c/{cid}/diff?b_compact=boundary"' in html


def test_a_live_frame_carries_the_new_headline(api: ApiClient) -> None:
    from conversations.live import fragments

    cid = api.post(LIST, {"title": "live"}).json()["id"]
    usage = {"usage": {"input_tokens": 1_000, "output_tokens": 5}, "model": "gpt-4o"}
    api.post(f"{LIST}/{cid}/messages", {"role": "user", "blocks": [b.text("hi")]})
    api.post(
        f"{LIST}/{cid}/messages",
        {"role": "assistant", "blocks": [b.text("hello")], "metadata": usage},
    )
    frame = fragments.messages_frame(cid, [1], True, "openai")
    assert 'data-next="' in frame.html and "measured at #1" in frame.html
    grown = api.post(f"{LIST}/{cid}/messages", {"role": "user", "blocks": [b.text("more " * 50)]})
    assert grown.status_code == 201
    frame = fragments.messages_frame(cid, [2], True, "openai")
    expected = context(api, cid)["next_request"]["tokens"]
    assert f'data-next="{expected}" data-basis="measured"' in frame.html


def test_a_share_link_shows_the_divider_without_the_diff_it_cannot_reach(api: ApiClient) -> None:
    from django.test import Client

    from conversations.record.models.conversation import Conversation
    from conversations.sharing.services import share_create

    (cid,) = imported(api, Path(REAL) / "claude_code_compact_boundary.jsonl")
    _, token = share_create(conversation=Conversation.objects.get(id=cid))
    html = Client().get(f"/s/{token}/").content.decode()
    assert "left out 5 earlier messages" in html and "compaction-diff" not in html


def test_the_window_is_set_per_conversation_through_the_api(api: ApiClient) -> None:
    (cid,) = imported(api, Path(REAL) / "claude_code_compact_boundary.jsonl")
    assert context(api, cid)["window_source"] == "claude-code"

    def patch(body: bytes) -> Any:
        return api.client.patch(
            f"{LIST}/{cid}", body, content_type="application/json", headers=api._headers(None)
        )

    response = patch(b'{"context_window": 50000}')
    assert response.status_code == 200, response.content
    data = context(api, cid)
    assert (data["window"], data["window_source"]) == (50_000, "conversation")
    assert context(api, cid, window=9_000)["window"] == 9_000  # the view still wins
    for bad in (b'{"context_window": 0}', b'{"context_window": "x"}', b'{"title": "y"}', b"[]"):
        assert patch(bad).status_code == 400, bad
    back = patch(b'{"context_window": null}')
    assert back.status_code == 200 and context(api, cid)["window_source"] == "claude-code"


def test_the_list_counts_a_conversation_s_compactions(api: ApiClient, operator_client: Any) -> None:
    (cid,) = imported(api, Path(REAL) / "claude_code_compact_boundary.jsonl")
    html = operator_client.get("/").content.decode()
    row = html[html.index(f'id="c-{cid}"') :]
    assert '<span class="badge compactions"' in row[: row.index("</tr>")]
    assert "1 compaction</span>" in row[: row.index("</tr>")]


def test_the_page_sets_a_conversation_s_window_for_those_who_may_change_it(
    api: ApiClient, operator_client: Any
) -> None:
    from django.contrib.auth.models import Permission
    from django.test import Client

    from tests.builders import make_user

    (cid,) = imported(api, Path(REAL) / "claude_code_compact_boundary.jsonl")
    page = f"/c/{cid}/"
    assert 'id="window-form"' not in operator_client.get(page).content.decode()
    assert operator_client.post(f"/c/{cid}/window", {"context_window": "5"}).status_code == 403

    editor = make_user("editor")
    editor.user_permissions.add(Permission.objects.get(codename="change_conversation"))
    client = Client()
    client.force_login(editor)
    assert 'id="window-form"' in client.get(page).content.decode()
    response = client.post(f"/c/{cid}/window", {"context_window": "64,000"})
    assert (response.status_code, response["Location"]) == (302, page)
    data = context(api, cid)
    assert (data["window"], data["window_source"]) == (64_000, "conversation")
    html = client.get(page).content.decode()
    assert 'value="64000"' in html and "window 64,000 — set on this conversation" in html
    # The field has a real label (docs/guide/context-pressure.md), not one it sits inside.
    assert '<label for="context-window">Window</label>' in html
    assert re.search(r'<input id="context-window" name="context_window"', html)
    refused = client.post(f"/c/{cid}/window", {"context_window": "<b hx-get=/x>1</b>"})
    assert refused.status_code == 400 and b"hx-get" not in refused.content
    assert client.post(f"/c/{cid}/window", {"context_window": ""}).status_code == 302
    assert context(api, cid)["window_source"] == "claude-code"
    assert Client().post(f"/c/{cid}/window", {"context_window": "9"}).status_code == 302  # login
    assert context(api, cid)["window_source"] == "claude-code"


# -- the window a Claude Code session ran with ----------------------------------------------


def imported_bytes(api: ApiClient, body: bytes) -> str:
    response = api.client.post(
        "/api/imports?format=claude-code",
        body,
        content_type="application/octet-stream",
        headers=api._headers(None),
    )
    assert response.status_code == 201, response.content[:300]
    return str(response.json()["id"])


def test_a_claude_code_session_counts_against_claude_code_s_window_not_the_table_s(
    api: ApiClient, operator_client: Any
) -> None:
    """genai-prices gives claude-opus-4-6 a 1M window; Claude Code runs it with 200,000
    unless it says otherwise, and the page says where the figure came from."""
    from conversations.core.counting import context_windows

    assert context_windows.window_of("claude-opus-4-6") == 1_000_000  # the table's figure
    (cid,) = imported(api, Path(REAL) / "claude_code_tool_heavy_parallel_interrupts.jsonl")
    data = context(api, cid)
    assert (data["model"], data["window"]) == ("claude-opus-4-6", 200_000)
    assert data["window_source"] == "claude-code"
    html = operator_client.get(f"/c/{cid}/").content.decode()
    share = f"{data['next_request']['tokens'] / 200_000:.1%}"
    assert f'<span class="next-percent">{share}</span>' in html
    assert "window 200,000 — Claude Code&#x27;s default (claude-opus-4-6)" in html
    # The overrides still win, and say so.
    assert (context(api, cid, window=9_000)["window_source"]) == "view"
    assert (
        "window 9,000 — from ?window="
        in operator_client.get(f"/c/{cid}/?window=9000").content.decode()
    )
    by_model = context(api, cid, model="claude-opus-4-6")
    assert (by_model["window"], by_model["window_source"]) == (1_000_000, "table")


def test_a_claude_code_session_that_says_it_ran_with_the_1m_context_gets_it(
    api: ApiClient,
) -> None:
    raw = (Path(REAL) / "claude_code_tool_heavy_parallel_interrupts.jsonl").read_bytes()
    cid = imported_bytes(api, raw.replace(b'"claude-opus-4-6"', b'"claude-opus-4-6[1m]"'))
    data = context(api, cid)
    assert (data["window"], data["window_source"]) == (1_000_000, "claude-code-1m")


def test_a_claude_code_compaction_past_200k_is_evidence_of_the_1m_window(
    api: ApiClient, operator_client: Any
) -> None:
    raw = (Path(REAL) / "claude_code_compact_boundary.jsonl").read_bytes()
    assert b'"preTokens":15808' in raw
    small = imported_bytes(api, raw)
    assert (context(api, small)["window"], context(api, small)["window_source"]) == (
        200_000,
        "claude-code",
    )
    cid = imported_bytes(api, raw.replace(b'"preTokens":15808', b'"preTokens":412345'))
    data = context(api, cid)
    assert (data["window"], data["window_source"]) == (1_000_000, "compaction")
    html = operator_client.get(f"/c/{cid}/").content.decode()
    assert "window 1,000,000 — Claude Code&#x27;s 1M context (it compacted at 412,345" in html


def test_an_otel_import_measures_the_next_request_at_the_spans_own_answer(
    api: ApiClient,
) -> None:
    """One exported span whose input repeats three long earlier turns: its usage is its
    answer's, so nothing is counted twice (docs/contract.md §6, §7)."""
    import json

    def part(role: str, text: str) -> dict[str, Any]:
        return {"role": role, "parts": [{"type": "text", "content": text}]}

    history = []
    for n in range(3):
        history += [part("user", f"Step {n}?"), part("assistant", "lorem ipsum " * 1_500)]
    attributes = {
        "gen_ai.input.messages": json.dumps([*history, part("user", "And now?")]),
        "gen_ai.output.messages": json.dumps([part("assistant", "Done.")]),
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.response.id": "chatcmpl-1",
        "gen_ai.usage.input_tokens": 14_000,
    }
    span = {
        "traceId": "ab" * 16,
        "spanId": "cd" * 8,
        "startTimeUnixNano": "1",
        "attributes": [
            {"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}
            for k, v in attributes.items()
        ],
    }
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()
    response = api.client.post(
        "/api/imports?format=otel-genai",
        body,
        content_type="application/octet-stream",
        headers=api._headers(None),
    )
    assert response.status_code == 201, response.content[:300]
    data = context(api, response.json()["id"])
    last = data["messages"][-1]
    assert data["next_request"] == {
        "tokens": 14_000 + last["tokens"],
        "basis": "measured",
        "measured_seq": last["seq"],
    }
    assert data["unrecorded"]["measured_seq"] == last["seq"]
    assert data["total"] + data["unrecorded"]["tokens"] == data["next_request"]["tokens"]


def test_unrecorded_carries_across_a_boundary_with_no_measured_turn_after_it(
    api: ApiClient, operator_client: Any
) -> None:
    # The system prompt and tools survive a compaction: the last measured input (#4, 15,660
    # tokens) is mostly what the record never held, and the request after the boundary
    # still carries it.
    (cid,) = imported(api, Path(REAL) / "claude_code_compact_boundary.jsonl")
    before = context(api, cid, upto=4)
    data = context(api, cid)
    assert before["unrecorded"]["tokens"] and before["unrecorded"]["tokens"] > 10_000
    assert data["unrecorded"] == before["unrecorded"]
    after = sum(m["tokens"] for m in data["messages"] if m["seq"] >= 5)
    expected = data["overhead"] + after + before["unrecorded"]["tokens"]
    assert data["next_request"] == {"tokens": expected, "basis": "estimated", "measured_seq": None}
    page = operator_client.get(f"/c/{cid}/").content.decode()
    assert "estimated from the record alone" not in page
    assert f"≈{before['unrecorded']['tokens']:,} unrecorded (inferred from usage at #4)" in page


def test_upto_never_reads_a_later_message(api: ApiClient) -> None:
    # The same first messages, once alone and once with a measured turn after them.
    usage = {"usage": {"input_tokens": 5_000, "output_tokens": 5}, "model": "gpt-4o"}
    ids = []
    for later in (False, True):
        cid = api.post(LIST, {"title": "upto"}).json()["id"]
        for text in ("hello " * 20, "more " * 30):
            api.post(f"{LIST}/{cid}/messages", {"role": "user", "blocks": [b.text(text)]})
        if later:
            answer = {"role": "assistant", "blocks": [b.text("ok")], "metadata": usage}
            api.post(f"{LIST}/{cid}/messages", answer)
        ids.append(cid)
    alone, followed = (context(api, cid, upto=1) for cid in ids)
    assert followed["unrecorded"] == alone["unrecorded"] == {"tokens": None, "measured_seq": None}
    assert followed["next_request"] == alone["next_request"]
