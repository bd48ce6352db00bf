"""The next request's size (docs/contract.md §7), pure: measured basis, estimated fallback,
unrecorded, largest blocks, compactions; and its accuracy against what the provider
measured on the real Claude Code sessions in tests/fixtures/real (sources in SOURCES.md)."""

from __future__ import annotations

import base64
import io
import math
import statistics
from pathlib import Path

import pytest
from PIL import Image

from conversations.core import importers, replay
from conversations.core.counting import next_request as nr
from conversations.core.counting import tokens
from conversations.core.counting.tokens import Usage
from tests.importdata import stored
from tests.realdata import REAL

CLAUDE_CODE_FILES = sorted(
    p.relative_to(REAL).as_posix() for p in Path(REAL).rglob("claude_code*.jsonl")
)


def fig(
    seq: int, role: str, n: int, inp: int | None = None, turn: str | None = None, **kw: object
) -> nr.MessageFigure:
    usage = Usage(inp, 10) if inp is not None else None
    return nr.MessageFigure(seq=seq, role=role, tokens=n, usage=usage, turn=turn, **kw)  # type: ignore[arg-type]


def test_the_latest_measured_turn_is_the_basis_and_only_what_follows_is_estimated() -> None:
    figures = [
        fig(0, "user", 50),
        fig(1, "assistant", 20, inp=1_000),
        fig(2, "user", 30),
        fig(3, "assistant", 40, inp=1_100),
        fig(4, "user", 7),
    ]
    got = nr.next_request(figures, overhead=3, model="gpt-4o", unrecorded_tokens=None)
    assert (got.basis, got.measured_seq, got.measured) == ("measured", 3, 1_100)
    assert got.since == 40 + 7  # the basis turn's own message and everything after it
    assert got.tokens == 1_147
    assert got.as_json() == {"tokens": 1_147, "basis": "measured", "measured_seq": 3}


def test_without_a_measured_turn_it_is_the_estimate_plus_what_is_unrecorded() -> None:
    figures = [fig(0, "user", 50), fig(1, "assistant", 20)]
    got = nr.next_request(figures, overhead=3, model=None, unrecorded_tokens=900)
    assert (got.tokens, got.basis, got.measured_seq) == (973, "estimated", None)
    plain = nr.next_request(figures, overhead=3, model=None, unrecorded_tokens=None)
    assert plain.tokens == 73


def test_messages_of_one_response_are_one_turn() -> None:
    # Claude Code writes parallel tool calls of one response apart, a result between them:
    # both carry the response's one measurement, which covers neither of them.
    figures = [
        fig(0, "user", 10),
        fig(1, "assistant", 20, inp=500, turn="msg_a"),
        fig(2, "user", 30),
        fig(3, "assistant", 40, inp=500, turn="msg_a"),
        fig(4, "user", 5),
    ]
    got = nr.next_request(figures, overhead=0, model="gpt-4o", unrecorded_tokens=None)
    assert (got.measured_seq, got.since, got.tokens) == (3, 20 + 30 + 40 + 5, 595)
    assert len(nr.measured_turns(figures)) == 1


def test_a_claude_model_scales_the_estimate_until_its_own_turns_say_otherwise() -> None:
    small = [fig(0, "user", 10), fig(1, "assistant", 100, inp=1_000), fig(2, "user", 900)]
    got = nr.next_request(small, overhead=0, model="claude-sonnet-4-5", unrecorded_tokens=None)
    assert got.factor == nr.CLAUDE_FACTOR and got.tokens == 1_000 + round(1.1 * 1_000)
    # Measured growth of 2,400 over an estimated 2,000: the conversation's own ratio, 1.2.
    grown = [
        fig(0, "user", 10),
        fig(1, "assistant", 100, inp=1_000),
        fig(2, "user", 1_900),
        fig(3, "assistant", 50, inp=3_400),
        fig(4, "user", 100),
    ]
    got = nr.next_request(grown, overhead=0, model="claude-sonnet-4-5", unrecorded_tokens=None)
    assert got.factor == pytest.approx(1.2) and got.tokens == 3_400 + round(1.2 * 150)
    # A ratio out of bounds is held to them; shrinking context is no tokenizer figure.
    wild = [
        fig(0, "user", 10),
        fig(1, "assistant", 100, inp=1_000),
        fig(2, "user", 1_900),
        fig(3, "assistant", 0, inp=20_000),
        fig(4, "assistant", 0, inp=500),
    ]
    assert nr.calibrated_factor(wild, nr.measured_turns(wild), 1.0) == nr.FACTOR_BOUNDS[1]


