"""The conversation page's finder (docs/guide/dashboard.md): GET /c/ID/find — search hits, the next
block of a kind, the next problem — and the tool rounds a window holds one half of.

Every answer is bounded (a page of hits, one step of messages), refuses bad parameters
with a JSON 400 naming them, never carries markup, and stays inside a share link's scope.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from conversations.core.finder import Cursor
from conversations.record.models.conversation import Conversation
from conversations.record.reads import selectors
from conversations.record.schemas import MessageIn
from conversations.record.search import finder as finder_reads
from conversations.record.services.appending import block_append, messages_append
from conversations.record.services.conversations import conversation_create, conversation_update
from conversations.sharing.services import share_create, share_revoke
from tests.builders import png, text, tool_result, tool_use

pytestmark = pytest.mark.django_db


def stored(messages: list[tuple[str, list[dict[str, Any]]]], title: str = "Run") -> Conversation:
    """A conversation written through the batch service (one transaction, bulk inserts)."""
    conversation = conversation_create(title=title)
    messages_append(
        conversation=conversation,
        messages=[MessageIn.model_validate({"role": r, "blocks": b}) for r, b in messages],
    )
    conversation.refresh_from_db()
    return conversation


def rounds(count: int, *, error_at: int | None = None, unanswered_at: int | None = None) -> Any:
    """`count` messages: a call in each even one, its result in the next; the round that
    starts at `error_at` fails, the call at `unanswered_at` gets no result."""
    messages: list[tuple[str, list[dict[str, Any]]]] = []
    for seq in range(count):
        start = seq - seq % 2
        if seq % 2 == 0:
            messages.append(("assistant", [text(f"step {seq}"), tool_use(f"call-{seq}")]))
        elif start == unanswered_at:
            messages.append(("user", [text("the result never came")]))
        else:
            result = tool_result(f"call-{start}", f"output {start}", is_error=start == error_at)
            messages.append(("user", [result]))
    return messages


def find(client: Client, conversation: Conversation, **params: Any) -> Any:
    response = client.get(f"/c/{conversation.id}/find", params)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    return orjson.loads(response.content)


# -- problems: n / N -------------------------------------------------------------------------


def test_next_problem_is_the_one_failing_tool_call_far_outside_the_window(
    operator_client: Client,
) -> None:
    conversation = stored(rounds(2000, error_at=150))
    body = find(operator_client, conversation, kind="problem", after="1899")
    assert body == {"found": None, "resume": None}  # nothing from the window to the end
    body = find(operator_client, conversation, kind="problem")  # from the start: one step
    assert body["found"] == {
        "seq": 151,
        "block": 0,
        "type": "tool_result",
        "what": "error",
        "call_id": "call-150",
    }
    # And backwards from the tail, in one lookup too (the marks, docs/api.md, Search).
    body = find(operator_client, conversation, kind="problem", before="1900")
    assert body["found"]["seq"] == 151 and body["resume"] is None


@pytest.mark.sqlite
def test_problems_and_errors_are_one_lookup_from_anywhere(
    django_assert_num_queries: Any,
) -> None:
    conversation = stored(rounds(3000, error_at=2850, unanswered_at=40))
    with django_assert_num_queries(2):  # is it scoped? then the marks' index
        step = finder_reads.find_step(conversation, "problem", after=Cursor(41))
    assert step == finder_reads.Step(
        finder_reads.Found(2851, 0, "tool_result", "error", "call-2850"), None
    )
    with django_assert_num_queries(2):
        step = finder_reads.find_step(conversation, "problem", before=Cursor(2851))
    assert step.found == finder_reads.Found(40, 1, "tool_use", "unanswered", "call-40")
    with django_assert_num_queries(1):  # errors need no scope check
        step = finder_reads.find_step(conversation, "error", before=Cursor(2999))
    assert step.found is not None and step.found.seq == 2851


@pytest.mark.sqlite
def test_a_result_arriving_later_answers_the_call(operator_client: Client) -> None:
    conversation = stored(rounds(6, unanswered_at=2))
    assert find(operator_client, conversation, kind="problem")["found"]["seq"] == 2
    message = selectors.message_get(conversation, 3)
    assert message is not None
    block_append(
        message=message,
        block=MessageIn.model_validate(
            {"role": "user", "blocks": [tool_result("call-2", "late")]}
        ).blocks[0],
    )
    assert find(operator_client, conversation, kind="problem")["found"] is None
    # A call answered in the same batch that makes it is never a problem; one answered by
    # a later batch stops being one.
    messages_append(
        conversation=conversation,
        messages=[
            MessageIn.model_validate({"role": "assistant", "blocks": [tool_use("call-a")]}),
            MessageIn.model_validate({"role": "user", "blocks": [tool_result("call-a", "x")]}),
            MessageIn.model_validate({"role": "assistant", "blocks": [tool_use("call-b")]}),
        ],
    )
    assert find(operator_client, conversation, kind="problem")["found"]["call_id"] == "call-b"
    messages_append(
        conversation=conversation,
        messages=[
            MessageIn.model_validate({"role": "user", "blocks": [tool_result("call-b", "y")]})
        ],
    )
    assert find(operator_client, conversation, kind="problem")["found"] is None


@pytest.mark.sqlite
def test_under_a_scope_a_call_answered_past_it_is_a_problem() -> None:
    conversation = stored(rounds(10))
    scoped = Conversation.objects.get(pk=conversation.pk)
    scoped.message_count = 5  # as a share link up to message 4 scopes it
    step = finder_reads.find_step(scoped, "problem")
    assert step.found == finder_reads.Found(4, 1, "tool_use", "unanswered", "call-4")
    assert finder_reads.find_step(conversation, "problem").found is None


def test_a_tool_call_without_a_result_anywhere_is_a_problem(operator_client: Client) -> None:
    conversation = stored(rounds(40, unanswered_at=20))
    body = find(operator_client, conversation, kind="problem")
    assert body["found"] == {
        "seq": 20,
        "block": 1,
        "type": "tool_use",
        "what": "unanswered",
        "call_id": "call-20",
    }
    # A result earlier in the conversation answers a call too (no result with that id at all
    # is what makes a call unanswered), and past it there is nothing more.
    assert find(operator_client, conversation, kind="problem", after="20.1")["found"] is None


def test_problems_step_block_by_block_and_both_ways(operator_client: Client) -> None:
    messages = rounds(10)
    messages[3] = (
        "user",
        [tool_result("call-2", "a", is_error=True), tool_result("x", "b", is_error=True)],
    )
    conversation = stored(messages)
    found = [find(operator_client, conversation, kind="problem")["found"]]
    found.append(find(operator_client, conversation, kind="problem", after="3.0")["found"])
    assert [(f["seq"], f["block"]) for f in found] == [(3, 0), (3, 1)]
    assert find(operator_client, conversation, kind="problem", after="3.1")["found"] is None
    back = find(operator_client, conversation, kind="problem", before="3.1")["found"]
    assert (back["seq"], back["block"]) == (3, 0)
    assert find(operator_client, conversation, kind="problem", before="3.0")["found"] is None


def test_a_step_reads_a_bounded_span_and_says_where_to_go_on(
    operator_client: Client, monkeypatch: pytest.MonkeyPatch, django_assert_num_queries: Any
) -> None:
    monkeypatch.setattr(finder_reads, "SCAN_MESSAGES", 50)
    # Under a share link's scope problems step (a call answered past it is unanswered).
    conversation = stored(rounds(300, error_at=220))
    Conversation.objects.filter(pk=conversation.pk).update(message_count=301)
    # The scope check, the candidates, then which calls have results.
    with django_assert_num_queries(3):
        assert finder_reads.find_step(conversation, "problem") == finder_reads.Step(
            None, Cursor(49)
        )
    step, steps = finder_reads.find_step(conversation, "problem"), 1
    while step.found is None and step.resume is not None:
        step, steps = finder_reads.find_step(conversation, "problem", after=step.resume), steps + 1
    assert step.found is not None
    assert step.found.seq == 221 and steps == 5  # 0–49, 50–99, … 200–249
    # The page's finder walks the same steps through /find for the kinds that step.
    body = find(operator_client, conversation, kind="reasoning", after="10")
    assert body == {"found": None, "resume": "60"}


def test_candidates_per_step_are_bounded_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(finder_reads, "SCAN_BLOCKS", 3)
    conversation = stored(rounds(20, error_at=16))
    conversation.message_count = 19  # scoped: problems step
    step = finder_reads.find_step(conversation, "problem")
    # Three answered calls read, none a problem: go on after the third.
    assert step == finder_reads.Step(None, Cursor(4, 1))
    while step.found is None:
        step = finder_reads.find_step(conversation, "problem", after=step.resume)
    assert (step.found.seq, step.found.what) == (17, "error")


@pytest.mark.parametrize(
    ("kind", "seq", "block"),
    [("error", 7, 0), ("tool", 2, 0), ("reasoning", 4, 1), ("image", 6, 1)],
)
def test_each_filter_finds_its_kind_beyond_a_place(
    operator_client: Client, kind: str, seq: int, block: int
) -> None:
    conversation = stored(
        [
            ("user", [text("hello")]),
            ("assistant", [text("no tools here")]),
            ("assistant", [tool_use("c1")]),
            ("user", [tool_result("c1")]),
            ("assistant", [text("think"), {"type": "reasoning", "text": "hm"}]),
            ("assistant", [tool_use("c2")]),
            ("user", [text("look"), png()]),
            ("user", [tool_result("c2", "boom", is_error=True)]),
        ]
    )
    found = find(operator_client, conversation, kind=kind, after="1")["found"]
    assert (found["seq"], found["block"]) == (seq, block)
    assert found["what"] == ("error" if kind == "error" else found["type"])


# -- search ----------------------------------------------------------------------------------


@pytest.mark.sqlite
def test_search_finds_hits_across_the_whole_conversation_a_page_at_a_time(
    operator_client: Client,
) -> None:
    messages = [
        ("user", [text(f"needle number {seq}" if seq % 40 == 0 else f"hay {seq}")])
        for seq in range(2000)
    ]
    conversation = stored(messages)
    first = find(operator_client, conversation, kind="text", q="NEEDLE")
    assert first["total"] == 50 and first["capped"] is False
    assert first["offset"] == 0 and first["more"] is True
    assert [h["seq"] for h in first["hits"]] == list(range(0, 1000, 40))
    assert first["hits"][1] == {
        "seq": 40,
        "block": 0,
        "type": "text",
        "is_error": False,
        "snippet": "needle number 40",
    }
    rest = find(operator_client, conversation, kind="text", q="needle", after="960.0")
    assert [h["seq"] for h in rest["hits"]] == list(range(1000, 2000, 40))
    assert rest["offset"] == 25 and rest["more"] is False
    # Backwards: the page just before a place, in order, with its offset.
    back = find(operator_client, conversation, kind="text", q="needle", before="1960")
    assert [h["seq"] for h in back["hits"]] == list(range(960, 1960, 40))
    assert back["offset"] == 24 and back["more"] is True
    last = find(operator_client, conversation, kind="text", q="needle", before="999999999")
    assert last["hits"][-1]["seq"] == 1960 and last["offset"] == 25
    # Word prefixes, as the list's search.
    assert find(operator_client, conversation, kind="text", q="numb 1920")["total"] == 1


@pytest.mark.sqlite
def test_search_covers_tool_names_inputs_and_results(operator_client: Client) -> None:
    conversation = stored(
        [
            ("assistant", [tool_use("c1", "read_log", service="payments")]),
            ("user", [tool_result("c1", "permission denied", is_error=True)]),
        ]
    )
    hits = find(operator_client, conversation, kind="text", q="payments")["hits"]
    assert [(h["seq"], h["type"]) for h in hits] == [(0, "tool_use")]
    hits = find(operator_client, conversation, kind="text", q="denied")["hits"]
    assert [(h["seq"], h["is_error"]) for h in hits] == [(1, True)]


@pytest.mark.sqlite
def test_search_counts_are_capped(operator_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(finder_reads, "COUNT_CAP", 30)
    conversation = stored([("user", [text(f"same word {seq}")]) for seq in range(40)])
    body = find(operator_client, conversation, kind="text", q="same", after="34")
    assert body["total"] == 30 and body["capped"] is True
    assert body["offset"] is None  # 35 hits before: more than are counted
    assert [h["seq"] for h in body["hits"]] == [35, 36, 37, 38, 39]


@pytest.mark.sqlite
def test_a_word_common_in_the_conversation_is_walked_with_the_same_pages(
    operator_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages = [("user", [text(f"same word {seq}"), text("other")]) for seq in range(60)]
    messages[7] = ("user", [text("other"), text("same again")])
    conversation = stored(messages)
    asks = [{}, {"after": "7"}, {"after": "7.0"}, {"before": "40"}, {"before": "7.1"}]
    held = [find(operator_client, conversation, kind="text", q="same", **a) for a in asks]
    monkeypatch.setattr(finder_reads, "HITS_HELD", 5)  # more hits than that: walked
    walked = [find(operator_client, conversation, kind="text", q="same", **a) for a in asks]
    assert walked == held
    assert [h["seq"] for h in held[1]["hits"]][:2] == [8, 9]
    assert (held[2]["hits"][0]["seq"], held[2]["hits"][0]["block"]) == (7, 1)
    assert held[3]["offset"] == 15 and held[3]["hits"][-1]["seq"] == 39


def test_hostile_snippets_are_text_in_json_never_markup(operator_client: Client) -> None:
    hostile = '<script>alert(1)</script><img src=x onerror=alert(2)> hx-get="/admin/" & co'
    conversation = stored([("user", [text(hostile)])])
    response = operator_client.get(f"/c/{conversation.id}/find", {"kind": "text", "q": "alert"})
    raw = response.content.decode()
    assert "<" not in raw and ">" not in raw and "&" not in raw
    assert response["X-Content-Type-Options"] == "nosniff"
    assert orjson.loads(response.content)["hits"][0]["snippet"] == hostile


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"kind": "text", "q": "x" * 201}, "q"),
        ({"kind": "text", "q": " ".join(f"w{i}" for i in range(17))}, "q"),
        ({"kind": "text"}, "q"),
        ({"kind": "text", "q": "   "}, "q"),
        ({}, "kind"),
        ({"kind": "<b>everything</b>"}, "kind"),
        ({"kind": "problem", "after": "-1"}, "after"),
        ({"kind": "problem", "after": "1.2.3"}, "after"),
        ({"kind": "problem", "before": "1e3"}, "before"),
        ({"kind": "problem", "after": "1234567890"}, "after"),
        ({"kind": "problem", "after": "1", "before": "3"}, "after"),
    ],
)
def test_bad_parameters_are_a_400_naming_them(
    operator_client: Client, params: dict[str, str], field: str
) -> None:
    conversation = stored([("user", [text("hello")])])
    response = operator_client.get(f"/c/{conversation.id}/find", params)
    assert response.status_code == 400
    body = orjson.loads(response.content)
    assert body["field"] == field and field in body["error"]
    assert "<b>" not in response.content.decode()


def test_punctuation_only_finds_nothing(operator_client: Client) -> None:
    conversation = stored([("user", [text("hello")])])
    body = find(operator_client, conversation, kind="text", q="?!")
    assert body == {"hits": [], "offset": None, "total": 0, "capped": False, "more": False}


def test_find_is_for_operators(client: Client, outsider_client: Client) -> None:
    conversation = stored([("user", [text("hello")])])
    url = f"/c/{conversation.id}/find?kind=problem"
    assert client.get(url).status_code == 302  # to sign in
    assert outsider_client.get(url).status_code == 403


def test_unknown_conversation_is_404(operator_client: Client) -> None:
    url = "/c/00000000-0000-0000-0000-000000000000/find?kind=problem"
    assert operator_client.get(url).status_code == 404


# -- tool rounds on the page -----------------------------------------------------------------

PAIRS = re.compile(r'<div class="tool-pairs" hidden data-results="([^"]*)" data-calls="([^"]*)">')


def pairs_of(html: str) -> list[tuple[dict[str, int], dict[str, int]]]:
    from html import unescape

    return [(orjson.loads(unescape(r)), orjson.loads(unescape(c))) for r, c in PAIRS.findall(html)]


def test_a_window_says_where_the_other_half_of_its_rounds_is(operator_client: Client) -> None:
    # The page opens on the last 100 messages (201–300): the call of the result at 201 is
    # before it, the calls at 298 and 300 have no result, and a call at 250 is answered
    # far before it, by a result at 10.
    messages = rounds(301, unanswered_at=298)
    messages[10] = ("user", [tool_result("early", "answered before it was asked")])
    messages[250] = ("assistant", [tool_use("early")])
    conversation = stored(messages)
    html = operator_client.get(f"/c/{conversation.id}/").content.decode()
    ((results, calls),) = pairs_of(html)
    assert results == {"early": 10}  # call-298 and call-300: not listed, so marked
    assert calls == {"call-200": 200}
    assert 'data-call-id="call-298"' in html and '<a class="call-id">id call-298</a>' in html
    # A window further back resolves its own edges.
    window = operator_client.get(
        f"/c/{conversation.id}/messages", {"around": "50", "vision": "1", "shape": "openai"}
    ).content.decode()
    ((results, calls),) = pairs_of(window)
    assert results == {} and calls == {"early": 250}


def test_hostile_call_ids_are_escaped_in_pairs_and_blocks(operator_client: Client) -> None:
    hostile = '"><script>alert(1)</script>'
    messages = [("assistant", [tool_use(hostile)])] + [("user", [text("x")])] * 120
    messages.append(("user", [tool_result(hostile, "late")]))
    conversation = stored(messages)
    html = operator_client.get(f"/c/{conversation.id}/").content.decode()
    assert "<script>alert(1)" not in html
    ((results, calls),) = pairs_of(html)
    assert calls == {hostile: 0}


# -- share links: the finder inside the link's scope -----------------------------------------


def test_a_frozen_link_finds_nothing_past_its_last_message() -> None:
    conversation = stored(rounds(100, error_at=80) + [("user", [text("secret needle")])])
    _, token = share_create(conversation=conversation, up_to_seq=40)
    base = f"/s/{token}/c/{conversation.id}/find"
    stranger = Client()

    def get(**params: Any) -> Any:
        response = stranger.get(base, params)
        assert response.status_code == 200, response.content
        return orjson.loads(response.content)

    # The error at 81 is past the link; so is the result of the call at 40, which the
    # link therefore shows as a call without a result.
    assert get(kind="problem")["found"]["seq"] == 40
    assert get(kind="problem", after="40.1") == {"found": None, "resume": None}
    assert get(kind="problem", before="999999999")["found"]["seq"] == 40
    assert get(kind="error", after="10")["found"] is None
    assert get(kind="text", q="secret")["total"] == 0
    assert get(kind="text", q="output", before="999999999")["hits"][-1]["seq"] == 39
    page = stranger.get(f"/s/{token}/").content.decode()
    # The call at 40 has its result at 41, past the link: the page does not say where.
    assert pairs_of(page) == [] and 'data-call-id="call-40"' in page


def test_a_live_link_finds_across_the_conversation_and_only_its_own() -> None:
    conversation = stored(rounds(200, error_at=150))
    other = stored(rounds(20, error_at=2), title="Other")
    _, token = share_create(conversation=conversation)
    found = orjson.loads(Client().get(f"/s/{token}/c/{conversation.id}/find?kind=problem").content)
    assert found["found"]["seq"] == 151
    response = Client().get(f"/s/{token}/c/{other.id}/find?kind=problem")
    assert response.status_code == 404
    assert response["Cache-Control"] == "no-store"


def test_a_revoked_link_finds_nothing() -> None:
    conversation = stored(rounds(10, error_at=2))
    link, token = share_create(conversation=conversation)
    share_revoke(link=link)
    assert Client().get(f"/s/{token}/c/{conversation.id}/find?kind=problem").status_code == 410


# -- bounded by the indexes ------------------------------------------------------------------


def plans(work: Any) -> list[tuple[str, str]]:
    """(SQL, SQLite's query plan) of each query `work` runs."""
    with CaptureQueriesContext(connection) as captured:
        work()
    out = []
    for query in captured.captured_queries:
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN QUERY PLAN " + query["sql"])
            out.append((query["sql"], " | ".join(row[-1] for row in cursor.fetchall())))
    return out


@pytest.mark.sqlite(only=True)  # SQLite's planner
def test_call_ids_are_looked_up_through_their_index_not_the_conversation() -> None:
    conversation = stored(rounds(200, unanswered_at=100))
    rows = selectors.preview_rows(conversation, range(151, 199))  # halves of 2 rounds
    found = plans(lambda: finder_reads.tool_pairs(conversation, rows))
    found += plans(lambda: finder_reads.answered(conversation, ["call-100", "call-2"]))
    assert len(found) == 3
    for sql, plan in found:
        assert "USING INDEX block_call_id" in plan, plan
        assert "conversation_id=?" not in plan, plan  # the conversation is checked per block
        assert '"conversations_conversation"' not in sql


@pytest.mark.sqlite(only=True)  # SQLite's planner
def test_a_step_walks_a_range_of_messages_by_their_index() -> None:
    conversation = stored(rounds(20))
    ((sql, plan),) = plans(lambda: finder_reads.find_step(conversation, "tool", after=Cursor(3)))
    assert "(conversation_id=? AND seq>? AND seq<?)" in plan, plan
    assert "message_id=?" in plan and '"conversations_conversation"' not in sql
    # Problems: whether the conversation is scoped, then the marks' own index.
    (_, (sql, plan)) = plans(
        lambda: finder_reads.find_step(conversation, "problem", after=Cursor(3))
    )
    assert "conversations_findermark USING INDEX" in plan, plan
    assert "(conversation_id=? AND message_seq>?" in plan, plan


# -- compactions: n / N step to them too (docs/contract.md §7) ------------------------------


def with_boundaries(conversation: Conversation, *seqs: int) -> Conversation:
    marks = [{"kind": "compact_boundary", "trigger": "auto", "seq": seq} for seq in seqs]
    return conversation_update(
        conversation=conversation,
        title=conversation.title,
        metadata=conversation.metadata | {"compact_boundaries": marks},
    )


def test_n_and_shift_n_step_to_compactions_between_problems(operator_client: Client) -> None:
    conversation = with_boundaries(stored(rounds(40, error_at=20)), 10, 30)
    places = []
    after = None
    while True:  # forward from the start, through every step
        body = find(
            operator_client, conversation, kind="problem", **({"after": after} if after else {})
        )
        if body["found"] is None and body["resume"] is None:
            break
        if body["found"] is None:
            after = body["resume"]
            continue
        places.append((body["found"]["seq"], body["found"]["what"]))
        after = f"{body['found']['seq']}.{body['found']['block']}"
    assert places == [(10, "compaction"), (21, "error"), (30, "compaction")]
    body = find(operator_client, conversation, kind="problem", before="30")
    assert (body["found"]["seq"], body["found"]["what"]) == (21, "error")
    body = find(operator_client, conversation, kind="problem", before="30.1")
    assert body["found"] == {
        "seq": 30,
        "block": 0,
        "type": "compaction",
        "what": "compaction",
        "call_id": "",
    }
    body = find(operator_client, conversation, kind="problem", before="21.0")
    assert (body["found"]["seq"], body["found"]["what"]) == (10, "compaction")


def test_a_compaction_beyond_a_step_waits_for_the_step_that_reaches_it(
    operator_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(finder_reads, "SCAN_MESSAGES", 10)
    conversation = with_boundaries(stored(rounds(40)), 25)
    # Problems are one lookup of the marks: the boundary is found from anywhere at once.
    body = find(operator_client, conversation, kind="problem")
    assert body["found"]["seq"] == 25 and body["found"]["what"] == "compaction"
    # Under a scope problems step, and the boundary waits for the step that reaches it.
    conversation.message_count = 39
    assert finder_reads.find_step(conversation, "problem") == finder_reads.Step(None, Cursor(9))
    step = finder_reads.find_step(conversation, "problem", after=Cursor(19))
    assert step.found is not None and step.found.seq == 25
    body = find(operator_client, conversation, kind="problem", after="19")
    assert body["found"]["seq"] == 25
    # A boundary at the last message a step looked at is found in that step.
    conversation = with_boundaries(stored(rounds(40)), 9)
    body = find(operator_client, conversation, kind="problem")
    assert body["found"]["seq"] == 9
