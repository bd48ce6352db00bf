"""`otel-genai`: OpenTelemetry GenAI messages, or an OTLP/JSON trace export of spans.

`messages(system_instructions, input_messages, output_messages)` maps one span's three
attributes; the OTLP receiver calls it per span and `new_messages` to append only what a
span adds to what is stored (each span repeats the history).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conversations.core import strictjson
from conversations.core.blocks import IMAGE_MEDIA_TYPES
from conversations.core.importers import common
from conversations.core.importers.common import (
    Builder,
    Imported,
    ImportedMessage,
    ImportFormatError,
    require,
)

SYSTEM = "gen_ai.system_instructions"
INPUT = "gen_ai.input.messages"
OUTPUT = "gen_ai.output.messages"
ATTRIBUTES = (SYSTEM, INPUT, OUTPUT)
CONVERSATION_ID = "gen_ai.conversation.id"
SPAN_METADATA = (
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.response.id",
    "gen_ai.provider.name",
    "gen_ai.system",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.response.finish_reasons",
)


def read(body: Any) -> Imported:
    """One conversation from a span's attributes (an object of `gen_ai.*` keys), a bare
    array of messages, or an OTLP/JSON export (further conversations become `linked`)."""
    if isinstance(body, list):
        return messages(None, body, None)
    require(body, dict, "body", "an object or an array of messages")
    if "resourceSpans" in body:
        return read_export(body)
    if not any(key in body for key in ATTRIBUTES):
        raise ImportFormatError("body", f"holds none of {', '.join(ATTRIBUTES)}")
    result = messages(body.get(SYSTEM), body.get(INPUT), body.get(OUTPUT))
    result.metadata = {key: body[key] for key in body if key not in ATTRIBUTES}
    return result


def messages(
    system_instructions: Any, input_messages: Any, output_messages: Any, *, where: str = ""
) -> Imported:
    """The messages of one span's three attributes (each a JSON value, a JSON string, or
    None), in order: system instructions, input, then output."""
    result = Imported(format="otel-genai")
    builder = Builder(result)
    system = _decoded(system_instructions, _at(where, SYSTEM))
    if system:
        if isinstance(system, str):
            system = [{"type": "text", "content": system}]
        require(system, list, _at(where, SYSTEM), "an array of parts")
        message = builder.message("system", {"source": SYSTEM})
        for index, part in enumerate(system):
            _add_part(builder, message, part, f"{_at(where, SYSTEM)}[{index}]")
    for attribute, value in ((INPUT, input_messages), (OUTPUT, output_messages)):
        path = _at(where, attribute)
        items = _decoded(value, path)
        if items is None:
            continue
        require(items, list, path, "an array of messages")
        _add_messages(builder, items, path, output=attribute == OUTPUT)
    common.resolve_names(result.messages)
    return result


def new_messages(
    stored: Sequence[ImportedMessage], span: Sequence[ImportedMessage]
) -> list[ImportedMessage]:
    """What `span` adds after the messages already `stored`: its messages past the longest
    stored suffix that is a prefix of it (spans repeat the history)."""
    keys = [_key(message) for message in span]
    stored_keys = [_key(message) for message in stored]
    for start in range(max(0, len(stored_keys) - len(keys)), len(stored_keys) + 1):
        overlap = stored_keys[start:]
        if keys[: len(overlap)] == overlap:
            return list(span[len(overlap) :])
    return list(span)  # pragma: no cover - the empty suffix always matches


def is_output(message: ImportedMessage) -> bool:
    """Whether `message` is one of its span's `gen_ai.output.messages` (the call's answer,
    which the span's usage measured), not a turn of the history its input repeats."""
    source = message.metadata.get("source")
    return isinstance(source, str) and source.rpartition(": ")[2].startswith(OUTPUT)