def test_unrecorded_is_inferred_at_the_first_measured_turn() -> None:
    figures = [
        fig(0, "user", 40),
        fig(1, "assistant", 25, inp=1_043),
        fig(2, "user", 5),
        fig(3, "assistant", 5, inp=1_200),
    ]
    assert nr.unrecorded(figures, overhead=3) == nr.Unrecorded(1_000, 1)
    assert nr.unrecorded(figures[:1], overhead=3) == nr.Unrecorded(None, None)
    # An estimate above the measurement records nothing missing (never negative).
    assert nr.unrecorded([fig(0, "user", 5_000), fig(1, "assistant", 1, inp=10)], 3).tokens == 0


def test_largest_keeps_the_ten_heaviest_in_order_with_ties_in_record_order() -> None:
    blocks = [
        nr.HeavyBlock(seq=seq, block=b, kind="text", tokens=(seq * 7 + b) % 13)
        for seq in range(40)
        for b in range(3)
    ]
    top = nr.largest(iter(blocks))
    assert len(top) == nr.LARGEST
    assert [b.tokens for b in top] == sorted((b.tokens for b in top), reverse=True)
    assert top == sorted(blocks, key=lambda b: (-b.tokens, b.seq, b.block))[: nr.LARGEST]
    assert top[0].as_json() == {
        "seq": top[0].seq,
        "block": top[0].block,
        "kind": "text",
        "tokens": 12,
    }


def test_heavy_blocks_are_what_each_block_sends_under_its_kind() -> None:
    image = replay.ImageBlock("image/png", "iVBORw0KGgo=", 512, 512)
    message = replay.StoredMessage(
        "user",
        (
            replay.TextBlock("hello there"),
            image,
            replay.TextBlock("  "),
            replay.ToolResultBlock("c1", "grep", "x " * 300),
        ),
    )
    count = tokens.message_count(message, vision=True, shape="openai")
    found = list(nr.heavy_blocks(7, count))
    # The blank text between the image and the result still joins the result's run.
    assert [(b.block, b.kind) for b in found] == [
        (0, "text"),
        (1, "image"),
        (2, "text"),
        (3, "tool_result"),
    ]
    assert [b.tokens for b in found] == list(count.blocks)
    alone = replay.StoredMessage("user", (image, replay.TextBlock("  ")))
    count = tokens.message_count(alone, vision=True, shape="openai")
    assert [b.block for b in nr.heavy_blocks(3, count)] == [0]  # a blank run is left out
    system = replay.StoredMessage("system", (replay.TextBlock("be brief"),))
    count = tokens.message_count(system, vision=True, shape="openai")
    assert [b.kind for b in nr.heavy_blocks(0, count)] == ["system"]


def test_compactions_from_a_real_boundary() -> None:
    raw = (Path(REAL) / "claude_code_compact_boundary.jsonl").read_bytes()
    imported = importers.read(raw, "claude-code")
    figures = figures_of(imported, "openai")
    marks = nr.boundary_marks(imported.metadata)
    assert [m["seq"] for m in marks] == [5]
    found = nr.compactions(marks, {5: figures[5:]})
    assert [c.as_json() for c in found] == [
        {"seq": 5, "trigger": "manual", "pre_tokens": 15808, "post_tokens": None, "summary_seq": 5}
    ]
    after = [*figures[5:], fig(9, "assistant", 30, inp=4_321)]
    (compaction,) = nr.compactions(marks, {5: after})
    assert (compaction.post_tokens, compaction.post_seq) == (4_321, 9)


