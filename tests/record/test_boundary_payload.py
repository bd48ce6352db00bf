"""After a compaction the request starts at the boundary (docs/contract.md §7): the replay
payload and the Markdown export's projection of a compacted conversation carry the last
stored boundary's summary and what follows it; `?compact=none` gives the whole record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.api.test_next_request_api import LIST, imported
from tests.conftest import ApiClient
from tests.realdata import REAL

pytestmark = pytest.mark.django_db
FIXTURE = Path(REAL) / "claude_code_compact_boundary.jsonl"


def streamed(api: ApiClient, path: str, **params: str) -> bytes:
    response = api.get(path, **params)
    assert response.status_code == 200, response
    return b"".join(response.streaming_content)


@pytest.mark.parametrize("shape", ["openai", "anthropic"])
def test_the_default_payload_starts_at_the_last_boundary(api: ApiClient, shape: str) -> None:
    (cid,) = imported(api, FIXTURE)
    default = streamed(api, f"{LIST}/{cid}/replay", shape=shape)
    boundary = streamed(api, f"{LIST}/{cid}/replay", shape=shape, compact="boundary")
    whole = streamed(api, f"{LIST}/{cid}/replay", shape=shape, compact="none")
    assert default == boundary
    assert len(json.loads(whole)["messages"]) > len(json.loads(default)["messages"])
    summary = json.dumps(json.loads(default)["messages"][0])
    assert "continued from a previous conversation" in summary.lower() or "summary" in summary


def test_the_markdown_projection_starts_at_the_last_boundary(api: ApiClient) -> None:
    (cid,) = imported(api, FIXTURE)
    default = streamed(api, f"{LIST}/{cid}/markdown").decode()
    whole = streamed(api, f"{LIST}/{cid}/markdown", compact="none").decode()
    assert default != whole
    assert len(default) < len(whole)


def test_the_dashboard_download_is_the_api_payload(api: ApiClient, operator_client) -> None:  # type: ignore[no-untyped-def]
    (cid,) = imported(api, FIXTURE)
    for params in ({}, {"compact": "none"}):
        response = operator_client.get(f"/c/{cid}/replay.json", params)
        assert response.status_code == 200
        page = b"".join(response.streaming_content)
        assert page == streamed(api, f"{LIST}/{cid}/replay", **params)


def test_the_dashboard_markdown_is_the_api_export(api: ApiClient, operator_client) -> None:  # type: ignore[no-untyped-def]
    (cid,) = imported(api, FIXTURE)
    for params in ({}, {"compact": "none"}):
        response = operator_client.get(f"/c/{cid}/export.md", params)
        assert response.status_code == 200
        page = b"".join(response.streaming_content)
        assert page == streamed(api, f"{LIST}/{cid}/markdown", **params)


def test_the_record_pane_marks_the_messages_before_the_boundary_not_sent(
    api: ApiClient,
    operator_client,  # type: ignore[no-untyped-def]
) -> None:
    (cid,) = imported(api, FIXTURE)
    html = operator_client.get(f"/c/{cid}/").content.decode()
    marked = {
        int(html[at : html.index('"', at)])
        for at in (i + len('id="m-') for i in _starts(html, 'id="m-'))
        if 'class="not-sent"' in html[at : html.find("</header>", at)]
    }
    assert marked == {0, 1, 2, 3, 4}


def _starts(text: str, needle: str) -> list[int]:
    found, at = [], text.find(needle)
    while at >= 0:
        found.append(at)
        at = text.find(needle, at + 1)
    return found


@pytest.mark.parametrize("shape", ["openai", "anthropic"])
def test_the_streamed_answers_equal_the_whole_reads(api: ApiClient, shape: str) -> None:
    import orjson

    from conversations.core.counting.compact import Policy
    from conversations.core.options import ReplayOptions
    from conversations.record.counting import preview_counts
    from conversations.record.models.conversation import Conversation
    from conversations.record.reads import selectors

    (cid,) = imported(api, FIXTURE)
    conversation = Conversation.objects.get(id=cid)
    options = ReplayOptions(True, shape)  # type: ignore[arg-type]
    payload = preview_counts.compacted_payload(
        conversation, options, Policy(name="boundary", keep=0)
    )
    assert streamed(api, f"{LIST}/{cid}/replay", shape=shape) == orjson.dumps(payload)
    whole = selectors.markdown_export(conversation, vision=True, shape=shape, payload=payload)  # type: ignore[arg-type]
    assert streamed(api, f"{LIST}/{cid}/markdown", shape=shape) == whole.encode()
