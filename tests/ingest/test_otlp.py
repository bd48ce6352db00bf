"""`POST /v1/traces` (docs/contract.md §6): OTLP/HTTP protobuf and JSON, gzip, token auth, the
suffix rule, partial success, and bounded bodies. The real exporters are in
test_otlp_live.py; these drive the view with hand-made requests."""

from __future__ import annotations

import base64
import gzip
import json
import tracemalloc
import zlib

import pytest
from django.test import Client
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from conversations.core.importers import otlp
from conversations.ingest import reads as ingest_reads
from conversations.ingest.models import TraceConversation
from conversations.record.models.conversation import Conversation, Message
from tests import otlpdata
from tests.otlpdata import assistant, chat_turns, genai_attributes, request, span, user
from tests.realdata import REAL

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


def post(body: bytes, token: str | None, content_type: str = PROTOBUF, **headers: str):
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return Client().post("/v1/traces", body, content_type=content_type, headers=headers)


def answer(response) -> ExportTraceServiceResponse:
    decoded = ExportTraceServiceResponse()
    if response["Content-Type"] == PROTOBUF:
        decoded.ParseFromString(response.content)
    else:
        json_format.Parse(response.content, decoded)
    return decoded


def stored(key: str) -> list[tuple[str, list[str]]]:
    conversation = TraceConversation.objects.get(key=key).conversation
    return [
        (m.role, [b.text for b in m.blocks.all()])
        for m in Message.objects.filter(conversation=conversation).order_by("seq")
    ]


def one_turn(conversation: str = "conv-1", **kwargs) -> ExportTraceServiceRequest:
    inputs, outputs = chat_turns(1)[0]
    return request(span(genai_attributes(inputs, outputs, conversation=conversation), **kwargs))


# --- authentication and the protocol's answers ------------------------------------------


@pytest.mark.django_db
def test_anonymous_export_is_refused_with_a_status_in_its_content_type():
    response = post(one_turn().SerializeToString(), None)
    assert response.status_code == 401
    assert response["Content-Type"] == PROTOBUF
    assert response["WWW-Authenticate"] == 'Bearer realm="replay"'
    status = status_pb2.Status()
    status.ParseFromString(response.content)
    assert "Authorization" in status.message
    assert Conversation.objects.count() == 0


@pytest.mark.django_db
def test_a_bad_token_is_refused_in_json_for_a_json_request():
    response = post(otlpdata.otlp_json(one_turn()), "rpl_not-a-token", JSON)
    assert response.status_code == 401
    assert response["Content-Type"] == JSON
    assert json.loads(response.content)["message"] == "API token is unknown or revoked."


