"""Stored token figures (docs/contract.md §7): each block's own count and each message's
count, running totals and measured usage, then a backfill of the rows stored before them.

The backfill walks each conversation's messages in seq order, BATCH messages per
transaction with the conversation's row locked (as every append locks it): its running
totals continue from the batch before, and messages appended meanwhile by the new code are
recounted as the walk reaches them, so the totals hold when it ends. Blocks are streamed
per batch (memory bounded by a batch, not by what is stored); a block already counted
keeps its count.

The counting rules are those of `conversations.core.counting.tokens` and `.stored_counts` when this
migration was written, frozen below (a migration keeps its meaning when the code moves
on); the tokenizer is the vendored `o200k_base` file, read by its path and hash-checked.
"""

import base64
import hashlib
import math
import re
from collections import OrderedDict
from functools import cache
from pathlib import Path
from typing import Any

import tiktoken
from django.db import migrations, models, transaction

CONVERSATIONS = 200
BATCH = 200
TURNS = 1000  # response ids remembered while walking a conversation

# -- Counting, as `conversations.core.counting.tokens` defined it (frozen) ----------------------

ENCODING_FILE = (
    Path(__file__).resolve().parent.parent / "core" / "encodings" / "o200k_base.tiktoken"
)
ENCODING_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
O200K_SPECIAL = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}
COUNT_CHUNK = 8192
RUN_SAMPLE = 6144
SAMPLE_PIECE = 1024
CUT = re.compile(r"(?<=\S) |(?<=\n)(?=[^\s/])")
FRAMING = 3  # per wire message, both shapes
SEPARATOR = 1  # "\n\n"
EMPTY = 4  # "[Empty message]"
TOGGLES = ((True, "openai"), (False, "openai"), (True, "anthropic"), (False, "anthropic"))
UNKNOWN_SIZE = {"openai": (768, 2048), "anthropic": (1092, 1092)}


@cache
def _encoding() -> tiktoken.Encoding:
    data = ENCODING_FILE.read_bytes()
    if hashlib.sha256(data).hexdigest() != ENCODING_SHA256:
        raise RuntimeError(f"{ENCODING_FILE.name} is not the o200k_base file tiktoken expects.")
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in data.splitlines() if line)
    }
    return tiktoken.Encoding(
        name="o200k_base",
        pat_str=O200K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=O200K_SPECIAL,
    )


