"""Token counts of the projection (docs/contract.md §7): per block, per wire message, per kind.

Pure (no Django). Text is counted with OpenAI's `o200k_base` BPE, vendored beside this
module and hash-checked on load (no download at run time); images with vision on by the
provider's published pixel formula, with vision off as their marker's text. Every count
is an estimate (≈): neither provider publishes its chat framing, and Anthropic's
tokenizer is not public at all.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, assert_never

import tiktoken

from conversations.core.blocks import (
    Block,
    BlockKind,
    ImageBlock,
    ReasoningBlock,
    Role,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    image_marker,
    kind_of,
)
from conversations.core.replay import Shape, StoredMessage, prose

TOKENIZER = "o200k_base"
ENCODING_FILE = Path(__file__).parent.parent / "encodings" / "o200k_base.tiktoken"
# tiktoken's own expected hash for this file (tiktoken_ext/openai_public.py).
ENCODING_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
# o200k_base's split pattern and special tokens, as tiktoken_ext/openai_public.py defines
# them (tests/core/test_tokens.py checks that they still agree).
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

CountKind = Literal["system", "text", "tool_use", "tool_result", "reasoning", "image"]
COUNT_KINDS: tuple[CountKind, ...] = (
    "system",
    "text",
    "tool_use",
    "tool_result",
    "reasoning",
    "image",
)
KIND_LABELS: dict[CountKind, str] = {
    "system": "System",
    "text": "Text",
    "tool_use": "Tool use",
    "tool_result": "Tool result",
    "reasoning": "Reasoning",
    "image": "Image",
}

# Framing per wire message: OpenAI's cookbook counts 3 tokens per chat message
# (<|start|>role<|message|> … <|end|>) and 3 more priming the reply; Anthropic publishes
# no figure, so the same envelope is assumed for its turns. System messages lifted into
# Anthropic's `system` string have no envelope of their own.
MESSAGE_FRAMING: dict[Shape, int] = {"openai": 3, "anthropic": 3}
REQUEST_OVERHEAD: dict[Shape, int] = {"openai": 3, "anthropic": 3}


class EncodingFileError(RuntimeError):
    """The vendored BPE file is missing or is not the file tiktoken expects."""


def load_ranks(path: Path = ENCODING_FILE, sha256: str = ENCODING_SHA256) -> dict[bytes, int]:
    """The mergeable ranks of a `.tiktoken` file, after checking its SHA-256."""
    data = path.read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise EncodingFileError(f"{path.name} has SHA-256 {actual}, expected {sha256}.")
    return {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in data.splitlines() if line)
    }


@functools.cache
def encoding() -> tiktoken.Encoding:
    """The `o200k_base` encoding, built once per process from the vendored file."""
    return tiktoken.Encoding(
        name=TOKENIZER,
        pat_str=O200K_PATTERN,
        mergeable_ranks=load_ranks(),
        special_tokens=O200K_SPECIAL,
    )


COUNT_CHUNK = 8192  # characters encoded at once (the encoder slows on longer strings)
RUN_SAMPLE = 6144  # characters counted at each of a long unbroken run's start, middle, end
SAMPLE_PIECE = 1024  # … in pieces of this many characters
# Places where o200k_base's (and cl100k_base's) pre-tokenizer cuts anyway, so counting the
# two sides apart is exact: before a space that follows a non-space (no piece holds a
# non-space and then a space), and after a newline that a character other than whitespace
# or "/" follows.
CUT = re.compile(r"(?<=\S) |(?<=\n)(?=[^\s/])")


@dataclass(frozen=True, slots=True)
class TextCount:
    """A text's tokens; `exact` is False when part of it was an unbroken run longer than
    `4 * COUNT_CHUNK` characters (base64, a minified file, a line of spaces), which is
    counted at its start, middle and end and extrapolated."""

    tokens: int
    exact: bool


def count_text(text: str) -> int:
    """Tokens of `text` as ordinary text (special-token strings count as plain text)."""
    return measure_text(text).tokens


def measure_text(text: str) -> TextCount:
    """`count_text` with whether the count is exact. A text is encoded a piece of about
    `COUNT_CHUNK` characters at a time, cut only where the pre-tokenizer cuts anyway; the
    cost is linear in the text's length whatever it holds (a single piece of megabytes
    is quadratic in the encoder, and a megabyte of whitespace overflows its stack)."""
    if not text:
        return TextCount(0, True)
    encode = encoding().encode_ordinary
    total, exact = 0, True
    for start, end, whole in _pieces(text):
        if whole:
            total += len(encode(text[start:end]))
        else:
            total += _extrapolated(text, start, end)
            exact = False
    return TextCount(total, exact)


def count_texts(texts: Sequence[str]) -> list[int]:
    """`count_text` of each text, as it would count them one by one: each distinct text
    is cut into pieces once and each distinct piece encoded once (a batch of agent turns
    repeats its tool outputs, prompts and file reads)."""
    encode = encoding().encode_ordinary
    pieces: dict[str, int] = {}
    spans: dict[str, list[tuple[int, int, bool]]] = {}
    for text in texts:
        if text and text not in spans:
            spans[text] = cut = list(_pieces(text))
            for start, end, whole in cut:
                if whole:
                    pieces.setdefault(text[start:end], 0)
    for piece in pieces:
        pieces[piece] = len(encode(piece))
    counted: dict[str, int] = {"": 0}
    for text, cut in spans.items():
        counted[text] = sum(
            pieces[text[start:end]] if whole else _extrapolated(text, start, end)
            for start, end, whole in cut
        )
    return [counted[text] for text in texts]


def _pieces(text: str) -> Iterator[tuple[int, int, bool]]:
    """(start, end, exact) spans covering `text` in order, each cut at a `CUT` place;
    an unbroken run over `4 * COUNT_CHUNK` characters is one span, not exact."""
    start, n = 0, len(text)
    while n - start > COUNT_CHUNK:
        limit = start + COUNT_CHUNK
        cut = _last_cut(text, start + COUNT_CHUNK // 2, limit) or _last_cut(text, start, limit)
        if cut is not None:
            yield start, cut, True
            start = cut
            continue
        found = CUT.search(text, limit)
        cut = found.start() if found else n
        yield start, cut, cut - start <= 4 * COUNT_CHUNK
        start = cut
    if start < n:
        yield start, n, True


def _last_cut(text: str, floor: int, limit: int) -> int | None:
    """The last `CUT` place in (floor, limit], looked for in windows growing back from
    `limit` (each `CUT` place is found whatever the search starts at: its matches are
    one character or empty, never overlapping)."""
    window = 256
    while True:
        begin = max(floor + 1, limit + 1 - window)
        last = None
        for found in CUT.finditer(text, begin, limit + 1):
            last = found.start()
        if last is not None:
            return last if last > floor else None
        if begin == floor + 1:
            return None
        window *= 4


def _extrapolated(text: str, start: int, end: int) -> int:
    """An unbroken run's tokens: three samples counted in `SAMPLE_PIECE` pieces, scaled to
    the run's length (deterministic: the same run always counts the same)."""
    encode = encoding().encode_ordinary
    length = end - start
    middle = start + (length - RUN_SAMPLE) // 2
    counted = 0
    for at in (start, middle, end - RUN_SAMPLE):
        counted += sum(
            len(encode(text[i : min(i + SAMPLE_PIECE, at + RUN_SAMPLE)]))
            for i in range(at, at + RUN_SAMPLE, SAMPLE_PIECE)
        )
    return round(counted * length / (3 * RUN_SAMPLE))


