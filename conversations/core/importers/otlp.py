"""OTLP/HTTP trace requests, decoded (pure): the spans that carry GenAI messages.

Reads `ExportTraceServiceRequest` as protobuf or as OTLP/JSON (whose trace and span ids
are hex, not the base64 that the proto3 JSON mapping expects), and turns each span's
attributes, sent as JSON strings or as structured `AnyValue`s, into plain values.
"""

from __future__ import annotations

import base64
import zlib
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from conversations.core import strictjson

Encoding: TypeAlias = Literal["protobuf", "json"]
CONTENT_TYPES: dict[str, Encoding] = {
    "application/x-protobuf": "protobuf",
    "application/protobuf": "protobuf",
    "application/json": "json",
}
MEDIA_TYPES: dict[Encoding, str] = {
    "protobuf": "application/x-protobuf",
    "json": "application/json",
}

CONVERSATION_ID = "gen_ai.conversation.id"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
MESSAGE_ATTRIBUTES = (SYSTEM_INSTRUCTIONS, INPUT_MESSAGES, OUTPUT_MESSAGES)
# Kept in each stored message's metadata when the span has them (never replayed).
PROVENANCE_ATTRIBUTES = (
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.system",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.response.id",
    "gen_ai.response.finish_reasons",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.agent.name",
)
# The event that newer instrumentations use for the same attributes as the span.
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
# OTLP/JSON fields holding ids in hex (OTLP specification, "JSON Protobuf Encoding").
HEX_ID_FIELDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


class OtlpError(ValueError):
    """A request that cannot be read as OTLP; the message names the problem."""


class TooLarge(OtlpError):
    """The body, or what it decompresses to, is over the limit."""


@dataclass(frozen=True, slots=True)
class GenAISpan:
    """One span's GenAI attributes: the messages as sent (JSON text or structured values,
    which the otel-genai importer reads alike) and the provenance worth keeping."""

    trace_id: str
    span_id: str
    name: str
    start: int
    conversation_id: str | None
    system_instructions: Any
    input_messages: Any
    output_messages: Any
    provenance: dict[str, Any]
    service: str | None
    end: int = 0  # the span's end (Unix ns): with `start`, the call's latency

    @property
    def latency_ms(self) -> int | None:
        """How long the call took, in whole milliseconds; None when the span does not say."""
        return (self.end - self.start) // 1_000_000 if self.end > self.start > 0 else None

    @property
    def key(self) -> str:
        """The conversation it belongs to: `gen_ai.conversation.id`, else the trace id."""
        return self.conversation_id or self.trace_id


def encoding_of(content_type: str) -> Encoding | None:
    media_type = content_type.split(";", 1)[0].strip().lower()
    return CONTENT_TYPES.get(media_type)


MAX_MEMBERS = 64  # gzip members in one body (an exporter sends one)
INFLATE_PIECE = 1 << 16


def decompress(body: bytes, content_encoding: str, *, limit: int) -> bytes:
    """The body as sent before `Content-Encoding` (gzip, deflate or identity), refusing
    to inflate past `limit` bytes: a small bomb never gets to fill memory."""
    encoding = content_encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding == "gzip":
        wbits = 16 + zlib.MAX_WBITS
    elif encoding == "deflate":
        wbits = zlib.MAX_WBITS
    else:
        raise OtlpError(f"Content-Encoding {encoding!r} is not supported; use gzip or none.")
    out = bytearray()
    view, pos, members = memoryview(body), 0, 0
    try:
        while pos < len(body):  # gzip allows several members one after another
            members += 1
            if members > MAX_MEMBERS:
                raise OtlpError(f"the {encoding} body has more than {MAX_MEMBERS} members")
            inflater = zlib.decompressobj(wbits)
            while not inflater.eof:
                if pos >= len(body):
                    raise OtlpError(f"the {encoding} body is truncated")
                # Fed a piece at a time, so what a member leaves over is at most a piece:
                # handing it the whole rest made many small members quadratic.
                piece = view[pos : pos + INFLATE_PIECE]
                pos += len(piece)
                out += inflater.decompress(piece, limit + 1 - len(out))
                if len(out) > limit or inflater.unconsumed_tail:
                    raise TooLarge("the decompressed body is over the limit")
            pos -= len(inflater.unused_data)
    except zlib.error as exc:
        raise OtlpError(f"the body is not valid {encoding}: {exc}") from None
    return bytes(out)