def read_export(body: dict[str, Any]) -> Imported:
    """An OTLP/JSON export: spans grouped by `gen_ai.conversation.id` (else trace id), in
    start-time order, each group's spans merged with `new_messages`."""
    groups: dict[str, list[tuple[int, str, dict[str, Any], int]]] = {}
    spans_seen = 0
    for r, resource in enumerate(require(body["resourceSpans"], list, "resourceSpans", "an array")):
        for s, scope in enumerate(resource.get("scopeSpans") or []):
            for p, span in enumerate(scope.get("spans") or []):
                path = f"resourceSpans[{r}].scopeSpans[{s}].spans[{p}]"
                require(span, dict, path, "an object")
                spans_seen += 1
                attributes = attribute_map(span.get("attributes") or [], f"{path}.attributes")
                if not any(key in attributes for key in ATTRIBUTES):
                    continue
                key = str(attributes.get(CONVERSATION_ID) or span.get("traceId") or "")
                start = _nanos(span.get("startTimeUnixNano"))
                end = _nanos(span.get("endTimeUnixNano"))
                groups.setdefault(key, []).append((start, path, attributes, end))
    if not groups:
        raise ImportFormatError("resourceSpans", f"no span carries {', '.join(ATTRIBUTES)}")
    results = [
        _merge(key, sorted(spans, key=lambda item: item[0])) for key, spans in groups.items()
    ]
    first = results[0]
    first.linked = results[1:]
    first.stats["spans"] = spans_seen
    return first


def _nanos(value: Any) -> int:
    """A span time (Unix ns, a string or a number in OTLP/JSON); 0 when it is not one."""
    if isinstance(value, bool):
        return 0
    try:
        return max(int(value or 0), 0)
    except (TypeError, ValueError):
        return 0


def attribute_map(attributes: list[Any], path: str) -> dict[str, Any]:
    """OTLP `[{"key", "value": {"stringValue"|"intValue"|…}}]` as a plain dict."""
    values: dict[str, Any] = {}
    for index, attribute in enumerate(require(attributes, list, path, "an array")):
        require(attribute, dict, f"{path}[{index}]", "an object")
        values[str(attribute.get("key"))] = any_value(attribute.get("value"))
    return values


