"""GET /api/compare (docs/contract.md §9): hand-made pairs of runs, two real imported
sessions, paging, errors naming `a`, `b` or the toggle, and tokens as the rest of the API."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from conversations.record.schemas import MessageIn
from conversations.record.services.appending import messages_append
from conversations.record.services.conversations import conversation_create
from tests.builders import text, tool_result, tool_use
from tests.conftest import ApiClient
from tests.realdata import REAL

COMPARE = "/api/compare"
Spec = tuple[str, list[dict[str, Any]]]


def run(*messages: Spec, title: str = "run", metadata: dict[str, Any] | None = None) -> Any:
    conversation = conversation_create(title=title, metadata=metadata or {})
    if messages:
        messages_append(
            conversation=conversation,
            messages=[MessageIn(role=role, blocks=blocks) for role, blocks in messages],
        )
    conversation.refresh_from_db()
    return conversation


def task(*, tools: tuple[str, ...] = ("read_file", "read_file", "grep")) -> list[Spec]:
    """A small agent run: a system prompt, a question, a tool round per tool, an answer."""
    out: list[Spec] = [("system", [text("You are careful.")]), ("user", [text("Fix the bug.")])]
    for i, name in enumerate(tools):
        out.append(("assistant", [text(f"Step {i}."), tool_use(f"c{i}", name, path=f"f{i}.py")]))
        out.append(("user", [tool_result(f"c{i}", f"contents {i}")]))
    out.append(("assistant", [text("Done: the bug was in f1.py.")]))
    return out


def compare(api: ApiClient, a: Any, b: Any, **params: Any) -> dict[str, Any]:
    response = api.get(COMPARE, a=str(a.id), b=str(b.id), **params)
    assert response.status_code == 200, response.content
    data: dict[str, Any] = response.json()
    return data


def pairs(data: dict[str, Any]) -> list[tuple[Any, Any, bool]]:
    return [(r["a_seq"], r["b_seq"], r["same"]) for r in data["rows"]]


def assert_consistent(data: dict[str, Any]) -> None:
    """Every message of each run once, in order."""
    a_seqs = [r["a_seq"] for r in data["rows"] if r["a_seq"] is not None]
    b_seqs = [r["b_seq"] for r in data["rows"] if r["b_seq"] is not None]
    assert a_seqs == list(range(data["a"]["messages"]))
    assert b_seqs == list(range(data["b"]["messages"]))


@pytest.mark.sqlite
def test_identical_runs_are_the_same_throughout(api: ApiClient) -> None:
    a, b = run(*task()), run(*task())
    data = compare(api, a, b)
    assert data["first_divergence"] is None
    assert pairs(data) == [(i, i, True) for i in range(9)]
    assert data["changed"] == "The runs are the same throughout."
    assert data["a"] | {"id": None, "url": None} == data["b"] | {"id": None, "url": None}
    assert data["a"]["tool_calls"] == {"read_file": 2, "grep": 1}
    assert data["a"]["messages"] == 9
    assert (data["page"], data["pages"], data["next"]) == (1, 1, None)
    assert all(r["tokens_a"] == r["tokens_b"] > 0 for r in data["rows"])


@pytest.mark.sqlite
def test_a_substituted_tool_call_stands_alone_on_each_side(api: ApiClient) -> None:
    a = run(*task(tools=("read_file", "read_file", "grep")))
    b = run(*task(tools=("read_file", "grep", "grep")))
    data = compare(api, a, b)
    assert_consistent(data)
    rows = pairs(data)
    # #4 (the second call) has no partner on either side; its result pairs but differs.
    assert rows[:4] == [(i, i, True) for i in range(4)]
    assert rows[4:6] == [(4, None, False), (None, 4, False)]
    assert rows[6] == (5, 5, False)
    assert rows[7:] == [(i, i, True) for i in range(6, 9)]
    assert data["first_divergence"] == {"a_seq": 4, "b_seq": 4}
    assert "B called `grep` where A called `read_file` at #4" in data["changed"]
    assert data["b"]["tool_calls"] == {"grep": 2, "read_file": 1}


@pytest.mark.sqlite
def test_an_inserted_message_leaves_a_with_no_divergence(api: ApiClient) -> None:
    messages = task()
    a = run(*messages)
    b = run(*messages[:3], ("user", [text("Also check the tests.")]), *messages[3:])
    data = compare(api, a, b)
    assert_consistent(data)
    rows = pairs(data)
    assert (None, 3, False) in rows
    assert [r for r in rows if r[0] is not None] == [(i, i + (i >= 3), True) for i in range(9)]
    assert data["first_divergence"] == {"a_seq": None, "b_seq": 3}
    assert "B has 1 more message" in data["changed"]


@pytest.mark.sqlite
def test_a_deleted_message_leaves_b_with_no_divergence(api: ApiClient) -> None:
    messages = task()
    a = run(*messages)
    b = run(*messages[:1], *messages[2:])  # no question
    data = compare(api, a, b)
    assert_consistent(data)
    assert pairs(data)[1] == (1, None, False)
    assert data["first_divergence"] == {"a_seq": 1, "b_seq": None}
    assert "B has 1 fewer message" in data["changed"]
    assert "smaller" in data["changed"]


@pytest.mark.sqlite
def test_runs_of_different_lengths(api: ApiClient) -> None:
    messages = task()
    longer = [*messages, ("user", [text("And the docs?")]), ("assistant", [text("Updated.")])]
    a, b = run(*messages), run(*longer)
    data = compare(api, a, b)
    assert pairs(data)[-2:] == [(None, 9, False), (None, 10, False)]
    assert data["first_divergence"] == {"a_seq": None, "b_seq": 9}
    assert data["b"]["tokens"] > data["a"]["tokens"]
    reverse = compare(api, b, a)
    assert reverse["first_divergence"] == {"a_seq": 9, "b_seq": None}
    assert "B has 2 fewer messages" in reverse["changed"]


@pytest.mark.sqlite
def test_a_pair_with_a_changed_text_is_not_same_and_errors_are_counted(api: ApiClient) -> None:
    messages = task()
    changed = list(messages)
    changed[5] = ("user", [tool_result("c1", "No such file", is_error=True)])
    a, b = run(*messages), run(*changed)
    data = compare(api, a, b)
    assert pairs(data)[5] == (5, 5, False)
    assert data["first_divergence"] == {"a_seq": 5, "b_seq": 5}
    assert (data["a"]["errors"], data["b"]["errors"]) == (0, 1)
    assert "B has 1 more error" in data["changed"]


@pytest.mark.sqlite
def test_vision_decides_whether_pairs_with_other_images_are_same(api: ApiClient) -> None:
    from tests.builders import jpeg, png

    a = run(("user", [text("Look:"), png((200, 30, 30))]))
    b = run(("user", [text("Look:"), png((30, 200, 30))]))
    assert pairs(compare(api, a, b, vision="1")) == [(0, 0, False)]
    assert pairs(compare(api, a, b, vision="0")) == [(0, 0, True)]
    c = run(("user", [text("Look:"), jpeg()]))  # another media type: another marker
    assert pairs(compare(api, a, c, vision="0")) == [(0, 0, False)]


@pytest.mark.sqlite
def test_call_ids_take_no_part_in_same(api: ApiClient) -> None:
    a = run(("assistant", [tool_use("call_1", "grep", q="x")]), ("user", [tool_result("call_1")]))
    b = run(("assistant", [tool_use("toolu_9", "grep", q="x")]), ("user", [tool_result("toolu_9")]))
    assert pairs(compare(api, a, b)) == [(0, 0, True), (1, 1, True)]


@pytest.mark.sqlite
def test_rows_are_paged_500_at_a_time(api: ApiClient) -> None:
    rounds = [("user", [text(f"q{i}")]) for i in range(600)]
    a = run(*rounds)
    b = run(*rounds[:550], ("assistant", [text("extra")]), *rounds[550:])
    first = compare(api, a, b)
    assert (first["page"], first["pages"], first["total_rows"]) == (1, 2, 601)
    assert len(first["rows"]) == 500
    assert first["first_divergence"] == {"a_seq": None, "b_seq": 550}
    path = first["next"].replace("http://testserver", "")
    response = api.client.get(path, headers=api._headers(None))
    second = response.json()
    assert second["page"] == 2 and second["next"] is None
    assert [r["b_seq"] for r in second["rows"]][:2] == [500, 501]
    assert (None, 550, False) in pairs(second)
    gone = api.get(COMPARE, a=str(a.id), b=str(b.id), page="3")
    assert gone.status_code == 404 and gone.json()["field"] == "page"


@pytest.mark.sqlite
def test_empty_runs_compare(api: ApiClient) -> None:
    data = compare(api, run(), run())
    assert data["rows"] == [] and data["first_divergence"] is None
    assert (data["page"], data["pages"]) == (1, 1)
    assert data["a"]["duration_s"] is None


@pytest.mark.sqlite
@pytest.mark.parametrize(
    ("params", "status", "field"),
    [
        ({"b": "B"}, 400, "a"),
        ({"a": "A"}, 400, "b"),
        ({"a": "not-a-uuid", "b": "B"}, 400, "a"),
        ({"a": "A", "b": "<script>"}, 400, "b"),
        ({"a": str(uuid.UUID(int=1)), "b": "B"}, 404, "a"),
        ({"a": "A", "b": str(uuid.UUID(int=2))}, 404, "b"),
        ({"a": "A", "b": "B", "shape": "gemini"}, 400, "shape"),
        ({"a": "A", "b": "B", "vision": "maybe"}, 400, "vision"),
        ({"a": "A", "b": "B", "page": "0"}, 400, "page"),
    ],
)
def test_errors_name_the_field(api: ApiClient, params: dict[str, str], status: int, field: str):
    a, b = run(*task()), run(*task())
    query = {k: {"A": str(a.id), "B": str(b.id)}.get(v, v) for k, v in params.items()}
    response = api.get(COMPARE, **query)
    assert response.status_code == status
    body = response.json()
    assert body["field"] == field
    assert field in body["error"].split()[0] or field in body["error"]
    assert "<script>" not in body["error"]


@pytest.mark.sqlite
def test_compare_needs_a_token(anonymous_api: ApiClient) -> None:
    a, b = run(*task()), run(*task())
    response = anonymous_api.get(COMPARE, a=str(a.id), b=str(b.id))
    assert response.status_code == 401
    bad = ApiClient("not-a-token").get(COMPARE, a=str(a.id), b=str(b.id))
    assert bad.status_code == 401


@pytest.mark.sqlite
def test_the_api_refuses_other_methods(api: ApiClient) -> None:
    assert api.post(COMPARE, {}).status_code == 405


def imported(api: ApiClient, name: str) -> str:
    raw = (REAL / name).read_bytes()
    response = api.client.post(
        "/api/imports", raw, content_type="application/octet-stream", headers=api._headers(None)
    )
    assert response.status_code in (200, 201), response.content
    return str(response.json()["id"])


@pytest.mark.sqlite
def test_two_real_claude_code_sessions(api: ApiClient) -> None:
    from conversations.record.models.conversation import Block, Conversation

    a = imported(api, "claude_code_tool_heavy_parallel_interrupts.jsonl")
    b = imported(api, "claude_code_rejected_tool_use_interrupted.jsonl")
    data = api.get(COMPARE, a=a, b=b).json()
    assert_consistent(data)
    for side, cid in (("a", a), ("b", b)):
        conversation = Conversation.objects.get(pk=cid)
        assert data[side]["messages"] == conversation.message_count
        assert data[side]["errors"] == conversation.error_count
        uses = Block.objects.filter(message__conversation_id=cid, type="tool_use")
        assert sum(data[side]["tool_calls"].values()) == uses.count()
        context = api.get(f"/api/conversations/{cid}/context").json()
        assert data[side]["tokens"] == context["next_request"]["tokens"]
        by_seq = {m["seq"]: m["tokens"] for m in context["messages"]}
        shown = [r for r in data["rows"] if r[f"{side}_seq"] is not None]
        assert all(r[f"tokens_{side}"] == by_seq[r[f"{side}_seq"]] for r in shown)
        # Real Claude Code files record when each line was written.
        assert data[side]["duration_s"] is not None and data[side]["duration_s"] >= 0
    # Two different sessions part at once: the first message that is no same pair.
    first = data["first_divergence"]
    unsame = [r for r in data["rows"] if not r["same"]]
    assert first["a_seq"] == next(r["a_seq"] for r in unsame if r["a_seq"] is not None)
    itself = api.get(COMPARE, a=a, b=a).json()
    assert itself["first_divergence"] is None
    assert all(r["same"] for r in itself["rows"])


@pytest.mark.sqlite
def test_a_comparison_follows_appends_and_pages_align_once(api: ApiClient) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    messages = [("user", [text(f"q{i}")]) for i in range(700)]
    a, b = run(*messages), run(*messages)
    assert compare(api, a, b)["first_divergence"] is None
    with CaptureQueriesContext(connection) as second_page:
        assert compare(api, a, b, page="2")["page"] == 2

    # The alignment is kept: page 2 reads its own rows, not both runs' signatures again.
    def reads_signatures(sql: str) -> bool:
        return '"conversations_block"."type"' in sql and '"conversations_block"."text"' not in sql

    signatures = [q for q in second_page if reads_signatures(q["sql"])]
    assert signatures == []
    messages_append(conversation=b, messages=[MessageIn(role="assistant", blocks=[text("new")])])
    b.refresh_from_db()
    data = compare(api, a, b, page="2")
    assert data["first_divergence"] == {"a_seq": None, "b_seq": 700}
    assert pairs(data)[-1] == (None, 700, False)
