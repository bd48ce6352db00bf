"""OTLP trace requests for tests: GenAI spans as protobuf, as OTLP/JSON, and a chat's
history as the spans of an agent that repeats it on every call."""

from __future__ import annotations

import base64
import json
import secrets
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

SYSTEM = [{"type": "text", "content": "You are a careful assistant."}]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "content": text}]}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "parts": [{"type": "text", "content": text}]}


def chat_turns(count: int) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """(input, output) of each of `count` calls of one chat: each input repeats the whole
    history so far and asks one more question."""
    history: list[dict[str, Any]] = []
    turns = []
    for n in range(count):
        history.append(user(f"Question {n}?"))
        output = [assistant(f"Answer {n}.") | {"finish_reason": "stop"}]
        turns.append((list(history), output))
        history.append(assistant(f"Answer {n}."))
    return turns


def genai_attributes(
    inputs: list[dict[str, Any]],
    outputs: list[dict[str, Any]] | None,
    *,
    conversation: str | None = None,
    system: list[dict[str, Any]] | None = SYSTEM,
) -> dict[str, Any]:
    """Span attributes as instrumentations set them: messages as JSON strings."""
    values: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.input.messages": json.dumps(inputs),
    }
    if outputs is not None:
        values["gen_ai.output.messages"] = json.dumps(outputs)
        values["gen_ai.usage.output_tokens"] = 7
    if system is not None:
        values["gen_ai.system_instructions"] = json.dumps(system)
    if conversation is not None:
        values["gen_ai.conversation.id"] = conversation
    return values


def any_value(value: Any) -> AnyValue:
    """A Python value as a structured AnyValue (objects as kvlists, lists as arrays)."""
    out = AnyValue()
    if isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        out.int_value = value
    elif isinstance(value, float):
        out.double_value = value
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, list):
        out.array_value.values.extend(any_value(item) for item in value)
    elif isinstance(value, dict):
        out.kvlist_value.values.extend(
            KeyValue(key=k, value=any_value(v)) for k, v in value.items()
        )
    return out


def span(
    attributes: dict[str, Any],
    *,
    trace_id: bytes | None = None,
    start: int = 1,
    structured: bool = False,
) -> Span:
    """A span; with `structured`, JSON-string attributes are sent as structured values."""
    result = Span(
        trace_id=trace_id or secrets.token_bytes(16),
        span_id=secrets.token_bytes(8),
        name="chat gpt-4o",
        start_time_unix_nano=start,
        end_time_unix_nano=start + 1,
    )
    for key, value in attributes.items():
        if structured and isinstance(value, str) and value[:1] in "[{":
            value = json.loads(value)
        result.attributes.append(KeyValue(key=key, value=any_value(value)))
    return result


def request(*spans: Span, service: str = "test-agent") -> ExportTraceServiceRequest:
    export = ExportTraceServiceRequest()
    resource = ResourceSpans()
    resource.resource.attributes.append(KeyValue(key="service.name", value=any_value(service)))
    resource.scope_spans.append(ScopeSpans(spans=list(spans)))
    export.resource_spans.append(resource)
    return export


def otlp_json(export: ExportTraceServiceRequest) -> bytes:
    """OTLP/JSON as the specification writes it: camelCase keys, trace and span ids in hex
    (not the base64 the generic proto3 JSON mapping would give)."""
    data = json_format.MessageToDict(export)
    for resource in data.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for item in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in item:
                        item[key] = base64.b64decode(item[key]).hex()
    return json.dumps(data).encode()