def any_value(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    for key in ("stringValue", "boolValue", "doubleValue", "bytesValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return [any_value(item) for item in value["arrayValue"].get("values") or []]
    if "kvlistValue" in value:
        return {
            str(item.get("key")): any_value(item.get("value"))
            for item in value["kvlistValue"].get("values") or []
        }
    return None


def _merge(key: str, spans: list[tuple[int, str, dict[str, Any], int]]) -> Imported:
    result = Imported(format="otel-genai", metadata={"conversation_id": key})
    for start, path, attributes, end in spans:
        span = messages(attributes.get(SYSTEM), attributes.get(INPUT), attributes.get(OUTPUT))
        added = new_messages(result.messages, span.messages)
        offset = len(result.messages) - (len(span.messages) - len(added))
        provenance = {name: attributes[name] for name in SPAN_METADATA if name in attributes}
        provenance["span"] = path
        if end > start > 0:  # the span's duration: the call's latency
            provenance["latency_ms"] = (end - start) // 1_000_000
        for message in added:
            if message.role == "assistant":
                # The span's model, usage and latency are its call's: only its own answer
                # carries them, not the earlier turns its input repeats (docs/contract.md §7).
                message.metadata.update(provenance if is_output(message) else {"span": path})
        result.messages.extend(added)
        first_added = len(span.messages) - len(added)
        for gap in span.gaps:
            if gap.message is not None and gap.message >= first_added:
                result.gaps.append(
                    common.Gap(
                        gap.kind,
                        gap.detail,
                        f"{path}: {gap.where}",
                        gap.message + offset,
                        gap.block,
                    )
                )
        result.count("spans_with_messages")
    common.resolve_names(result.messages)
    return result


def _key(message: ImportedMessage) -> str:
    blocks = [{k: v for k, v in block.items() if k != "origin"} for block in message.blocks]
    return common.compact_json([message.role, blocks])


def _add_messages(builder: Builder, items: list[Any], path: str, *, output: bool) -> None:
    results: ImportedMessage | None = None
    for index, item in enumerate(items):
        item_path = f"{path}[{index}]"
        require(item, dict, item_path, "an object")
        role = item.get("role")
        parts = require(item.get("parts", []), list, f"{item_path}.parts", "an array")
        metadata: dict[str, Any] = {"source": item_path}
        for key in ("finish_reason", "name"):
            if key in item:
                metadata[key] = item[key]
        if role == "tool":
            if results is None:
                results = builder.message("user", metadata)
            message = results
        else:
            results = None
            if role in ("system", "developer"):
                message = builder.message("system", metadata)
            elif role in ("user", "assistant"):
                message = builder.message(role, metadata)
            else:
                raise ImportFormatError(
                    f"{item_path}.role", f"{role!r} is not one of system, user, assistant, tool"
                )
        for p, part in enumerate(parts):
            _add_part(builder, message, part, f"{item_path}.parts[{p}]")


def _add_part(builder: Builder, message: ImportedMessage, part: Any, path: str) -> None:
    require(part, dict, path, "an object")
    kind = str(part.get("type"))
    if kind == "text":
        value = require(part.get("content", ""), str, f"{path}.content", "a string")
        message.blocks.append(common.text(value, common.extra(part, ("type", "content"))))
    elif kind in ("reasoning", "thinking"):
        value = part.get("content")
        value = value if isinstance(value, str) and value else common.REDACTED
        message.blocks.append(common.reasoning(value, common.extra(part, ("type", "content"))))
    elif kind in ("tool_call", "server_tool_call"):
        call_id = str(part.get("id") or part.get("name") or "call")
        name = require(part.get("name"), str, f"{path}.name", "a string")
        raw = part.get("arguments", part.get(kind))
        value = common.parse_arguments(raw)
        origin = common.extra(part, ("type", "id", "name", "arguments"))
        message.blocks.append(common.tool_use(call_id, name, value, origin))
    elif kind in ("tool_call_response", "server_tool_call_response"):
        call_id = str(part.get("id") or "call")
        response = part.get("response", part.get("result", part.get(kind)))
        content = response if isinstance(response, str) else common.compact_json(response)
        origin = common.extra(part, ("type", "id", "name", "response", "result"))
        name = part.get("name") if isinstance(part.get("name"), str) else None
        is_error = bool(part.get("is_error") or part.get("error"))
        message.blocks.append(common.tool_result(call_id, name, content, is_error, origin))
    elif kind == "blob":
        mime = str(part.get("mime_type") or "")
        data = part.get("content")
        if message.role == "user" and mime in IMAGE_MEDIA_TYPES and isinstance(data, str):
            message.blocks.append(
                common.image(
                    mime, data, common.extra(part, ("type", "mime_type", "content", "modality"))
                )
            )
        else:
            detail = mime or str(part.get("modality") or "")
            if message.role != "user" and mime in IMAGE_MEDIA_TYPES:
                detail += f", in {common.a_role(message.role)} message"
            builder.gap(message, str(part.get("modality") or "blob"), detail, path, part)
    elif kind == "uri":
        builder.gap(
            message,
            str(part.get("modality") or "uri"),
            common.url_detail(str(part.get("uri", ""))),
            path,
            part,
        )
    elif kind == "file":
        builder.gap(
            message, str(part.get("modality") or "file"), f"file {part.get('file_id')}", path, part
        )
    else:
        builder.gap(message, kind, "", path, part)


def _decoded(value: Any, path: str) -> Any:
    """Span attributes hold the messages as JSON text; events and exports as values."""
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return strictjson.loads(value, root=path)
        except strictjson.StrictJSONError as exc:
            raise ImportFormatError(exc.field, exc.reason) from None
    return value


def _at(where: str, attribute: str) -> str:
    return f"{where}: {attribute}" if where else attribute