# What the fixed texts of the projection count in o200k_base, written out so that reading
# stored counts never loads the encoder (tests/core/test_tokens.py checks them against it).
SEPARATOR_TOKENS = 1  # "\n\n"
EMPTY_MESSAGE_TOKENS = 4  # "[Empty message]"
IMAGE_MARKER_TOKENS = {"image/png": 15, "image/jpeg": 15, "image/gif": 16, "image/webp": 16}


def separator_tokens() -> int:
    """The blank line that joins block prose inside a text part (docs/contract.md §2 rule 3)."""
    return SEPARATOR_TOKENS


def empty_message_tokens() -> int:
    return EMPTY_MESSAGE_TOKENS


# Images, vision on.


def openai_image_tokens(width: int, height: int) -> int:
    """GPT-4o-class high detail: fit in 2048×2048, shortest side down to 768, then
    85 + 170 per 512-px tile. Source: OpenAI, "Images and vision", Calculating costs
    (platform.openai.com/docs/guides/images-vision#calculating-costs)."""
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        scale = 2048 / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > 768:
        scale = 768 / min(w, h)
        w, h = w * scale, h * scale
    tiles = math.ceil(round(w, 6) / 512) * math.ceil(round(h, 6) / 512)
    return 85 + 170 * tiles


ANTHROPIC_MAX_EDGE = 1568
# 1092 × 1092, the largest square the page lists as not resized (≈1,590 tokens).
ANTHROPIC_MAX_PIXELS = 1092 * 1092


