"""`POST /v1/traces`: an OTLP/HTTP trace receiver for GenAI spans (docs/contract.md §6).

Protobuf or JSON, gzip or not, bearer token (exporters send it through
`OTEL_EXPORTER_OTLP_HEADERS`). Each span carrying GenAI messages lands in the conversation
named by `gen_ai.conversation.id`, else by its trace id; spans repeat the history, so only
what continues the stored one is appended. The answer is an `ExportTraceServiceResponse`
in the request's content type, whose `partial_success` names the spans not stored.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse

from conversations.core import live_sources
from conversations.core.importers import otel_genai, otlp
from conversations.core.importers.common import ImportedMessage, ImportFormatError
from conversations.ingest.following import TracedMessage, span_rejected, trace_continue
from conversations.ingest.imports import message_validated
from conversations.record import metrics
from conversations.record.errors import IngestError
from conversations.web.api import api
from conversations.web.errors import ApiError, too_big

# google.rpc.Code values for the Status body of a failed export.
RPC_CODES = {400: 3, 401: 16, 404: 5, 405: 12, 413: 8, 415: 3}
SHOWN_REJECTIONS = 5  # how many rejected spans the error message names

log = logging.getLogger(__name__)


def _encoding(request: HttpRequest) -> otlp.Encoding:
    return otlp.encoding_of(request.headers.get("Content-Type", "")) or "json"


def otlp_error(
    request: HttpRequest, status: int, error: str, extra: dict[str, Any]
) -> HttpResponse:
    """A failed export, as OTLP/HTTP wants it: a `google.rpc.Status` in the request's
    content type (JSON when that type is not one OTLP knows)."""
    encoding = _encoding(request)
    return HttpResponse(
        otlp.status(encoding, RPC_CODES.get(status, 2), error),
        status=status,
        content_type=otlp.MEDIA_TYPES[encoding],
    )


@api("POST", errors=otlp_error)
def traces(request: HttpRequest) -> HttpResponse:
    encoding = otlp.encoding_of(request.headers.get("Content-Type", ""))
    if encoding is None:
        raise ApiError(
            415, "Content-Type must be application/x-protobuf or application/json (OTLP/HTTP)."
        )
    try:
        raw = request.body
    except RequestDataTooBig:
        raise too_big() from None
    limit = settings.REPLAY_MAX_BODY_MB * 1024 * 1024
    try:
        body = otlp.decompress(raw, request.headers.get("Content-Encoding", ""), limit=limit)
        export = otlp.decode_request(body, encoding)
    except otlp.TooLarge:
        raise too_big() from None
    except otlp.OtlpError as exc:
        raise ApiError(400, f"Request body: {exc}.") from None
    spans, _total = otlp.genai_spans(export)
    rejected: list[str] = []
    for span in spans:
        try:
            problem = _store(span)
        except Exception:  # exporters do not retry a 500: it would lose the spans after it
            log.exception("POST /v1/traces: span %s failed", span.span_id)
            problem = "it could not be stored (an internal error, logged)"
        if problem is not None:
            log.warning("POST /v1/traces: span %s not stored: %s", span.span_id, problem)
            span_rejected(trace_id=span.trace_id, span_id=span.span_id, reason=problem)
            rejected.append(f"span {span.span_id}: {problem}")
    metrics.SPANS.labels("accepted").inc(len(spans) - len(rejected))
    metrics.SPANS.labels("rejected").inc(len(rejected))
    message = "; ".join(rejected[:SHOWN_REJECTIONS])
    if len(rejected) > SHOWN_REJECTIONS:
        message += f"; and {len(rejected) - SHOWN_REJECTIONS} more"
    return HttpResponse(
        otlp.export_response(encoding, rejected=len(rejected), message=message),
        content_type=otlp.MEDIA_TYPES[encoding],
    )


def _store(span: otlp.GenAISpan) -> str | None:
    """Append what the span adds to its conversation; why it was not stored, if it was not."""
    try:
        imported = otel_genai.messages(
            span.system_instructions, span.input_messages, span.output_messages
        )
        placed: dict[int, list[dict[str, Any]]] = {}
        for gap in imported.gaps:
            if gap.message is not None:
                placed.setdefault(gap.message, []).append(gap.as_json())
        messages = []
        for index, message in enumerate(imported.messages):
            metadata = _metadata(span, message, otel_genai.is_output(message))
            checked, invalid = message_validated(
                ImportedMessage(message.role, message.blocks, metadata), index, f"messages[{index}]"
            )
            gaps = [*placed.get(index, ()), *invalid]
            for gap in gaps:
                del gap["message"]  # placed at its seq once the continuation is known
            fingerprint = live_sources.fingerprint(message.role, message.blocks)
            messages.append(TracedMessage(checked, fingerprint, tuple(gaps)))
    except ImportFormatError as exc:
        return str(exc)
    except IngestError as exc:
        return str(exc)
    traced = trace_continue(
        key=span.key[:255],
        title=_title(span),
        metadata={
            # As an import describes its source, so the page says where it came from.
            "import": {"format": "otel-genai", "received": "POST /v1/traces"},
            "gaps": [],
            "conversation_id" if span.conversation_id else "trace_id": span.key,
            **({"service.name": span.service} if span.service else {}),
        },
        messages=messages,
    )
    if traced.diverges_at is not None:
        return (
            f"its history differs from the one stored in conversation {traced.conversation.id} "
            f"at message {traced.diverges_at}; nothing of it was stored"
        )
    return None


def _metadata(span: otlp.GenAISpan, message: ImportedMessage, output: bool) -> dict[str, Any]:
    """The message's metadata with the span's ids; the call's model, usage, finish reasons
    and latency only on its own answer (`output`), never on the turns its input repeats:
    those were measured by earlier calls (docs/contract.md §7)."""
    out = dict(message.metadata) | {"trace_id": span.trace_id, "span_id": span.span_id}
    if message.role == "assistant" and output:
        out.update(span.provenance)
        if span.latency_ms is not None:
            out["latency_ms"] = span.latency_ms  # the span's duration: the call's latency
    return out


def _title(span: otlp.GenAISpan) -> str:
    who = span.provenance.get("gen_ai.agent.name") or span.service or "OpenTelemetry"
    return f"{who}: {span.key}"[:500]
