"""The metadata operators look for, as header facts: a message's model, tokens, stop reason
and latency, its source time and compaction boundary; the conversation's own facts and
what an import said about its source.

Every value read from metadata is checked for its type and cut to a bound; anything else
is left out (never "None"), and the templates escape what is shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.urls import reverse

from conversations.core import timestamps
from conversations.core.counting import tokens, words
from conversations.web.protocols import ConversationLike

META_CHARS = 80  # characters of a metadata value shown in a header
META_TITLE_CHARS = 300  # … and in its title
CONVERSATION_META_ITEMS = 8
# Conversation metadata shown elsewhere on the page, or not worth a header chip.
MODEL_KEYS = ("model", "gen_ai.response.model", "gen_ai.request.model")
CONVERSATION_META_HIDDEN = frozenset(
    {*MODEL_KEYS, "import", "gaps", "linked", "linked_from", "compact_boundaries", "context_window"}
)
GAPS_SHOWN = 50


@dataclass(frozen=True)
class MetaItem:
    """One fact in a header: `kind` names it (a CSS hook), `text` is shown, `title` on hover."""

    kind: str
    text: str
    title: str = ""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _scalar(value: object) -> str | None:
    """A metadata value worth a header: a non-empty string or a number (booleans as JSON
    spells them); None for anything else (objects, lists, null)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value
    return None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _item(kind: str, text: str, title: str) -> MetaItem:
    return MetaItem(kind, _cut(text, META_CHARS), _cut(title, META_TITLE_CHARS))


def _usage_title(metadata: dict[str, Any], tokens_in: int | None, tokens_out: int | None) -> str:
    usage = metadata.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    parts = []
    if tokens_in is not None:
        cache = [
            f"{label} {n:,}"
            for key, label in (
                ("cache_read_input_tokens", "cache read"),
                ("cache_creation_input_tokens", "cache write"),
            )
            if (n := _count(usage.get(key)))
        ]
        parts.append(f"input {tokens_in:,}" + (f" (of which {', '.join(cache)})" if cache else ""))
    if tokens_out is not None:
        parts.append(f"output {tokens_out:,}")
    return "Tokens the provider measured: " + "; ".join(parts)


def latency_label(ms: float) -> str:
    """850 ms, 2.4 s, 3 min 5 s."""
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(round(ms / 1000), 60)
    return f"{minutes} min {seconds} s"


def message_meta(metadata: object, *, usage_shown: bool = False) -> list[MetaItem]:
    """What a message's metadata says about its turn, in header order: model, tokens in and
    out (unless the margin count already shows the measured usage: `usage_shown`), stop
    reason, latency. Keys of every importer and of OTel GenAI; absent or odd values give
    nothing."""
    if not isinstance(metadata, dict):
        return []
    items = []
    model = _model(metadata)
    if model is not None:
        items.append(_item("model", model, f"model: {model}"))
    measured = tokens.usage_of(metadata)
    tokens_in = _count(measured.input) if measured is not None else None
    tokens_out = _count(measured.output) if measured is not None else None
    if tokens_in is None:
        tokens_in = _count(metadata.get("gen_ai.usage.input_tokens"))
    if tokens_out is None:
        tokens_out = _count(metadata.get("gen_ai.usage.output_tokens"))
    if not usage_shown and (tokens_in is not None or tokens_out is not None):
        sides = ((tokens_in, "in"), (tokens_out, "out"))
        said = " · ".join(f"{n:,} {side}" for n, side in sides if n is not None)
        items.append(_item("tokens", said, _usage_title(metadata, tokens_in, tokens_out)))
    stop = _scalar(metadata.get("stop_reason")) or _scalar(metadata.get("finish_reason"))
    reasons = metadata.get("gen_ai.response.finish_reasons")
    if stop is None and isinstance(reasons, list):
        named = [r for r in reasons if isinstance(r, str) and r.strip()]
        stop = ", ".join(named) or None
    if stop is not None:
        items.append(_item("stop", f"stop: {stop}", f"stop reason: {stop}"))
    for key in ("latency_ms", "duration_ms"):
        ms = metadata.get(key)
        if isinstance(ms, int | float) and not isinstance(ms, bool) and 0 <= ms < 1e12:
            items.append(_item("latency", latency_label(ms), f"latency: {ms:,} ms ({key})"))
            break
    return items