def test_marks_that_name_no_seq_are_not_compactions() -> None:
    metadata = {"compact_boundaries": [{"seq": 7}, {"seq": -1}, {"seq": True}, "x", {"seq": 2}]}
    assert [m["seq"] for m in nr.boundary_marks(metadata)] == [2, 7]
    assert nr.boundary_marks({"compact_boundaries": "no"}) == []
    assert nr.boundary_marks(None) == []


# Accuracy on real sessions: for each pair of consecutive measured turns (no boundary
# between), the next request as of the message before the later turn, against the
# input the provider measured for that turn.


def dimensions(message: replay.StoredMessage) -> replay.StoredMessage:
    """Images with the pixel size ingest decodes (their token counts depend on it)."""
    blocks = []
    for block in message.blocks:
        if isinstance(block, replay.ImageBlock):
            width, height = Image.open(io.BytesIO(base64.b64decode(block.data))).size
            block = replay.ImageBlock(block.media_type, block.data, width, height)
        blocks.append(block)
    return replay.StoredMessage(message.role, tuple(blocks))


def figures_of(imported: importers.Imported, shape: replay.Shape) -> list[nr.MessageFigure]:
    figures = []
    for seq, (message, value) in enumerate(zip(imported.messages, stored(imported), strict=True)):
        count = tokens.message_count(dimensions(value), vision=True, shape=shape)
        meta = message.metadata
        turn = meta.get("id")
        figures.append(
            nr.MessageFigure(
                seq,
                message.role,
                count.tokens,
                tokens.usage_of(meta),
                turn if isinstance(turn, str) else None,
                bool(meta.get("isCompactSummary")),
            )
        )
    return figures


def sessions() -> list[tuple[str, importers.Imported]]:
    found = []
    for name in CLAUDE_CODE_FILES:
        imported = importers.read((Path(REAL) / name).read_bytes(), "claude-code")
        found.extend((f"{name}#{i}", c) for i, c in enumerate([imported, *imported.linked]))
    return found


@pytest.mark.parametrize("shape", replay.SHAPES)
def test_next_request_predicts_the_measured_input_of_real_sessions(shape: replay.Shape) -> None:
    errors: list[float] = []
    for name, imported in sessions():
        figures = figures_of(imported, shape)
        models = [m.metadata.get("model") for m in imported.messages]
        model = next((m for m in reversed(models) if isinstance(m, str)), None)
        turns = nr.measured_turns(figures)
        for later in turns[1:]:
            upto = later.start - 1
            got = nr.next_request(
                figures[: upto + 1],
                overhead=tokens.REQUEST_OVERHEAD[shape],
                model=model,
                unrecorded_tokens=None,
            )
            assert got.basis == "measured", name
            errors.append(abs(got.tokens - later.input) / later.input)
    errors.sort()
    assert len(errors) >= 7  # every consecutive pair of measured turns in the fixtures
    median = statistics.median(errors)
    p90 = errors[math.ceil(0.9 * len(errors)) - 1]
    figures = f"median {median:.2%}, p90 {p90:.2%}, worst {errors[-1]:.2%}"
    assert median <= 0.01 and p90 <= 0.04 and errors[-1] <= 0.08, figures


def test_the_record_alone_misses_most_of_what_claude_code_sends() -> None:
    # Why the headline is anchored on measurements: the record-only estimate of a real
    # session's last turn is far below what the provider counted.
    imported = importers.read(
        (Path(REAL) / "claude_code_tool_heavy_parallel_interrupts.jsonl").read_bytes(),
        "claude-code",
    )
    figures = figures_of(imported, "openai")
    last = nr.measured_turns(figures)[-1]
    estimate = tokens.REQUEST_OVERHEAD["openai"] + sum(f.tokens for f in figures[: last.start])
    assert estimate < last.input / 5
    got = nr.next_request(
        figures[: last.start], overhead=3, model="claude-opus-4-6", unrecorded_tokens=None
    )
    assert abs(got.tokens - last.input) / last.input < 0.02