def _count_text(text: str) -> int:
    if not text:
        return 0
    encode = _encoding().encode_ordinary
    total, start, n = 0, 0, len(text)
    while n - start > COUNT_CHUNK:
        limit = start + COUNT_CHUNK
        cut = _last_cut(text, start + COUNT_CHUNK // 2, limit) or _last_cut(text, start, limit)
        if cut is not None:
            total += len(encode(text[start:cut]))
            start = cut
            continue
        found = CUT.search(text, limit)
        cut = found.start() if found else n
        if cut - start <= 4 * COUNT_CHUNK:
            total += len(encode(text[start:cut]))
        else:
            total += _extrapolated(text, start, cut)
        start = cut
    if start < n:
        total += len(encode(text[start:n]))
    return total


def _last_cut(text: str, floor: int, limit: int) -> int | None:
    last = None
    for found in CUT.finditer(text, floor + 1, limit + 1):
        last = found.start()
    return last if last is not None and last > floor else None


def _extrapolated(text: str, start: int, end: int) -> int:
    encode = _encoding().encode_ordinary
    length = end - start
    middle = start + (length - RUN_SAMPLE) // 2
    counted = 0
    for at in (start, middle, end - RUN_SAMPLE):
        counted += sum(
            len(encode(text[i : min(i + SAMPLE_PIECE, at + RUN_SAMPLE)]))
            for i in range(at, at + RUN_SAMPLE, SAMPLE_PIECE)
        )
    return round(counted * length / (3 * RUN_SAMPLE))


def _marker(media_type: str) -> str:
    return f"[Image ({media_type}): not seen — this model cannot view images]"


def _prose(row: Any) -> str:
    if row.type == "text":
        return str(row.text)
    if row.type == "tool_result":
        return f"{'Error' if row.is_error else 'Result'} ({row.name}): {row.text}"
    if row.type == "tool_use":
        return f"Tool use: {row.name}({row.input_json})"
    if row.type == "reasoning":
        return f"[Reasoning]: {row.text}"
    return _marker(row.media_type)


def _image(width: int | None, height: int | None, vision: bool, shape: str, media: str) -> int:
    if not vision:
        return _count_text(_marker(media))
    if not width or not height:
        width, height = UNKNOWN_SIZE[shape]
    w, h = float(width), float(height)
    if shape == "openai":
        if max(w, h) > 2048:
            scale = 2048 / max(w, h)
            w, h = w * scale, h * scale
        if min(w, h) > 768:
            scale = 768 / min(w, h)
            w, h = w * scale, h * scale
        return 85 + 170 * math.ceil(round(w, 6) / 512) * math.ceil(round(h, 6) / 512)
    scale = min(1.0, 1568 / max(w, h), math.sqrt(1092 * 1092 / (w * h)))
    return max(1, math.ceil(math.floor(w * scale) * math.floor(h * scale) / 750))


# A block's facts: (kind, own tokens with the default toggles, blank, media type, w, h).
Facts = tuple[str, int, bool, str, Any, Any]


def _own(fact: Facts, vision: bool, shape: str) -> int:
    kind, n, _, media, width, height = fact
    return _image(width, height, vision, shape, media) if kind == "image" else n


def _exact(
    role: str, facts: list[Facts], vision: bool, shape: str
) -> tuple[int, int, dict[str, int], list[int]]:
    """(tokens, framing, by kind, sent per block), as `tokens.count_of_facts` counted."""
    own = [_own(f, vision, shape) for f in facts]
    lifted = shape == "anthropic" and role == "system"
    framing = 0 if lifted else FRAMING
    sent = [0] * len(facts)

    def run_of(run: list[int]) -> int:
        if not run or all(facts[i][2] for i in run):
            return 0
        for i in run:
            sent[i] = own[i]
        return SEPARATOR * (len(run) - 1)

    if vision and any(f[0] == "image" for f in facts) and not lifted:
        run: list[int] = []
        for i, fact in enumerate(facts):
            if fact[0] == "image":
                framing += run_of(run)
                run = []
                sent[i] = own[i]
            else:
                run.append(i)
        framing += run_of(run)
    elif all(f[2] for f in facts):
        framing += EMPTY
    else:
        sent = list(own)
        framing += SEPARATOR * max(0, len(facts) - 1)
    by_kind: dict[str, int] = {}
    for fact, n in zip(facts, sent, strict=True):
        kind = "system" if role == "system" else fact[0]
        by_kind[kind] = by_kind.get(kind, 0) + n
    return sum(sent) + framing, framing, by_kind, sent


def _figures(role: str, facts: list[Facts]) -> tuple[dict[str, Any], int, dict[str, int], int]:
    """(stored figures, tokens, by kind, heaviest) with the default toggles, as
    `stored_counts.figures`, `.count` and `.heaviest` made them."""
    own: dict[str, int] = {}
    for fact in facts:
        own[fact[0]] = own.get(fact[0], 0) + fact[1]
    data: dict[str, Any] = {"o": own, "n": len(facts)}
    blank = [i for i, f in enumerate(facts) if f[2]]
    if blank:
        data["bl"] = blank
    if any(f[0] == "image" for f in facts):
        data["t"] = {}
        for vision, shape in TOGGLES:
            n, framing, by_kind, _ = _exact(role, facts, vision, shape)
            data["t"][f"{int(vision)}{shape}"] = [n, framing, by_kind]
    n, _, by_kind, sent = _exact(role, facts, True, "openai")
    return data, n, by_kind, max(sent, default=0)


def _usage_input(metadata: dict[str, Any]) -> int | None:
    """The measured input, as `tokens.usage_of` read it."""

    def whole(value: object) -> int | None:
        return (
            value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
        )

    usage = metadata.get("usage")
    if not isinstance(usage, dict):
        otel = {k: metadata.get(f"gen_ai.usage.{k}") for k in ("input_tokens", "output_tokens")}
        usage = otel if any(whole(v) is not None for v in otel.values()) else None
    if usage is None:
        return None
    prompt = whole(usage.get("prompt_tokens"))
    if prompt is None:
        parts = [
            whole(usage.get(k))
            for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        ]
        prompt = sum(p for p in parts if p is not None) if parts[0] is not None else None
    return prompt


def _turn(metadata: dict[str, Any]) -> str | None:
    for key in ("id", "gen_ai.response.id"):
        value = metadata.get(key)
        if isinstance(value, str) and value:
            return value
    return None


# -- The walk ---------------------------------------------------------------------------


def backfill(apps: Any, schema_editor: Any) -> None:
    conversation = apps.get_model("conversations", "Conversation")
    after = None
    while True:
        page = conversation.objects.order_by("pk")
        if after is not None:
            page = page.filter(pk__gt=after)
        ids = list(page.values_list("pk", flat=True)[:CONVERSATIONS])
        if not ids:
            return
        after = ids[-1]
        for pk in ids:
            _walk(apps, pk)


def _walk(apps: Any, pk: Any) -> None:
    conversation = apps.get_model("conversations", "Conversation")
    message = apps.get_model("conversations", "Message")
    block = apps.get_model("conversations", "Block")
    seq, before = 0, 0
    run: dict[str, int] = {}
    turns: OrderedDict[str, int] = OrderedDict()
    while True:
        with transaction.atomic():
            if not conversation.objects.select_for_update().filter(pk=pk).exists():
                return
            batch = list(
                message.objects.filter(conversation_id=pk, seq__gte=seq)
                .order_by("seq")
                .only("id", "seq", "role", "metadata")[:BATCH]
            )
            if not batch:
                return
            facts: dict[Any, list[Facts]] = {m.pk: [] for m in batch}
            counted = []
            rows = (
                block.objects.filter(message_id__in=list(facts))
                .order_by("message_id", "seq")
                .iterator(chunk_size=BATCH)
            )
            for row in rows:
                prose = _prose(row)
                own = row.tokens
                if own is None:
                    own = (
                        _image(row.width, row.height, True, "openai", row.media_type)
                        if row.type == "image"
                        else _count_text(prose)
                    )
                    counted.append(block(pk=row.pk, tokens=own))
                blank = row.type != "image" and (not prose or prose.isspace())
                facts[row.message_id].append(
                    (row.type, own, blank, row.media_type, row.width, row.height)
                )
            block.objects.bulk_update(counted, ["tokens"], batch_size=BATCH)
            for m in batch:
                before, run = _fill(m, facts[m.pk], before, run, turns)
            message.objects.bulk_update(
                batch,
                ["tokens", "cumulative", "counts", "varies", "heaviest", "measured", "turn_start"],
                batch_size=BATCH,
            )
            seq = batch[-1].seq + 1


def _fill(
    m: Any, facts: list[Facts], before: int, run: dict[str, int], turns: OrderedDict[str, int]
) -> tuple[int, dict[str, int]]:
    data, n, by_kind, heaviest = _figures(m.role, facts)
    running = dict(run)
    for kind, k in by_kind.items():
        running[kind] = running.get(kind, 0) + k
    data["run"] = running
    m.tokens = n
    m.cumulative = before + n
    m.counts = data
    m.varies = m.role == "system" or "t" in data
    m.heaviest = heaviest
    metadata = m.metadata if isinstance(m.metadata, dict) else {}
    turn = _turn(metadata)
    start = m.seq
    if turn is not None:
        start = turns.setdefault(turn, m.seq)
        turns.move_to_end(turn)
        while len(turns) > TURNS:
            turns.popitem(last=False)
    measured = _usage_input(metadata) if m.role == "assistant" else None
    m.measured = measured or None
    m.turn_start = start if m.measured is not None else None
    return m.cumulative, running


class Migration(migrations.Migration):
    atomic = False
    dependencies = [
        ("conversations", "0013_alerts"),
    ]

    operations = [
        migrations.AddField(
            model_name="block",
            name="tokens",
            field=models.PositiveIntegerField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="message",
            name="counts",
            field=models.JSONField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="message",
            name="cumulative",
            field=models.BigIntegerField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="message",
            name="heaviest",
            field=models.PositiveIntegerField(default=0, editable=False),
        ),
        migrations.AddField(
            model_name="message",
            name="measured",
            field=models.PositiveIntegerField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="message",
            name="tokens",
            field=models.PositiveIntegerField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="message",
            name="turn_start",
            field=models.PositiveIntegerField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="message",
            name="varies",
            field=models.BooleanField(default=False, editable=False),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(("varies", True)),
                fields=["conversation", "seq"],
                name="message_varies",
            ),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(("measured__isnull", False)),
                fields=["conversation", "seq"],
                name="message_measured",
            ),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(fields=["conversation", "-heaviest"], name="message_heaviest"),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop, atomic=False),
    ]
