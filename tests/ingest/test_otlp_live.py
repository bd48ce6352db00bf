"""The OTLP receiver with the real OpenTelemetry SDK and its OTLP/HTTP exporters
(protobuf, protobuf with gzip, and JSON) sending to a live daphne, configured the way
docs/ingest.md tells an operator to: two environment variables."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from opentelemetry.exporter.otlp.json.http.trace_exporter import (
    OTLPSpanExporter as JsonSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from conversations.ingest.models import TraceConversation
from conversations.record.models.conversation import Message
from tests.conftest import Server
from tests.otlpdata import chat_turns, genai_attributes, request, span

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def otel_env(monkeypatch: pytest.MonkeyPatch, daphne: Server, token: str) -> Iterator[None]:
    """The two variables of docs/ingest.md's "Following live agents"."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{daphne.url}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer%20{token}")
    yield


def run_agent(exporter: SpanExporter, conversation: str, calls: int) -> InMemorySpanExporter:
    """An instrumented agent: one span per model call, each repeating the history."""
    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
    seen = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(SimpleSpanProcessor(seen))
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("invoke_agent support-bot"):
        for inputs, outputs in chat_turns(calls):
            with tracer.start_as_current_span(
                "chat gpt-4o",
                attributes=genai_attributes(inputs, outputs, conversation=conversation),
            ):
                pass
    provider.shutdown()
    return seen


def stored(key: str) -> list[tuple[str, str]]:
    conversation = TraceConversation.objects.get(key=key).conversation
    return [
        (m.role, m.blocks.get().text)
        for m in Message.objects.filter(conversation=conversation).order_by("seq")
    ]


def expected(calls: int) -> list[tuple[str, str]]:
    out = [("system", "You are a careful assistant.")]
    for n in range(calls):
        out += [("user", f"Question {n}?"), ("assistant", f"Answer {n}.")]
    return out


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: OTLPSpanExporter(), id="protobuf"),
        pytest.param(lambda: OTLPSpanExporter(compression=Compression.Gzip), id="protobuf-gzip"),
        pytest.param(lambda: JsonSpanExporter(), id="json"),
    ],
)
def test_a_real_exporter_lands_the_agents_conversation(otel_env, make, request):
    key = f"live-{request.node.callspec.id}"
    seen = run_agent(make(), key, calls=10)
    assert len(seen.get_finished_spans()) == 11  # ten model calls and the agent's span
    assert stored(key) == expected(10)
    conversation = TraceConversation.objects.get(key=key).conversation
    assert conversation.metadata["service.name"] == "support-bot"
    assert conversation.title == f"support-bot: {key}"


def test_the_same_spans_sent_again_store_nothing(otel_env):
    run_agent(OTLPSpanExporter(compression=Compression.Gzip), "again", calls=3)
    run_agent(OTLPSpanExporter(), "again", calls=3)
    assert stored("again") == expected(3)


def test_a_wrong_token_is_refused_and_the_exporter_says_so(otel_env, monkeypatch, caplog):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20rpl_wrong")
    run_agent(OTLPSpanExporter(), "refused", calls=1)
    assert not TraceConversation.objects.filter(key="refused").exists()
    assert "401" in caplog.text or "Unauthorized" in caplog.text


def test_the_trace_id_names_the_conversation_without_a_conversation_id(otel_env):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonSpanExporter()))
    inputs, outputs = chat_turns(1)[0]
    with provider.get_tracer("agent").start_as_current_span(
        "chat", attributes=genai_attributes(inputs, outputs)
    ) as span:
        trace_id = format(span.get_span_context().trace_id, "032x")
    provider.shutdown()
    assert stored(trace_id) == expected(1)


def test_concurrent_exports_of_one_new_conversation_store_it_once(daphne, token):
    # Eight agents' exporters at once, each with every span of the same chat in its own
    # order: one conversation is created, and each message stored once.
    turns = chat_turns(5)
    spans = [
        span(genai_attributes(inputs, outputs, conversation="raced"), start=n)
        for n, (inputs, outputs) in enumerate(turns)
    ]

    def export(order: int) -> list[int]:
        rotated = spans[order % 5 :] + spans[: order % 5]
        codes = []
        with daphne.client(token) as client:
            for one in rotated:
                response = client.post(
                    "/v1/traces",
                    content=request(one).SerializeToString(),
                    headers={"Content-Type": "application/x-protobuf"},
                )
                codes.append(response.status_code)
        return codes

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(export, range(8)))
    assert all(code == 200 for codes in answers for code in codes), answers
    assert TraceConversation.objects.filter(key="raced").count() == 1
    assert stored("raced") == expected(5)
