"""Reading a conversation (docs/guide/dashboard.md): fold labels with sizes, tool inputs on one line
when short, the metadata of a message and of a conversation in the headers (absent or odd values
show nothing, hostile ones are text), server-rendered times, and the per-message record and
projection endpoints behind the page's copy buttons."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from django.test import Client
from django.urls import reverse

from conversations.core import page_windows
from conversations.core.counting import preview
from conversations.dashboard.presenters.metadata import (
    CONVERSATION_META_ITEMS,
    MetaItem,
    conversation_meta,
    message_meta,
    source_time,
)
from conversations.dashboard.presenters.texts import (
    Truncation,
    fold_label,
    input_text,
    line_count,
    size_note,
)
from conversations.ingest.imports import transcript_import
from conversations.live import fragments
from conversations.record.models.conversation import Conversation
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_create
from conversations.sharing.services import share_create
from conversations.web import links
from tests.builders import png, stored, text, tool_result, tool_use
from tests.dashboard.test_views import detail_url, page
from tests.realdata import REAL

HOSTILE = '<script>alert(1)</script><img src=x onerror=alert(2)> hx-get="/admin/"'


# -- fold labels ----------------------------------------------------------------------------


def test_a_fold_label_says_how_many_lines_and_bytes_it_folds() -> None:
    text_40 = "\n".join(f"line {n}" for n in range(40))
    assert fold_label(text_40, None) == "show all 40 lines, 309 bytes"
    assert fold_label(text_40 + "\n", None) == "show all 40 lines, 310 bytes"
    assert fold_label("x" * 2100, None) == "show all 2.1 kB"  # one line: its size
    assert fold_label("é" * 1000, None) == "show all 2.0 kB"  # UTF-8 bytes
    many = "\n".join("y" * 200 for _ in range(400))
    assert fold_label(many, None) == "show all 400 lines, 80.4 kB"


def test_a_fold_of_a_text_shown_in_part_says_it_is_the_start_of_the_whole() -> None:
    start = "\n".join("z" * 100 for _ in range(400))
    cut = Truncation(81_234, "/rest")
    assert size_note(start, cut) == "first 400 lines, 40.4 kB of 81.2 kB"
    assert fold_label(start, cut) == "show the first 400 lines, 40.4 kB of 81.2 kB"


def test_line_counts_as_an_editor_counts_them() -> None:
    assert [line_count(t) for t in ["", "a", "a\n", "a\nb", "\n\n"]] == [0, 1, 1, 2, 2]


@pytest.mark.django_db
def test_the_page_labels_each_fold_with_its_size_and_each_result_with_its_size(
    operator_client: Client,
) -> None:
    output = "\n".join(f"line {n} of the build log" for n in range(40))
    conversation = stored(
        "Build",
        ("assistant", [tool_use("c1", "make")], {}),
        ("user", [tool_result("c1", output), tool_result("c1", "short")], {}),
        ("assistant", [{"type": "reasoning", "text": "a\nb\nc"}], {}),
    )
    root = page(operator_client.get(detail_url(conversation)))
    results = root.by_id("m-1").find(cls="record").find_all("section")
    size = preview.human_size(len(output))
    assert results[0].find("button", cls="show-all").text == f"show all 40 lines, {size}"
    assert results[0].find("button", cls="output-toggle").text == f"40 lines, {size}"
    assert results[1].find("button", cls="output-toggle").text == "5 bytes"
    assert not results[1].find_all("button", cls="show-all")  # short: nothing folded
    projection = root.by_id("m-1").find(cls="projection").find("button", cls="show-all")
    assert projection.text.startswith("show all 42 lines, ")
    summary = root.by_id("m-2").find("summary")
    assert summary.text == "Show reasoning (3 lines, 5 bytes)"


@pytest.mark.django_db
def test_a_truncated_long_tool_output_says_it_shows_the_start_of_how_much(
    operator_client: Client,
) -> None:
    # The real ~80 KB WebFetch result of a Claude Code subagent (tests/fixtures/real).
    raw = (REAL / "claude_code_subagent_long_tool_output.jsonl").read_bytes()
    outcome = transcript_import(raw=raw, format=None, title=None, file_name="a.jsonl")
    html = operator_client.get(f"/c/{outcome.conversation.id}/").content.decode()
    labels = re.findall(r'<button type="button" class="show-all">([^<]+)</button>', html)
    assert any(re.fullmatch(r"show the first 400 lines, [\d.]+ kB of 78\.\d kB", x) for x in labels)
    assert "show all</button>" not in html


# -- tool inputs ---------------------------------------------------------------------------


def test_a_short_tool_input_is_one_line_and_a_long_one_is_indented() -> None:
    assert input_text('{"b":1,"a":[1,2]}') == '{"b": 1, "a": [1, 2]}'  # order kept
    assert input_text("{}") == "{}"
    assert input_text('{"s":"two\\nlines"}') == '{"s": "two\\nlines"}'
    assert input_text('{"é":"ü"}') == '{"é": "ü"}'
    fits = '{"k": "' + "x" * 71 + '"}'
    assert len(fits) == 80 and input_text(fits) == fits
    over = '{"k": "' + "x" * 72 + '"}'
    assert input_text(over) == '{\n  "k": "' + "x" * 72 + '"\n}'


# -- message metadata ------------------------------------------------------------------------


def texts(items: list[MetaItem]) -> list[str]:
    return [i.text for i in items]


def test_message_metadata_of_each_source_is_model_tokens_stop_and_latency() -> None:
    claude = {
        "model": "claude-opus-4-6",
        "usage": {"input_tokens": 3, "cache_read_input_tokens": 27_000, "output_tokens": 173},
        "stop_reason": "tool_use",
        "latency_ms": 2412,
    }
    items = message_meta(claude)
    assert texts(items) == ["claude-opus-4-6", "27,003 in · 173 out", "stop: tool_use", "2.4 s"]
    assert items[1].title == (
        "Tokens the provider measured: input 27,003 (of which cache read 27,000); output 173"
    )
    openai = {"model": "gpt-4o", "usage": {"prompt_tokens": 10, "completion_tokens": 2}}
    assert texts(message_meta(openai)) == ["gpt-4o", "10 in · 2 out"]
    otel = {
        "gen_ai.request.model": "gpt-4",
        "gen_ai.response.model": "gpt-4-0613",
        "gen_ai.usage.input_tokens": 97,
        "gen_ai.usage.output_tokens": 52,
        "gen_ai.response.finish_reasons": ["stop", 7, ""],
        "duration_ms": 850,
    }
    assert texts(message_meta(otel)) == [
        "gpt-4-0613",
        "97 in · 52 out",
        "stop: stop",
        "850 ms",
    ]
    assert texts(message_meta({"finish_reason": "length", "latency_ms": 65_000})) == [
        "stop: length",
        "1 min 5 s",
    ]
    assert texts(message_meta({"usage": {"output_tokens": 9}})) == ["9 out"]


def test_usage_the_margin_count_already_shows_is_not_repeated() -> None:
    metadata = {"model": "m", "usage": {"input_tokens": 1, "output_tokens": 2}}
    assert texts(message_meta(metadata, usage_shown=True)) == ["m"]


@pytest.mark.parametrize(
    "metadata",
    [
        {},
        None,
        [],
        "model",
        {"model": None, "usage": None, "stop_reason": None, "latency_ms": None, "timestamp": None},
        {"model": {"name": "x"}, "usage": "lots", "stop_reason": ["end"], "latency_ms": "2 s"},
        {"model": "  ", "usage": {"input_tokens": "12", "output_tokens": True}},
        {"usage": {"input_tokens": -1}, "latency_ms": True, "duration_ms": -5},
        {"gen_ai.usage.input_tokens": 1.5, "gen_ai.response.finish_reasons": "stop"},
        {"latency_ms": float("inf")},
    ],
)
def test_absent_or_odd_metadata_shows_nothing(metadata: Any) -> None:
    assert message_meta(metadata) == []
    assert source_time(metadata) == (None, "")


def test_a_long_metadata_value_is_cut_and_whole_in_its_title_up_to_a_bound() -> None:
    (item,) = message_meta({"model": "m" * 1000})
    assert item.text == "m" * 79 + "…"
    assert item.title == ("model: " + "m" * 1000)[:299] + "…"


def test_source_time_is_parsed_when_it_is_iso_with_a_zone_else_kept_as_text() -> None:
    when, text_ = source_time({"timestamp": "2025-10-10T21:56:10.872Z"})
    assert when == datetime(2025, 10, 10, 21, 56, 10, 872000, tzinfo=UTC) and text_ == ""
    when, _ = source_time({"timestamp": "2025-10-10T23:56:10+02:00"})
    assert when == datetime(2025, 10, 10, 21, 56, 10, tzinfo=UTC)
    assert source_time({"timestamp": "2025-10-10T21:56:10"}) == (
        None,
        "2025-10-10T21:56:10",
    )  # no zone: not guessed
    assert source_time({"timestamp": "yesterday"}) == (None, "yesterday")
    assert source_time({"timestamp": "9" * 500})[1] == "9" * 79 + "…"
    assert source_time({"timestamp": 1700000000}) == (None, "")


EDGES = ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"]


@pytest.mark.parametrize("stamp", EDGES)
def test_a_source_time_past_the_calendars_ends_in_utc_is_kept_as_text(stamp: str) -> None:
    assert source_time({"timestamp": stamp}) == (None, stamp)


@pytest.mark.django_db
def test_a_message_whose_source_time_is_out_of_range_still_renders(
    operator_client: Client,
) -> None:
    conversation = conversation_create(title="Edge of time")
    for stamp in EDGES:
        hi = BLOCK_ADAPTER.validate_python(text("hi"))
        message_append(
            conversation=conversation, role="user", blocks=[hi], metadata={"timestamp": stamp}
        )
    body = page(operator_client.get(detail_url(conversation)))
    assert all(stamp in str(body) for stamp in EDGES)
    frame = fragments.messages_frame(str(conversation.id), [0, 1], True, "openai")
    assert all(stamp in frame.html for stamp in EDGES)


@pytest.mark.django_db
def test_hostile_metadata_is_text_in_the_header_and_none_is_never_printed(
    operator_client: Client,
) -> None:
    conversation = stored(
        HOSTILE,
        ("user", [text("hi")], {"model": None, "stop_reason": None, "usage": None}),
        (
            "assistant",
            [text("ok")],
            {
                "model": HOSTILE,
                "stop_reason": HOSTILE,
                "timestamp": HOSTILE,
                "gen_ai.usage.input_tokens": 5,
            },
        ),
    )
    html = operator_client.get(detail_url(conversation)).content.decode()
    assert "<script>alert(1)" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    header = page(operator_client.get(detail_url(conversation))).by_id("m-1").find("header")
    assert header.find("span", cls="meta-model").text == HOSTILE
    # OTel GenAI usage is measured usage like any provider's: the margin shows it.
    assert not header.find_all("span", cls="meta-tokens")
    assert header.find("span", cls="usage").text == "measured 5 in"
    assert header.find("span", cls="source-time").text.startswith("source time <script>")
    first = page(operator_client.get(detail_url(conversation))).by_id("m-0").find("header")
    assert "None" not in first.text and not first.find_all("span", cls="meta")


# -- conversation metadata ------------------------------------------------------------------


def test_conversation_metadata_is_model_source_then_plain_values_by_key() -> None:
    metadata = {
        "version": "2.1.38",
        "gitBranch": "master",
        "import": {"format": "claude-code", "file_name": "s.jsonl"},
        "gaps": [{"kind": "x"}],
        "tools": [{"name": "bash"}],
        "isSidechain": False,
        "cwd": "/home/op/app",
        "max_tokens": 1024,
        "empty": "",
        "nothing": None,
    }
    items = conversation_meta(metadata, model="claude-opus-4-6")
    assert texts(items) == [
        "model claude-opus-4-6",
        "source claude-code",
        "cwd /home/op/app",
        "gitBranch master",
        "isSidechain false",
        "max_tokens 1024",
        "version 2.1.38",
    ]
    assert texts(conversation_meta({"model": "own"}, model="other")) == ["model own"]
    otel = {"gen_ai.request.model": "gpt-4o", "gen_ai.provider.name": "openai"}
    assert texts(conversation_meta(otel)) == [
        "model gpt-4o",
        "gen_ai.provider.name openai",
    ]
    assert conversation_meta(None) == conversation_meta("x") == []
    many = {f"k{n:02}": n for n in range(50)}
    assert len(conversation_meta(many)) == CONVERSATION_META_ITEMS


@pytest.mark.django_db
def test_the_page_header_shows_the_conversation_metadata_as_text(operator_client: Client) -> None:
    conversation = conversation_create(
        title="Agent run", metadata={"agent": HOSTILE, "model": "gpt-4o", "env": "prod"}
    )
    root = page(operator_client.get(detail_url(conversation)))
    items = root.find("ul", cls="conv-meta").find_all("li")
    assert [li.text for li in items] == ["model gpt-4o", f"agent {HOSTILE}", "env prod"]
    assert "<script>alert(1)" not in operator_client.get(detail_url(conversation)).content.decode()
    bare = conversation_create(title="Bare")
    assert page(operator_client.get(detail_url(bare))).find_all("ul", cls="conv-meta") == []


# -- times -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_times_are_served_in_utc_with_utc_on_hover_and_the_script_localises_them(
    operator_client: Client,
) -> None:
    conversation = stored(
        "Times",
        ("user", [text("a")], {}),
        ("assistant", [text("b")], {"timestamp": "2025-10-10T23:56:10.5+02:00"}),
    )
    root = page(operator_client.get(detail_url(conversation)))
    plain = root.by_id("m-0").find("time")
    created = conversation.messages.get(seq=0).created_at
    assert plain.attrs["datetime"] == created.isoformat()
    assert plain.attrs["title"] == created.strftime("%Y-%m-%d %H:%M:%S") + " UTC"
    assert "local" in plain.classes
    source = root.by_id("m-1").find("time")
    assert source.attrs["datetime"] == "2025-10-10T21:56:10.500000+00:00"
    assert source.text == "2025-10-10 21:56:10"
    assert source.attrs["title"].startswith("source time 2025-10-10 21:56:10 UTC · stored ")
    assert "data-stored" in source.attrs


# -- copy record JSON, copy projection -----------------------------------------------------


@pytest.fixture
def run(db: None) -> Conversation:
    return stored(
        "Copy me",
        ("system", [text("Be terse.")], {}),
        ("user", [text("Look:"), png()], {"source": "api"}),
        (
            "assistant",
            [tool_use("c1", "zoom", level=3, order="kept")],
            {"model": "gpt-4o", "n": 1.10},
        ),
    )


def message_url(conversation: Conversation, seq: int, what: str, **query: Any) -> str:
    url = reverse(f"message-{what}", args=[str(conversation.id), seq])
    return url + links.query(**query) if query else url


def test_record_json_is_the_message_as_the_api_record_lists_it(
    operator_client: Client, api: Any, run: Conversation
) -> None:
    record = api.get(f"/api/conversations/{run.id}").json()
    for seq in range(3):
        response = operator_client.get(message_url(run, seq, "record"))
        assert response.status_code == 200
        assert response["Content-Type"] == "application/json"
        assert orjson.loads(response.content) == record["messages"][seq]
        assert response.content == orjson.dumps(record["messages"][seq])  # the same bytes
    assert (
        b'"input":{"level":3,"order":"kept"}'
        in operator_client.get(message_url(run, 2, "record")).content
    )


def test_projection_json_is_the_message_of_the_api_replay_for_the_toggles(
    operator_client: Client, api: Any, run: Conversation
) -> None:
    for vision in (1, 0):
        payload = api.get(f"/api/conversations/{run.id}/replay", vision=vision).json()
        for seq in range(3):
            response = operator_client.get(message_url(run, seq, "projection", vision=vision))
            assert response.status_code == 200
            assert orjson.loads(response.content) == payload["messages"][seq]
    anthropic = api.get(f"/api/conversations/{run.id}/replay", shape="anthropic").json()
    system = operator_client.get(message_url(run, 0, "projection", shape="anthropic"))
    assert orjson.loads(system.content) == {"role": "system", "content": anthropic["system"]}
    user = operator_client.get(message_url(run, 1, "projection", shape="anthropic"))
    assert orjson.loads(user.content) == anthropic["messages"][0]
    bad = operator_client.get(message_url(run, 1, "projection", shape="<b>"))
    assert bad.status_code == 400 and b"<b>" not in bad.content


def test_the_copy_endpoints_are_an_operators_only(
    client: Client, outsider_client: Client, operator_client: Client, run: Conversation
) -> None:
    for what in ("record", "projection"):
        url = message_url(run, 1, what)
        assert client.get(url).status_code == 302
        assert outsider_client.get(url).status_code == 403
        assert operator_client.get(message_url(run, 9, what)).status_code == 404
        missing = reverse(f"message-{what}", args=["00000000-0000-0000-0000-000000000000", 0])
        assert operator_client.get(missing).status_code == 404
        assert operator_client.post(url).status_code == 405


def test_each_message_offers_both_copies_with_urls_following_the_toggles(
    operator_client: Client, run: Conversation
) -> None:
    root = page(operator_client.get(detail_url(run, vision=0, shape="anthropic")))
    message = root.by_id("m-1")
    record = message.find("button", cls="copy-record")
    assert record.text == "Copy record JSON"
    assert record.attrs["data-url"] == message_url(run, 1, "record")
    projection = message.find("button", cls="copy-projection")
    assert projection.text == "Copy projection"
    assert projection.attrs["data-url"] == message_url(
        run, 1, "projection", vision=0, shape="anthropic"
    )


def test_a_share_page_copies_the_projection_in_scope_but_never_the_record(
    run: Conversation,
) -> None:
    _, token = share_create(conversation=run, up_to_seq=1, images=False)
    share = Client()
    html = share.get(f"/s/{token}/").content.decode()
    assert 'class="copy-projection"' in html and 'class="copy-record"' not in html
    inside = share.get(f"/s/{token}/c/{run.id}/m/1/projection.json?vision=1")
    assert inside.status_code == 200
    # A link without images is seen with vision off: no image data in its copy either.
    assert "not seen" in orjson.loads(inside.content)["content"]
    assert share.get(f"/s/{token}/c/{run.id}/m/2/projection.json").status_code == 404
    assert share.get(f"/s/{token}/c/{run.id}/m/1/record.json").status_code == 404


def test_a_share_sockets_frame_has_no_record_copy_but_the_operators_has(run: Conversation) -> None:
    shared = fragments.messages_frame(str(run.id), [2], True, "openai", share=True)
    assert 'class="copy-projection"' in shared.html and "copy-record" not in shared.html
    operator = fragments.messages_frame(str(run.id), [2], True, "openai")
    assert 'class="copy-record"' in operator.html


# -- bounds ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_message_of_a_hundred_long_results_stays_under_the_frame_limit() -> None:
    long = "\n".join(f"row {n}" for n in range(500))
    name = "n" * 200
    blocks = [tool_result(f"c{i}" + "i" * 200, long, name=name) for i in range(100)]
    conversation = stored("Wide", ("user", blocks, {"model": "m" * 500, "timestamp": "x" * 500}))
    frame = fragments.messages_frame(str(conversation.id), [0], True, "openai")
    assert len(frame.html.encode()) <= page_windows.FRAME_BYTES
    assert frame.html.count("show the first 400 lines") >= 1


# -- latency from OpenTelemetry spans ------------------------------------------------------


@pytest.mark.django_db
def test_an_otlp_export_keeps_each_calls_latency_and_the_page_shows_it(
    operator_client: Client,
) -> None:
    messages = '[{"role": "user", "parts": [{"type": "text", "content": "Hi"}]}]'
    output = (
        '[{"role": "assistant", "parts": [{"type": "text", "content": "Hello"}],'
        ' "finish_reason": "stop"}]'
    )
    attributes = [
        {"key": "gen_ai.input.messages", "value": {"stringValue": messages}},
        {"key": "gen_ai.output.messages", "value": {"stringValue": output}},
        {"key": "gen_ai.response.model", "value": {"stringValue": "gpt-4o-2024"}},
        {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "12"}},
        {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "3"}},
    ]
    span = {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "b7ad6b7169203331",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000001250000000",
        "attributes": attributes,
    }
    body = orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})
    outcome = transcript_import(raw=body, format=None, title=None, file_name=None)
    assistant = outcome.conversation.messages.get(seq=1)
    assert assistant.metadata["latency_ms"] == 1250
    header = page(operator_client.get(detail_url(outcome.conversation))).by_id("m-1")
    chips = [s.text for s in header.find("header").find_all("span", cls="meta")]
    assert chips == ["gpt-4o-2024", "stop: stop", "1.2 s"]
    # The span's usage is measured usage: the margin shows it beside the estimate.
    assert header.find("span", cls="usage").text.startswith("measured 12 in · 3 out")
