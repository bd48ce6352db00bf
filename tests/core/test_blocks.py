"""The block-kind registry's lookups (conversations/core/blocks.py), pure."""

from __future__ import annotations

import pytest

from conversations.core import blocks


def test_every_stored_type_name_is_a_kind_and_nothing_else_is() -> None:
    assert [blocks.kind_named(name) for name in blocks.BLOCK_KINDS] == list(blocks.BLOCK_KINDS)
    for name in ("", "Tool_use", "video", "tool_use "):
        with pytest.raises(ValueError, match="no block kind"):
            blocks.kind_named(name)


def test_only_tool_use_and_tool_result_are_halves_of_a_tool_round() -> None:
    sides = {kind: blocks.tool_side(kind) for kind in blocks.BLOCK_KINDS}
    assert sides == {
        "text": None,
        "tool_use": "call",
        "tool_result": "result",
        "reasoning": None,
        "image": None,
    }