def test_only_post_is_allowed(token):
    response = Client().get("/v1/traces", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 405
    assert response["Allow"] == "POST"


def test_protobuf_spans_land_in_the_conversation_they_name(token):
    response = post(one_turn().SerializeToString(), token)
    assert response.status_code == 200
    assert response["Content-Type"] == PROTOBUF
    assert not answer(response).HasField("partial_success")
    assert stored("conv-1") == [
        ("system", ["You are a careful assistant."]),
        ("user", ["Question 0?"]),
        ("assistant", ["Answer 0."]),
    ]
    conversation = TraceConversation.objects.get(key="conv-1").conversation
    assert conversation.metadata["import"]["format"] == "otel-genai"
    assert conversation.metadata["service.name"] == "test-agent"
    reply = conversation.messages.get(seq=2)
    assert reply.metadata["gen_ai.request.model"] == "gpt-4o"
    assert reply.metadata["gen_ai.usage.output_tokens"] == 7
    assert reply.metadata["finish_reason"] == "stop"


def test_a_spans_duration_is_kept_as_the_calls_latency(token):
    inputs, outputs = chat_turns(1)[0]
    timed = span(genai_attributes(inputs, outputs), start=1_700_000_000_000_000_000)
    timed.end_time_unix_nano = timed.start_time_unix_nano + 2_345_678_901
    assert post(request(timed).SerializeToString(), token).status_code == 200
    conversation = TraceConversation.objects.get().conversation
    assert conversation.messages.get(seq=2).metadata["latency_ms"] == 2345
    assert "latency_ms" not in conversation.messages.get(seq=1).metadata  # not the user's


def test_json_ids_are_hex_and_key_the_conversation_without_a_conversation_id(token):
    trace_id = bytes(range(16))
    inputs, outputs = chat_turns(1)[0]
    export = request(span(genai_attributes(inputs, outputs), trace_id=trace_id))
    body = otlpdata.otlp_json(export)
    assert b'"traceId": "000102030405060708090a0b0c0d0e0f"' in body
    # The trap: read as proto3 JSON, that hex would be base64 and give other bytes.
    naive = ExportTraceServiceRequest()
    json_format.Parse(body, naive)
    assert naive.resource_spans[0].scope_spans[0].spans[0].trace_id != trace_id
    response = post(body, token, JSON)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == JSON
    assert stored(trace_id.hex())[-1] == ("assistant", ["Answer 0."])


def test_json_with_ids_that_are_not_hex_is_refused_naming_the_field(token):
    body = json.loads(otlpdata.otlp_json(one_turn()))
    body["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "not hex at all"
    response = post(json.dumps(body).encode(), token, JSON)
    assert response.status_code == 400
    message = json.loads(response.content)["message"]
    assert "resourceSpans[0].scopeSpans[0].spans[0].traceId must be hex" in message
    assert Conversation.objects.count() == 0


def test_structured_attributes_store_what_json_strings_do(token):
    inputs, outputs = chat_turns(1)[0]
    as_text = span(genai_attributes(inputs, outputs, conversation="text"))
    as_values = span(genai_attributes(inputs, outputs, conversation="values"), structured=True)
    kinds = {kv.value.WhichOneof("value") for kv in as_values.attributes}
    assert "array_value" in kinds
    for export in (request(as_text), request(as_values)):
        assert post(export.SerializeToString(), token).status_code == 200
    assert stored("text") == stored("values")
    # And through OTLP/JSON, where structured values are arrayValue/kvlistValue objects.
    json_values = span(genai_attributes(inputs, outputs, conversation="json"), structured=True)
    assert post(otlpdata.otlp_json(request(json_values)), token, JSON).status_code == 200
    assert stored("json") == stored("text")


def test_gzip_and_deflate_bodies_are_read(token):
    body = one_turn("zipped").SerializeToString()
    response = post(gzip.compress(body), token, **{"Content-Encoding": "gzip"})
    assert response.status_code == 200, response.content
    body = one_turn("deflated").SerializeToString()
    response = post(zlib.compress(body), token, **{"Content-Encoding": "deflate"})
    assert response.status_code == 200, response.content
    assert stored("zipped") == stored("deflated")


def test_a_body_of_several_gzip_members_is_read_and_of_too_many_refused(token):
    body = one_turn("members").SerializeToString()
    half = len(body) // 2
    two = gzip.compress(body[:half]) + gzip.compress(body[half:])
    response = post(two, token, **{"Content-Encoding": "gzip"})
    assert response.status_code == 200, response.content
    # 150,000 empty members took 4.7 s when each member was handed the whole rest.
    many = gzip.compress(b"") * 150_000 + gzip.compress(body)
    response = post(many, token, **{"Content-Encoding": "gzip"})
    assert response.status_code == 400
    assert b"more than 64 members" in response.content


def test_inflating_many_members_costs_what_the_body_costs() -> None:
    from conversations.core.importers import otlp

    body = b"".join(gzip.compress(bytes([i]) * 100_000) for i in range(otlp.MAX_MEMBERS))
    out = otlp.decompress(body, "gzip", limit=10**8)
    assert out == b"".join(bytes([i]) * 100_000 for i in range(otlp.MAX_MEMBERS))
    assert otlp.decompress(body[: len(body) // 64], "gzip", limit=10**8) == bytes(100_000)
    with pytest.raises(otlp.OtlpError, match="truncated"):
        otlp.decompress(body[:-3], "gzip", limit=10**8)


def gzip_of_zeros(size: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b"\x00" * (1024 * 1024)
    return b"".join(packer.compress(chunk) for _ in range(size // len(chunk))) + packer.flush()


def test_a_gzip_bomb_is_refused_before_it_fills_memory(token, settings):
    settings.REPLAY_MAX_BODY_MB = 1
    bomb = gzip_of_zeros(64 * 1024 * 1024)
    assert len(bomb) < 100_000
    tracemalloc.start()
    try:
        response = post(bomb, token, **{"Content-Encoding": "gzip"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert response.status_code == 413
    assert "REPLAY_MAX_BODY_MB" in status_of(response).message
    assert peak < 16 * 1024 * 1024, f"inflating the bomb took {peak} bytes"


def status_of(response) -> status_pb2.Status:
    status = status_pb2.Status()
    status.ParseFromString(response.content)
    return status


@pytest.mark.parametrize(
    ("body", "headers", "status", "words"),
    [
        (b"\xff\xff\xff", {}, 400, "not an ExportTraceServiceRequest"),
        (b"not gzip", {"Content-Encoding": "gzip"}, 400, "not valid gzip"),
        (b"x", {"Content-Encoding": "br"}, 400, "'br' is not supported"),
    ],
)
def test_unreadable_bodies_are_refused_with_a_reason(token, body, headers, status, words):
    response = post(body, token, **headers)
    assert response.status_code == status
    assert words in status_of(response).message


def test_an_unknown_content_type_is_415(token):
    response = post(b"{}", token, "text/plain")
    assert response.status_code == 415
    assert "application/x-protobuf" in json.loads(response.content)["message"]


def test_spans_without_genai_messages_are_accepted_and_ignored(token):
    export = request(span({"http.method": "GET"}))
    response = post(export.SerializeToString(), token)
    assert response.status_code == 200
    assert not answer(response).HasField("partial_success")
    assert Conversation.objects.count() == 0


# --- the suffix rule --------------------------------------------------------------------


def test_ten_spans_of_one_conversation_store_each_message_once_in_order(token):
    turns = chat_turns(10)
    spans = [
        span(genai_attributes(inputs, outputs, conversation="ten"), start=n)
        for n, (inputs, outputs) in enumerate(turns)
    ]
    # One export per call, as a live agent sends them, and once more all together.
    for one in spans:
        assert post(request(one).SerializeToString(), token).status_code == 200
    response = post(request(*spans).SerializeToString(), token)
    assert not answer(response).HasField("partial_success")
    expected = [("system", ["You are a careful assistant."])]
    for n in range(10):
        expected += [("user", [f"Question {n}?"]), ("assistant", [f"Answer {n}."])]
    assert stored("ten") == expected
    conversation = TraceConversation.objects.get(key="ten").conversation
    assert conversation.message_count == 21


def test_spans_arriving_out_of_order_still_store_each_message_once(token):
    turns = chat_turns(4)
    spans = [
        span(genai_attributes(inputs, outputs, conversation="shuffled"), start=n)
        for n, (inputs, outputs) in enumerate(turns)
    ]
    for one in (spans[2], spans[0], spans[3], spans[1]):
        response = post(request(one).SerializeToString(), token)
        assert not answer(response).HasField("partial_success")
    assert [role for role, _ in stored("shuffled")] == ["system"] + ["user", "assistant"] * 4


def test_a_diverging_history_is_rejected_as_a_partial_success(token):
    first = span(genai_attributes([user("Hello?")], [assistant("Hi.")], conversation="fork"))
    other = span(
        genai_attributes(
            [user("Something else?"), assistant("Hi."), user("More?")],
            [assistant("Sure.")],
            conversation="fork",
        ),
        start=2,
    )
    kept = span(genai_attributes([user("Unrelated")], None, conversation="kept"), start=3)
    post(request(first).SerializeToString(), token)
    response = post(request(other, kept).SerializeToString(), token)
    assert response.status_code == 200
    partial = answer(response).partial_success
    assert partial.rejected_spans == 1
    assert other.span_id.hex() in partial.error_message
    assert "differs from the one stored" in partial.error_message
    assert "at message 1" in partial.error_message
    assert [texts for _, texts in stored("fork")] == [
        ["You are a careful assistant."],
        ["Hello?"],
        ["Hi."],
    ]
    assert stored("kept")[-1] == ("user", ["Unrelated"])


def test_a_span_with_unstorable_content_is_rejected_and_the_others_stored(token):
    # A text no record can hold (a lone surrogate); an invalid image is a gap instead
    # (test_an_invalid_inline_image_is_a_gap_and_the_rest_of_the_span_is_stored).
    attributes = genai_attributes([user("x")], None, conversation="bad")
    attributes["gen_ai.input.messages"] = (
        '[{"role":"user","parts":[{"type":"text","content":"\\ud800"}]}]'
    )
    bad = span(attributes)
    good = span(genai_attributes([user("fine")], None, conversation="good"), start=2)
    malformed = span({"gen_ai.input.messages": "[{"}, start=3)
    response = post(request(bad, good, malformed).SerializeToString(), token)
    partial = answer(response).partial_success
    assert partial.rejected_spans == 2
    assert "surrogate" in partial.error_message
    assert "gen_ai.input.messages" in partial.error_message
    assert not TraceConversation.objects.filter(key="bad").exists()
    assert stored("good")[-1] == ("user", ["fine"])


def test_the_decoder_reads_span_events_holding_the_messages():
    inputs, outputs = chat_turns(1)[0]
    event_span = span({"gen_ai.conversation.id": "evented"})
    event = event_span.events.add(name=otlp.DETAILS_EVENT)
    for key, value in genai_attributes(inputs, outputs, system=None).items():
        event.attributes.add(key=key).value.CopyFrom(otlpdata.any_value(value))
    spans, total = otlp.genai_spans(request(event_span))
    assert total == 1
    assert [s.key for s in spans] == ["evented"]
    assert json.loads(spans[0].input_messages) == inputs


def test_bytes_attributes_become_base64_text():
    value = otlpdata.any_value("x")
    value.bytes_value = b"\x00\x01"
    assert otlp.any_value(value) == base64.b64encode(b"\x00\x01").decode()


def test_json_bodies_are_held_to_the_api_limits(token):
    body = otlpdata.otlp_json(one_turn("strict"))
    duplicated = body.replace(b'"resourceSpans":', b'"resourceSpans": [], "resourceSpans":', 1)
    response = post(duplicated, token, JSON)
    assert response.status_code == 400
    assert "duplicate key" in json.loads(response.content)["message"]
    deep = b'{"resourceSpans": ' + b"[" * 100 + b"]" * 100 + b"}"
    response = post(deep, token, JSON)
    assert response.status_code == 400
    assert "nests deeper than 64 levels" in json.loads(response.content)["message"]
    assert Conversation.objects.count() == 0


def test_parts_without_a_kind_of_their_own_are_gaps_of_the_conversation(token):
    picture = {"type": "uri", "modality": "image", "uri": "https://example.com/cat.png"}
    first = span(genai_attributes([user("Hello?")], [assistant("Hi.")], conversation="gapped"))
    later = span(
        genai_attributes(
            [user("Hello?"), assistant("Hi."), {"role": "user", "parts": [picture]}],
            None,
            conversation="gapped",
        ),
        start=2,
    )
    for one in (first, later, later):  # the gap is listed once, where it was stored
        post(request(one).SerializeToString(), token)
    conversation = TraceConversation.objects.get(key="gapped").conversation
    [gap] = conversation.metadata["gaps"]
    assert (gap["kind"], gap["message"], gap["block"]) == ("image", 3, 0)
    assert gap["detail"] == "https://example.com/cat.png"
    assert "not stored" in conversation.messages.get(seq=3).blocks.get().text


# --- each span stored or rejected on its own (docs/contract.md §6 rule 3) ----------------


def test_a_bad_span_between_good_ones_is_rejected_alone_and_logged(token, caplog):
    good = [one_turn(f"conv-{n}").resource_spans[0].scope_spans[0].spans[0] for n in (1, 3)]
    bad = span({"gen_ai.conversation.id": "conv-2", "gen_ai.input.messages": "[" * 5000})
    with caplog.at_level("WARNING", logger="conversations.ingest.otlp"):
        response = post(request(good[0], bad, good[1]).SerializeToString(), token)
    assert response.status_code == 200
    assert response["Content-Type"] == PROTOBUF
    partial = answer(response).partial_success
    assert partial.rejected_spans == 1 and "deeper than 64" in partial.error_message
    assert [len(stored(f"conv-{n}")) for n in (1, 3)] == [3, 3]
    assert not TraceConversation.objects.filter(key="conv-2").exists()
    assert any("not stored" in r.getMessage() for r in caplog.records)


def test_an_invalid_inline_image_is_a_gap_and_the_rest_of_the_span_is_stored(token):
    picture = {"type": "blob", "modality": "image", "mime_type": "image/png", "content": "!!"}
    turn = {"role": "user", "parts": [{"type": "text", "content": "Look:"}, picture]}
    attributes = genai_attributes([turn], [assistant("A cat.")], conversation="pic")
    response = post(request(span(attributes)).SerializeToString(), token)
    assert response.status_code == 200
    assert not answer(response).HasField("partial_success")
    (system, looked, answered) = stored("pic")
    assert looked[1][0] == "Look:" and looked[1][1].startswith("[image (image/png): not stored")
    assert answered == ("assistant", ["A cat."])
    conversation = TraceConversation.objects.get(key="pic").conversation
    (gap,) = conversation.metadata["gaps"]
    assert (gap["kind"], gap["message"], gap["block"]) == ("image", 1, 1)


def test_the_list_page_says_how_many_spans_were_rejected_lately_and_why(
    token, operator_client, admin_client
):
    hostile = {"role": "<img src=x onerror=alert(1)>", "parts": []}
    bad = span(genai_attributes([hostile], None, conversation="bad-role"))
    response = post(
        request(bad, span(genai_attributes([user("ok")], None))).SerializeToString(), token
    )
    assert answer(response).partial_success.rejected_spans == 1
    html = operator_client.get("/").content.decode()
    note = html[html.index('id="rejected-spans"') :].split("</p>")[0]
    assert "1 OpenTelemetry span rejected by POST /v1/traces in the last 24 hours" in note
    assert "&lt;img src=x onerror=alert(1)&gt;" in note and "<img" not in note
    assert "all of them" not in note  # the admin link is for staff
    assert "rejected-spans" in admin_client.get("/").content.decode()
    listing = admin_client.get("/admin/conversations/rejectedspan/")
    assert listing.status_code == 200 and b"onerror=alert(1)&gt;" in listing.content


def test_rejections_are_kept_a_day_and_bounded(db, monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    from conversations.ingest import following
    from conversations.ingest.following import span_rejected
    from conversations.ingest.models import RejectedSpan

    old = span_rejected(trace_id="t", span_id="s0", reason="old")
    RejectedSpan.objects.filter(pk=old.pk).update(received_at=timezone.now() - timedelta(hours=25))
    monkeypatch.setattr(following, "REJECTIONS_MAX", 3)
    for n in range(1, 6):
        span_rejected(trace_id="t", span_id=f"s{n}", reason="x" * 5_000)
    kept = list(RejectedSpan.objects.values_list("span_id", flat=True))
    assert kept == ["s5", "s4", "s3"]
    assert all(
        len(r) == following.REASON_CHARS
        for r in RejectedSpan.objects.values_list("reason", flat=True)
    )


def test_the_list_page_pays_one_query_for_rejections_when_there_are_none(
    db, django_assert_num_queries
):
    from datetime import timedelta

    from django.utils import timezone

    since = timezone.now() - timedelta(hours=24)
    with django_assert_num_queries(1):
        assert ingest_reads.spans_rejected_since(since) == (0, [])


# --- usage belongs to the span's own output (docs/contract.md §6, §7) --------------------


def _long_history(turns: int) -> list[dict]:
    """`turns` earlier exchanges whose answers are long: what an agent's later span repeats."""
    history = []
    for n in range(turns):
        history += [user(f"Step {n}?"), assistant(f"Result {n}: " + "lorem ipsum dolor " * 900)]
    return [*history, user("And now?")]


def _span_with_usage(inputs: list[dict], outputs: list[dict], **extra) -> ExportTraceServiceRequest:
    values = genai_attributes(inputs, outputs, conversation="usage-1") | {
        "gen_ai.usage.input_tokens": 14_000,
        "gen_ai.usage.output_tokens": 9,
        "gen_ai.response.id": "chatcmpl-last",
        **extra,
    }
    return request(span(values))


def test_a_spans_usage_is_kept_on_its_output_not_on_the_history_it_repeats(token):
    """The semantic conventions' own tool-call span: its input holds the earlier assistant
    call, whose usage was another span's."""
    examples = {
        e.get("anchor"): e["value"]
        for e in json.loads((REAL / "otel_genai_semconv_examples.json").read_text())["examples"]
    }
    export = _span_with_usage(
        examples["gen-ai-input-messages-tool-call-span-2"],
        examples["gen-ai-output-messages-tool-call-span-2"],
    )
    assert post(export.SerializeToString(), token).status_code == 200
    conversation = TraceConversation.objects.get(key="usage-1").conversation
    carrying = {
        m.seq: m.metadata.get("gen_ai.usage.input_tokens") for m in conversation.messages.all()
    }
    last = conversation.message_count - 1
    assert [seq for seq, n in carrying.items() if n is not None] == [last]
    earlier_call = conversation.messages.get(seq=last - 2)
    assert earlier_call.role == "assistant"
    assert "gen_ai.response.id" not in earlier_call.metadata  # not the last call's answer
    assert earlier_call.metadata["span_id"]  # still says which span brought it


def test_the_next_request_of_a_span_repeating_its_history_is_its_measurement(
    token, api, operator_client
):
    """The page's headline and bar say what the API says: the span's measured input plus
    its own answer, and what the record lacks inferred at that answer."""
    export = _span_with_usage(_long_history(3), [assistant("Done.")])
    assert post(export.SerializeToString(), token).status_code == 200
    conversation = TraceConversation.objects.get(key="usage-1").conversation
    data = api.get(f"/api/conversations/{conversation.id}/context").json()
    last = data["messages"][-1]
    assert data["next_request"] == {
        "tokens": 14_000 + last["tokens"],
        "basis": "measured",
        "measured_seq": last["seq"],
    }
    before = data["total"] - last["tokens"]
    assert data["unrecorded"] == {"tokens": 14_000 - before, "measured_seq": last["seq"]}
    html = operator_client.get(f"/c/{conversation.id}/").content.decode()
    head = data["next_request"]
    assert f"≈{head['tokens']:,} tokens next request</strong> — " in html
    assert f"measured at #{last['seq']} + ≈{last['tokens']:,} since</span>" in html
    unrecorded = data["unrecorded"]["tokens"]
    assert f"≈{unrecorded:,} unrecorded, inferred from usage at" in html
    assert f'data-kind="unrecorded" data-tokens="{unrecorded}"' in html
    # The bar's parts, the record and what it lacks, add up to the headline.
    assert data["total"] + unrecorded == head["tokens"]