def _model(metadata: dict[str, Any]) -> str | None:
    return next((m for key in MODEL_KEYS if (m := _scalar(metadata.get(key))) is not None), None)


def source_time(metadata: object) -> tuple[datetime | None, str]:
    """The source's own timestamp of a message (`metadata.timestamp`, as imports keep it):
    (the time in UTC, "") when it is ISO 8601 with a zone, else (None, the value as text)."""
    in_utc = timestamps.source_time(metadata)
    if in_utc is not None:
        return in_utc, ""
    value = metadata.get("timestamp") if isinstance(metadata, dict) else None
    if not isinstance(value, str) or not value.strip():
        return None, ""
    return None, _cut(value, META_CHARS)


def conversation_meta(metadata: object, *, model: str = "") -> list[MetaItem]:
    """The page header's facts about the conversation: its model (`model`: the one a
    message names, when the conversation names none), its source format, then up to
    `CONVERSATION_META_ITEMS` other plain values of its metadata, by key."""
    meta = metadata if isinstance(metadata, dict) else {}
    items = []
    named = _model(meta) or _scalar(model)
    if named is not None:
        items.append(_item("model", f"model {named}", f"model: {named}"))
    source = meta.get("import")
    if isinstance(source, dict) and (fmt := _scalar(source.get("format"))) is not None:
        items.append(_item("source", f"source {fmt}", f"imported from {fmt}"))
    shown = 0
    for key in sorted(k for k in meta if isinstance(k, str)):
        if shown == CONVERSATION_META_ITEMS:
            break
        value = _scalar(meta[key])
        if key in CONVERSATION_META_HIDDEN or value is None:
            continue
        label = _cut(key, 40)
        items.append(_item("key", f"{label} {value}", f"{key}: {value}"))
        shown += 1
    return items


def boundary(metadata: dict[str, Any]) -> str:
    marker = metadata.get("compact_boundary")
    if not isinstance(marker, dict):
        return ""
    said = ["Compacted here"]
    if marker.get("trigger"):
        said.append(f"({marker['trigger']})")
    pre = marker.get("preTokens")
    if isinstance(pre, int) and not isinstance(pre, bool) and pre:
        said.append(f"from {words.count(pre, 'token')}")
    elif pre:
        said.append(f"from {pre} tokens")
    return " ".join(said) + ": the model receives what follows"


@dataclass(frozen=True)
class GapView:
    text: str
    url: str  # the deep link to the marked block's message, when it has one


def import_view(conversation: ConversationLike) -> dict[str, Any] | None:
    """What an imported conversation's page says about its source: the format and file,
    the gaps (the first GAPS_SHOWN, with the total), and conversations linked to it."""
    metadata = conversation.metadata if isinstance(conversation.metadata, dict) else {}
    source = metadata.get("import")
    if not isinstance(source, dict):
        return None
    gaps = metadata.get("gaps") if isinstance(metadata.get("gaps"), list) else []
    assert isinstance(gaps, list)
    views = []
    for gap in gaps[:GAPS_SHOWN]:
        if not isinstance(gap, dict):
            continue
        text = (
            f"{gap.get('kind')}: {gap.get('detail')}" if gap.get("detail") else str(gap.get("kind"))
        )
        if gap.get("where"):
            text += f" ({gap['where']})"
        seq = gap.get("message")
        views.append(GapView(text, f"#m-{seq}" if isinstance(seq, int) else ""))
    linked_ids = [str(i) for i in (metadata.get("linked") or [])][:GAPS_SHOWN]
    parent = metadata.get("linked_from")
    links = [{"url": reverse("conversation", args=[i]), "label": "sidechain"} for i in linked_ids]
    if isinstance(parent, str):
        links.insert(
            0, {"url": reverse("conversation", args=[parent]), "label": "main conversation"}
        )
    return {
        "format": source.get("format"),
        "file_name": source.get("file_name"),
        "gaps": views,
        "gaps_total": len(gaps),
        "gaps_more": max(0, len(gaps) - GAPS_SHOWN),
        "partial_payload": source.get("format") == "claude-code",
        "links": links,
    }