def decode_request(body: bytes, encoding: Encoding) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    if encoding == "protobuf":
        try:
            request.ParseFromString(body)
        except DecodeError as exc:
            raise OtlpError(f"the body is not an ExportTraceServiceRequest: {exc}") from None
        return request
    try:
        data = strictjson.loads(body)  # docs/contract.md §3's limits, as on every JSON body
    except strictjson.StrictJSONError as exc:
        raise OtlpError(str(exc)) from None
    if not isinstance(data, dict):
        raise OtlpError("the body must be a JSON object (an ExportTraceServiceRequest)")
    _hex_ids_to_base64(data, "")
    try:
        json_format.ParseDict(data, request, ignore_unknown_fields=True, max_recursion_depth=64)
    except json_format.ParseError as exc:
        raise OtlpError(f"the body is not an ExportTraceServiceRequest: {exc}") from None
    return request


def _hex_ids_to_base64(value: Any, path: str) -> None:
    """OTLP/JSON writes ids as hex; the proto3 JSON mapping reads bytes as base64."""
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if key in HEX_ID_FIELDS and isinstance(item, str):
                value[key] = _hex_to_base64(item, where)
            elif key not in ("attributes", "body"):  # attribute values are the sender's own
                _hex_ids_to_base64(item, where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _hex_ids_to_base64(item, f"{path}[{index}]")


def _hex_to_base64(value: str, where: str) -> str:
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise OtlpError(f"{where} must be hex, not {value[:40]!r}") from None
    return base64.b64encode(raw).decode()


def genai_spans(request: ExportTraceServiceRequest) -> tuple[list[GenAISpan], int]:
    """The spans that carry GenAI messages, oldest first, and the count of all spans."""
    found: list[GenAISpan] = []
    total = 0
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        service = resource.get("service.name")
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                total += 1
                genai = _genai_span(span, service if isinstance(service, str) else None)
                if genai is not None:
                    found.append(genai)
    found.sort(key=lambda span: span.start)
    return found, total


def _genai_span(span: Span, service: str | None) -> GenAISpan | None:
    values = attributes(span.attributes)
    for event in span.events:
        if event.name == DETAILS_EVENT:
            values = attributes(event.attributes) | values
    if not any(name in values for name in (INPUT_MESSAGES, OUTPUT_MESSAGES)):
        return None
    conversation_id = values.get(CONVERSATION_ID)
    return GenAISpan(
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        name=span.name,
        start=span.start_time_unix_nano,
        conversation_id=str(conversation_id) if conversation_id not in (None, "") else None,
        system_instructions=values.get(SYSTEM_INSTRUCTIONS),
        input_messages=values.get(INPUT_MESSAGES),
        output_messages=values.get(OUTPUT_MESSAGES),
        provenance={k: values[k] for k in PROVENANCE_ATTRIBUTES if k in values},
        service=service,
        end=span.end_time_unix_nano,
    )


def attributes(pairs: Any) -> dict[str, Any]:
    """`KeyValue`s as a dict of plain values (a repeated key: the last one wins)."""
    values: dict[str, Any] = {}
    pair: KeyValue
    for pair in pairs:
        values[pair.key] = any_value(pair.value)
    return values


def any_value(value: AnyValue) -> Any:
    """An `AnyValue` as the JSON value it stands for; bytes become base64 text."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "int_value":
        return value.int_value
    if kind == "double_value":
        return value.double_value
    if kind == "array_value":
        return [any_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return None


def export_response(encoding: Encoding, *, rejected: int = 0, message: str = "") -> bytes:
    """An `ExportTraceServiceResponse`, with `partial_success` when spans were rejected."""
    response = ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    return _encode(response, encoding)


def status(encoding: Encoding, code: int, message: str) -> bytes:
    """A `google.rpc.Status`: what OTLP/HTTP answers with a 4xx or 5xx."""
    return _encode(status_pb2.Status(code=code, message=message), encoding)


def _encode(message: Any, encoding: Encoding) -> bytes:
    if encoding == "protobuf":
        raw: bytes = message.SerializeToString()
        return raw
    return json_format.MessageToJson(message, indent=None).encode()
