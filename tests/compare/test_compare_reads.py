"""The reads behind a comparison (docs/contract.md §9): signatures never read a text, and
the streamed read that token counts (and so every comparison) start from looks blocks up
by id, not by walking the conversation's messages once per batch."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations.compare import reads as comparing
from conversations.core import compare
from conversations.record.reads import selectors
from tests.builders import text, tool_result, tool_use
from tests.compare.test_compare_api import run
from tests.record.search.test_finding import plans


@pytest.mark.sqlite
def test_signatures_read_no_text(db) -> None:
    conversation = run(
        ("user", [text("secret words")]),
        ("assistant", [text("thinking"), tool_use("c1", "grep", q="x"), tool_use("c2", "ls")]),
        ("user", [tool_result("c1"), tool_result("c2")]),
        ("assistant", []),
    )
    interner = compare.Interner()
    with CaptureQueriesContext(connection) as captured:
        ids, tools = comparing._signatures(conversation, interner, limit=4)
    assert [interner.signatures[i] for i in ids] == [
        ("user", ("text",), ()),
        ("assistant", ("text", "tool_use", "tool_use"), ("grep", "ls")),
        ("user", ("tool_result", "tool_result"), ()),
        ("assistant", (), ()),
    ]
    assert tools == {"grep": 1, "ls": 1}
    assert len(captured.captured_queries) == 2
    for query in captured.captured_queries:
        assert '"text"' not in query["sql"] and '"input_json"' not in query["sql"]


@pytest.mark.sqlite(only=True)  # SQLite's planner
def test_streamed_batches_look_blocks_up_by_id(db) -> None:
    conversation = run(*[("user", [text(f"line {i}")]) for i in range(1200)])
    found = plans(lambda: list(selectors.message_rows_streamed(conversation)))
    batches = [(sql, plan) for sql, plan in found if '"conversations_block"."call_id"' in sql]
    assert len(batches) == 3  # 500 blocks a batch
    for _sql, plan in batches:
        assert "USING INTEGER PRIMARY KEY" in plan, plan
        assert "conversations_message" not in plan, plan
