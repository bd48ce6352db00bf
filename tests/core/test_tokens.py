"""Token counts (docs/contract.md §7): the vendored tokenizer, every block kind, framing, images."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
import tiktoken
from hypothesis import given
from hypothesis import strategies as st
from tiktoken_ext import openai_public

from conversations.core import replay
from conversations.core.blocks import image_marker
from conversations.core.counting import tokens
from conversations.core.replay import (
    ImageBlock,
    ReasoningBlock,
    StoredMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from tests import replay_strategies as s


def test_vendored_encoding_file_has_tiktokens_hash() -> None:
    data = tokens.ENCODING_FILE.read_bytes()
    assert hashlib.sha256(data).hexdigest() == tokens.ENCODING_SHA256
    # The hash tiktoken itself expects for o200k_base.
    assert tokens.ENCODING_SHA256 in Path(openai_public.__file__).read_text()


def test_a_changed_encoding_file_is_refused(tmp_path) -> None:
    bad = tmp_path / "o200k_base.tiktoken"
    bad.write_bytes(tokens.ENCODING_FILE.read_bytes()[:-10])
    with pytest.raises(tokens.EncodingFileError, match="SHA-256"):
        tokens.load_ranks(bad)


def test_our_encoding_is_tiktokens_o200k_base(monkeypatch) -> None:
    """tiktoken's own constructor, fed the vendored ranks instead of a download, gives the
    same pattern and special tokens, and so the same tokens."""
    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", lambda *a, **k: tokens.load_ranks())
    official = openai_public.o200k_base()
    assert official["pat_str"] == tokens.O200K_PATTERN
    assert official["special_tokens"] == tokens.O200K_SPECIAL
    reference = tiktoken.Encoding(**official)
    for text in ["Hello, world!", "naïve café — 日本語のテキスト", "  \n\n\tx = {'a': 1}\n", ""]:
        assert tokens.encoding().encode_ordinary(text) == reference.encode_ordinary(text)


def test_known_counts() -> None:
    assert tokens.count_text("") == 0
    assert tokens.count_text("hello world") == 2
    assert tokens.separator_tokens() == 1
    assert tokens.count_text("<|endoftext|>") > 1  # special-token text counts as plain text


def test_the_fixed_texts_counts_written_out_are_the_encoders() -> None:
    # Read paths use these constants so that reading stored counts never loads the encoder.
    assert tokens.separator_tokens() == tokens.count_text("\n\n")
    assert tokens.empty_message_tokens() == tokens.count_text(replay.EMPTY_MESSAGE)
    assert set(tokens.IMAGE_MARKER_TOKENS) == set(replay.IMAGE_MEDIA_TYPES)
    for media_type, n in tokens.IMAGE_MARKER_TOKENS.items():
        assert n == tokens.count_text(image_marker(media_type))


@given(s.prose_blocks, st.booleans(), st.sampled_from(replay.SHAPES))
def test_a_prose_blocks_count_is_its_wire_texts_count(block, vision, shape) -> None:
    n = tokens.block_tokens(block, vision=vision, shape=shape)
    assert n == len(tokens.encoding().encode_ordinary(replay.prose(block)))


@given(s.image_blocks, st.sampled_from(replay.SHAPES))
def test_an_image_without_vision_counts_as_its_marker(block, shape) -> None:
    n = tokens.block_tokens(block, vision=False, shape=shape)
    assert n == tokens.count_text(replay.image_marker(block.media_type))


@given(s.records, st.booleans(), st.sampled_from(replay.SHAPES))
def test_each_message_is_its_blocks_plus_framing(record, vision, shape) -> None:
    """by_kind sums to tokens minus framing; the total is the messages plus the overhead;
    a message that crosses as one string of one block counts exactly that string."""
    counted = tokens.payload_count(record, vision=vision, shape=shape)
    assert counted.total == counted.overhead + sum(m.tokens for m in counted.messages)
    for message, count in zip(record, counted.messages, strict=True):
        assert sum(count.by_kind.values()) == count.tokens - count.framing
        assert all(v >= 0 for v in count.by_kind.values())
        wire = replay.content(message, vision=vision, shape=shape)
        lifted = shape == "anthropic" and message.role == "system"
        envelope = 0 if lifted else tokens.MESSAGE_FRAMING[shape]
        if isinstance(wire, str) and (len(message.blocks) <= 1 or wire == replay.EMPTY_MESSAGE):
            assert count.tokens == envelope + tokens.count_text(wire)
    assert set(counted.by_kind()) == set(tokens.COUNT_KINDS)


def test_kinds_are_reported_by_block_and_system_by_role() -> None:
    record = [
        StoredMessage("system", (TextBlock("be brief"),)),
        StoredMessage("user", (TextBlock("hi"), ImageBlock("image/png", "x", 3, 2))),
        StoredMessage(
            "assistant",
            (ReasoningBlock("hm"), ToolUseBlock.of("c1", "ls", {"p": "/"})),
        ),
        StoredMessage("user", (ToolResultBlock("c1", "ls", "a b"),)),
    ]
    counted = tokens.payload_count(record, vision=True, shape="openai")
    assert [set(m.by_kind) for m in counted.messages] == [
        {"system"},
        {"text", "image"},
        {"reasoning", "tool_use"},
        {"tool_result"},
    ]
    assert counted.messages[1].by_kind["image"] == 85 + 170
    assert counted.messages[2].framing == 3 + 1  # envelope and one blank line


def test_blank_runs_and_empty_messages_count_as_the_projection_sends_them() -> None:
    blank_run = StoredMessage("user", (TextBlock("  "), ImageBlock("image/png", "x", 3, 2)))
    count = tokens.message_count(blank_run, vision=True, shape="openai")
    assert count.by_kind == {"text": 0, "image": 255}
    empty = tokens.message_count(StoredMessage("user", ()), vision=True, shape="openai")
    assert empty.tokens == 3 + tokens.count_text("[Empty message]")
    lifted = tokens.message_count(
        StoredMessage("system", (TextBlock("rules"),)), vision=True, shape="anthropic"
    )
    assert lifted.framing == 0


# Images: hand-computed against the providers' own worked examples.


@pytest.mark.parametrize(
    ("width", "height", "expected"),
    [
        (1024, 1024, 765),  # → 768×768, 4 tiles (OpenAI's example)
        (2048, 4096, 1105),  # → 1024×2048 → 768×1536, 6 tiles (OpenAI's example)
        (512, 512, 255),  # one tile, no resize
        (3, 2, 255),
        (4096, 8192, 1105),  # fit in 2048 first
        (513, 512, 425),  # two tiles
    ],
)
def test_openai_image_formula(width, height, expected) -> None:
    assert tokens.openai_image_tokens(width, height) == expected


@pytest.mark.parametrize(
    ("width", "height", "expected"),
    [
        (1000, 1000, 1334),  # Anthropic's table: ≈1,334
        (200, 200, 54),  # ≈54
        (1092, 1092, 1590),  # the largest 1:1 that is not resized: ≈1,590
        (3000, 1500, 1590),  # long edge to 1568, then the pixel cap
        (3, 2, 1),
    ],
)
def test_anthropic_image_formula(width, height, expected) -> None:
    assert tokens.anthropic_image_tokens(width, height) == expected


def test_image_tokens_follow_the_shape_and_its_stored_size() -> None:
    image = ImageBlock("image/png", "x", 1000, 1000)
    assert tokens.block_tokens(image, vision=True, shape="openai") == 765
    assert tokens.block_tokens(image, vision=True, shape="anthropic") == 1334
    unknown = ImageBlock("image/png", "x")
    assert tokens.block_tokens(unknown, vision=True, shape="anthropic") == 1590


def test_usage_in_either_providers_names() -> None:
    anthropic = {
        "usage": {
            "input_tokens": 10,
            "cache_read_input_tokens": 90,
            "cache_creation_input_tokens": 5,
            "output_tokens": 7,
        }
    }
    assert tokens.usage_of(anthropic) == tokens.Usage(105, 7)
    chat = {"usage": {"prompt_tokens": 50, "completion_tokens": 4}}
    assert tokens.usage_of(chat) == tokens.Usage(50, 4)
    assert tokens.usage_of({"usage": {"output_tokens": 3}}) == tokens.Usage(None, 3)
    assert tokens.usage_of({"usage": "x"}) is None
    assert tokens.usage_of({}) is None
    assert tokens.usage_of({"usage": {"input_tokens": True}}) is None
    otel = {"gen_ai.usage.input_tokens": 812, "gen_ai.usage.output_tokens": 40}
    assert tokens.usage_of(otel) == tokens.Usage(812, 40)
    assert tokens.usage_of({"gen_ai.usage.input_tokens": -5}) is None
    assert tokens.ratio(120, 100) == 1.2
    assert tokens.ratio(None, 100) is None
    assert tokens.ratio(5, 0) is None


def test_a_measured_output_below_the_estimate_of_the_reply_is_not_trusted() -> None:
    # Claude Code records output_tokens 1 for some streamed turns.
    assert tokens.trusted_output(tokens.Usage(25_000, 1), estimate=74) is None
    assert tokens.trusted_output(tokens.Usage(25_000, 143), estimate=81) == 143
    assert tokens.trusted_output(tokens.Usage(25_000, None), estimate=1) is None
    assert tokens.trusted_output(None, estimate=1) is None


# -- a long text is counted a piece at a time, exactly -----------------------------------


def long_texts() -> list[str]:
    import random

    rng = random.Random(7)
    words = ["alpha", "Beta", "γάμμα", "42", "1234567", "x=1;", ".", "/", "//", "/path"]
    words += [" ", "  ", "\n", "\n\n", " \n", "\r\n", "\t", "'s", "😀", '{"k": [1, 2]}', "a.\n/b"]
    texts = ["".join(rng.choice(words) for _ in range(60_000)) for _ in range(6)]
    texts.append("line of a log\n" * 40_000)  # newlines everywhere
    texts.append("x" * 600_000)  # no newline at all
    texts.append(".\n/" * 200_000)  # every newline followed by "/": none to cut at
    return texts


@pytest.mark.parametrize("index", range(9))
def test_a_long_text_counts_as_the_encoder_counts_it_whole(
    index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = long_texts()[index]
    monkeypatch.setattr(tokens, "COUNT_CHUNK", 4096)  # many pieces, many cuts
    whole = len(tokens.encoding().encode_ordinary(text))
    measured = tokens.measure_text(text)
    pieces = list(tokens._pieces(text))
    assert pieces[0][0] == 0 and pieces[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:], strict=False))
    if index < 7:  # text with places to cut at: exact
        assert measured == tokens.TextCount(whole, True)
        assert len(pieces) > len(text) // 8192
    else:  # one unbroken run: sampled at three places, and says so
        assert not measured.exact and measured.tokens == pytest.approx(whole, rel=0.01)
        assert tokens.count_text(text) == measured.tokens


def test_a_batch_of_texts_counts_each_as_it_counts_alone() -> None:
    # Ingest counts a batch's texts together (each distinct text and piece once): the
    # figures stored must not depend on what else the batch holds.
    texts = [*long_texts(), "", "hello", "hello", "a b  c\n\n/d", " ", *long_texts()[:2]]
    assert tokens.count_texts(texts) == [tokens.count_text(t) for t in texts]
    assert tokens.count_texts([]) == []


def test_a_megabyte_of_whitespace_counts_instead_of_crashing_the_encoder() -> None:
    # Encoded whole, a million spaces overflow the encoder's stack: a Rust panic, which
    # is a BaseException that no `except Exception` of a page or frame would catch.
    for text in (" " * 1_000_000, "\t" * 1_000_000, "x" + " \n" * 600_000):
        measured = tokens.measure_text(text)
        sample = len(tokens.encoding().encode_ordinary(text[:100_000]))
        assert measured.tokens == pytest.approx(sample * len(text) / 100_000, rel=0.02)


def test_an_unbroken_run_is_counted_at_its_start_middle_and_end() -> None:
    # A run whose halves differ is not counted as its start alone.
    text = "a" * 100_000 + base64.b64encode(bytes(range(256)) * 300).decode()
    measured = tokens.measure_text(text)
    whole = len(tokens.encoding().encode_ordinary(text[:100_000])) + len(
        tokens.encoding().encode_ordinary(text[100_000:])
    )
    assert not measured.exact
    assert measured.tokens == pytest.approx(whole, rel=0.25)
    assert tokens.measure_text(text) == measured  # deterministic