def anthropic_image_tokens(width: int, height: int) -> int:
    """Claude: tokens ≈ width × height / 750, after scaling down (aspect kept) so the
    long edge is at most 1568 px and the image at most ~1.19 megapixels. Source: Anthropic,
    "Vision", Evaluate image size (docs.anthropic.com/en/docs/build-with-claude/vision)."""
    w, h = float(width), float(height)
    scale = min(1.0, ANTHROPIC_MAX_EDGE / max(w, h), math.sqrt(ANTHROPIC_MAX_PIXELS / (w * h)))
    w, h = math.floor(w * scale), math.floor(h * scale)
    return max(1, math.ceil(w * h / 750))


# An image whose size was never decoded counts as the largest the provider accepts.
UNKNOWN_SIZE: dict[Shape, tuple[int, int]] = {"openai": (768, 2048), "anthropic": (1092, 1092)}


def image_tokens(width: int | None, height: int | None, shape: Shape) -> int:
    if not width or not height:
        width, height = UNKNOWN_SIZE[shape]
    if shape == "openai":
        return openai_image_tokens(width, height)
    if shape == "anthropic":
        return anthropic_image_tokens(width, height)
    assert_never(shape)


# Blocks and messages.


def block_tokens(block: Block, *, vision: bool, shape: Shape) -> int:
    """A block's tokens as it crosses: its prose, or an image part (vision on) or marker.

    Exhaustive: a new block kind fails the type check here too.
    """
    match block:
        case TextBlock() | ToolUseBlock() | ToolResultBlock() | ReasoningBlock():
            return count_text(prose(block))
        case ImageBlock():
            return image_own(
                block.media_type, block.width, block.height, vision=vision, shape=shape
            )
        case _:
            assert_never(block)


def image_own(
    media_type: str, width: int | None, height: int | None, *, vision: bool, shape: Shape
) -> int:
    """An image block's own tokens: arithmetic on its stored size (vision on) or its
    marker's text (vision off); no image data is read."""
    if vision:
        return image_tokens(width, height, shape)
    return _marker_tokens(media_type)


def _marker_tokens(media_type: str) -> int:
    known = IMAGE_MARKER_TOKENS.get(media_type)
    return known if known is not None else count_text(image_marker(media_type))


def count_kind(block: Block, role: Role) -> CountKind:
    """The kind a block's tokens are reported under: everything a system message holds is
    `system`; otherwise the block's own kind."""
    return "system" if role == "system" else kind_of(block)


@dataclass(frozen=True, slots=True)
class MessageCount:
    """One wire message's tokens: `by_kind` (blocks, by kind) + `framing` (the envelope, the
    blank lines joining blocks, `[Empty message]`) = `tokens`. `blocks` is each block's own
    count; `sent` what of it crosses (0 for a blank run left out), under `kinds`."""

    tokens: int
    by_kind: dict[CountKind, int]
    framing: int
    blocks: tuple[int, ...]
    sent: tuple[int, ...] = ()
    kinds: tuple[CountKind, ...] = ()


def message_count(
    message: StoredMessage,
    *,
    vision: bool,
    shape: Shape,
    counts: Sequence[int] | None = None,
) -> MessageCount:
    """Count one stored message as the projection sends it. `counts` are the blocks' own
    counts when the caller has them cached; blocks the projection leaves out (blank text
    runs) count 0, as in rule 6 and 7 of docs/contract.md §2."""
    blocks = message.blocks
    own = (
        list(counts)
        if counts is not None
        else [block_tokens(b, vision=vision, shape=shape) for b in blocks]
    )
    facts = [BlockFacts(kind_of(b), blank(b)) for b in blocks]
    return count_of_facts(message.role, facts, own, vision=vision, shape=shape)


@dataclass(frozen=True, slots=True)
class BlockFacts:
    """What a message's count needs of a block besides its own tokens: its kind and
    whether it is blank (empty or whitespace prose; an image never is)."""

    kind: BlockKind
    blank: bool


