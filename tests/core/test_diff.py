"""Projection diffs: alignment message by message, and text diffs inside a message."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from conversations.core import diff, replay
from conversations.core.replay import ImageBlock, StoredMessage, TextBlock
from tests import replay_strategies as s


def texts(segments, op) -> str:
    return "".join(x.text for x in segments if x.op in ("equal", op))


def test_vision_on_against_off_differs_only_in_the_image_message() -> None:
    record = [
        StoredMessage("system", (TextBlock("rules"),)),
        StoredMessage("user", (TextBlock("look"), ImageBlock("image/png", "AAAA"))),
        StoredMessage("assistant", (TextBlock("a red square"),)),
    ]
    rows = diff.diff(replay.project(record, vision=True), replay.project(record, vision=False))
    assert [r.status for r in rows] == ["same", "changed", "same"]
    changed = rows[1]
    inserted = "".join(x.text for x in changed.segments if x.op == "insert")
    assert "not seen" in inserted and "cannot view images" in inserted
    assert "part" in "".join(x.text for x in changed.segments if x.op == "delete")
    assert texts(changed.segments, "delete") == changed.left.text
    assert texts(changed.segments, "insert") == changed.right.text


def test_openai_against_anthropic_lifts_the_system_message_to_the_front() -> None:
    record = [StoredMessage("user", (TextBlock("hi"),)), StoredMessage("system", (TextBlock("s"),))]
    rows = diff.diff(
        replay.project(record, shape="openai"), replay.project(record, shape="anthropic")
    )
    assert [(r.status, r.left and r.left.role, r.right and r.right.role) for r in rows] == [
        ("right", None, "system"),
        ("same", "user", "user"),
        ("left", "system", None),
    ]


def test_an_inserted_message_does_not_shift_the_rest() -> None:
    a = [StoredMessage("user", (TextBlock(t),)) for t in ["one", "two", "three"]]
    b = [a[0], StoredMessage("assistant", (TextBlock("extra"),)), a[1], a[2]]
    rows = diff.diff(replay.project(a), replay.project(b))
    assert [r.status for r in rows] == ["same", "right", "same", "same"]


def test_word_diff_marks_only_the_words_that_changed() -> None:
    segments = diff.text_diff("the quick brown fox", "the slow brown fox")
    assert [(x.op, x.text) for x in segments] == [
        ("equal", "the "),
        ("delete", "quick"),
        ("insert", "slow"),
        ("equal", " brown fox"),
    ]


@given(s.records, s.records, st.booleans(), st.sampled_from(replay.SHAPES))
def test_every_message_appears_once_and_diffs_rebuild_both_texts(a, b, vision, shape) -> None:
    left, right = replay.project(a, vision=vision, shape=shape), replay.project(b, shape=shape)
    rows = diff.diff(left, right)
    assert [r.left.index for r in rows if r.left] == list(range(len(diff.sides(left))))
    assert [r.right.index for r in rows if r.right] == list(range(len(diff.sides(right))))
    for row in rows:
        if row.status == "changed":
            assert texts(row.segments, "delete") == row.left.text
            assert texts(row.segments, "insert") == row.right.text
        if row.status == "same":
            assert row.left.text == row.right.text