def count_of_facts(
    role: Role, facts: Sequence[BlockFacts], own: Sequence[int], *, vision: bool, shape: Shape
) -> MessageCount:
    """`message_count` from each block's kind, blankness and own count (for these toggles):
    what a stored message's figures are recomputed from without reading its texts."""
    lifted = shape == "anthropic" and role == "system"
    framing = 0 if lifted else MESSAGE_FRAMING[shape]
    sent = [0] * len(facts)
    has_images = vision and any(f.kind == "image" for f in facts)
    sep = separator_tokens()
    if has_images and not lifted:
        run: list[int] = []
        for i, fact in enumerate(facts):
            if fact.kind == "image":
                framing += _run(facts, run, own, sent, sep)
                run = []
                sent[i] = own[i]
            else:
                run.append(i)
        framing += _run(facts, run, own, sent, sep)
    elif all(f.blank for f in facts):
        framing += empty_message_tokens()
    else:
        sent = list(own)
        framing += sep * max(0, len(facts) - 1)
    by_kind: dict[CountKind, int] = {}
    kinds = tuple(count_kind_of(f.kind, role) for f in facts)
    for kind, n in zip(kinds, sent, strict=True):
        by_kind[kind] = by_kind.get(kind, 0) + n
    return MessageCount(sum(sent) + framing, by_kind, framing, tuple(own), tuple(sent), kinds)


def count_kind_of(kind: BlockKind, role: Role) -> CountKind:
    """`count_kind` from a block's kind."""
    return "system" if role == "system" else kind


def blank(block: Block) -> bool:
    """Whether a block's prose is empty or whitespace (an image never is: vision off it is
    its marker, vision on a part of its own)."""
    if type(block) is ImageBlock:
        return False
    text = prose(block)
    return not text or text.isspace()


def _run(
    facts: Sequence[BlockFacts], run: list[int], own: Sequence[int], sent: list[int], sep: int
) -> int:
    """A run of non-image blocks: one text part, left out when blank; its joins' tokens."""
    if not run or all(facts[i].blank for i in run):
        return 0
    for i in run:
        sent[i] = own[i]
    return sep * (len(run) - 1)


@dataclass(frozen=True, slots=True)
class PayloadCount:
    """The whole request: each message's count, the fixed overhead, and the total."""

    messages: tuple[MessageCount, ...]
    overhead: int
    total: int
    kinds: dict[CountKind, int]

    def by_kind(self) -> dict[CountKind, int]:
        return dict(self.kinds)


def payload_count(messages: Sequence[StoredMessage], *, vision: bool, shape: Shape) -> PayloadCount:
    counted = tuple(message_count(m, vision=vision, shape=shape) for m in messages)
    return total_of(counted, shape)


def total_of(counted: Sequence[MessageCount], shape: Shape) -> PayloadCount:
    overhead = REQUEST_OVERHEAD[shape]
    kinds: dict[CountKind, int] = dict.fromkeys(COUNT_KINDS, 0)
    for m in counted:
        for kind, n in m.by_kind.items():
            kinds[kind] += n
    return PayloadCount(tuple(counted), overhead, overhead + sum(m.tokens for m in counted), kinds)


# Measured usage (message metadata, docs/contract.md §6.4), beside the estimate.


@dataclass(frozen=True, slots=True)
class Usage:
    """A provider's measured tokens for one turn: the prompt it read, what it wrote."""

    input: int | None
    output: int | None


def usage_of(metadata: object) -> Usage | None:
    """A message's measured usage as its source recorded it, or None.

    Anthropic (`usage`): `input_tokens` plus the cache reads and writes (all of them are
    prompt); OpenAI (`usage`): `prompt_tokens` (Chat) or `input_tokens` (Responses);
    OpenTelemetry GenAI: the span's `gen_ai.usage.input_tokens` / `…output_tokens`.
    """
    if not isinstance(metadata, dict):
        return None
    usage = metadata.get("usage")
    if not isinstance(usage, dict):
        otel = {k: metadata.get(f"gen_ai.usage.{k}") for k in ("input_tokens", "output_tokens")}
        usage = otel if any(whole_number(v) is not None for v in otel.values()) else None
    if usage is None:
        return None

    def number(key: str) -> int | None:
        return whole_number(usage.get(key))

    prompt = number("prompt_tokens")
    if prompt is None:
        parts = [
            number(k)
            for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        ]
        prompt = sum(p for p in parts if p is not None) if parts[0] is not None else None
    output = number("completion_tokens")
    if output is None:
        output = number("output_tokens")
    if prompt is None and output is None:
        return None
    return Usage(prompt, output)


def trusted_output(usage: Usage | None, estimate: int) -> int | None:
    """The measured output, unless it is below the estimate of the message's own content:
    Claude Code records 1 for some streamed turns, which no reply of that length costs."""
    if usage is None or usage.output is None or usage.output < estimate:
        return None
    return usage.output


def whole_number(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def ratio(measured: int | None, estimate: int) -> float | None:
    """measured / estimate, rounded for display; None when either is missing or zero."""
    if not measured or estimate <= 0:
        return None
    return round(measured / estimate, 2)
