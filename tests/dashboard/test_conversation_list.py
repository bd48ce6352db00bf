"""The conversation list's filters and columns (docs/guide/dashboard.md): "has errors", "unanswered
tool call" and the model, kept on each conversation's row by the one write path, backfilled by
migration 0008, filtered through partial indexes on both databases, on the page, in the API and in
the live rows."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from conversations.core import list_status
from conversations.ingest.file_follower import Tail
from conversations.ingest.following import message_in
from conversations.ingest.imports import transcript_import
from conversations.live import fragments
from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.search import reads as search_reads
from conversations.record.services.appending import block_append, message_append, messages_append
from conversations.record.services.conversations import conversation_create
from tests.builders import stored as store
from tests.builders import text, tool_result, tool_use
from tests.conftest import ApiClient
from tests.dashboard.test_views import list_rows, page, parse
from tests.taildata import COMPACT, PARALLEL, REJECTED, conversation_of, lines
from tests.taildata import append as append_line

LIST = "/api/conversations"


def add(conversation: Conversation, seq: int, block: dict[str, Any]) -> None:
    block_append(
        message=Message.objects.get(conversation=conversation, seq=seq),
        block=BLOCK_ADAPTER.validate_python(block),
    )


def error(call_id: str) -> dict[str, Any]:
    return tool_result(call_id, "boom", is_error=True)


def recomputed(conversation: Conversation) -> tuple[int, int, str]:
    """(errors, unanswered calls, model) read from the whole record, as the columns mean."""
    messages = list(Message.objects.filter(conversation=conversation).order_by("seq"))
    errors = Block.objects.filter(message__conversation=conversation, is_error=True).count()
    unanswered = 0
    if messages:
        last = Block.objects.filter(message=messages[-1]).order_by("seq")
        unanswered = len(list_status.open_calls((b.type, b.call_id) for b in last))  # type: ignore[misc]
    return errors, unanswered, list_status.latest_model(m.metadata for m in messages)


def columns(conversation: Conversation) -> tuple[int, int, str]:
    row = Conversation.objects.get(pk=conversation.pk)
    return row.error_count, row.unanswered_calls, row.model


# -- the write path keeps the columns --------------------------------------------------


def test_the_columns_follow_messages_and_blocks(db: None) -> None:
    c = store("Run", ("user", [text("go")], {}))
    assert columns(c) == (0, 0, "")
    c = store("Run 2", ("assistant", [tool_use("a"), tool_use("b")], {"model": "claude-x"}))
    assert columns(c) == (0, 2, "claude-x")
    add(c, 0, error("a"))
    assert columns(c) == (1, 1, "claude-x")
    add(c, 0, tool_result("a"))  # "a" is closed already
    assert columns(c) == (1, 1, "claude-x")
    message_append(
        conversation=c,
        role="user",
        blocks=[BLOCK_ADAPTER.validate_python(error("b"))],
        metadata={"source": "no model here"},
    )
    assert columns(c) == (2, 0, "claude-x")  # the latest model named is kept
    add(c, 0, tool_use("late"))  # not the last message: its calls no longer count
    assert columns(c) == (2, 0, "claude-x")
    add(c, 1, tool_use("c"))
    assert columns(c) == (2, 1, "claude-x")
    message_append(
        conversation=c, role="assistant", blocks=[], metadata={"gen_ai.response.model": "gpt-y"}
    )
    assert columns(c) == (2, 0, "gpt-y")


def test_a_batch_counts_every_error_and_the_last_messages_calls(db: None) -> None:
    c = conversation_create(title="Batch")
    messages_append(
        conversation=c,
        messages=[
            message_in("assistant", [tool_use("a")], {"model": "m-1"}, "m"),
            message_in("user", [error("a")], {}, "m"),
            message_in("assistant", [tool_use("b"), tool_use("c")], {"model": "m-2"}, "m"),
            message_in("user", [error("b")], {}, "m"),
            message_in(
                "assistant", [tool_use("d"), tool_result("d"), tool_use("e")], {"model": "m-3"}, "m"
            ),
        ],
    )
    assert columns(c) == (2, 1, "m-3") == recomputed(c)


def test_the_columns_agree_with_the_record_after_any_appends(db: None) -> None:
    """A random walk of messages and blocks appended anywhere: after each step the row says
    what the record does."""
    chooser = random.Random(11)
    c = conversation_create(title="Walk")
    ids = ["a", "b", "c"]
    blocks = [
        lambda: text("t"),
        lambda: tool_use(chooser.choice(ids)),
        lambda: tool_result(chooser.choice(ids)),
        lambda: error(chooser.choice(ids)),
    ]
    for _ in range(60):
        count = Conversation.objects.get(pk=c.pk).message_count
        if count == 0 or chooser.random() < 0.35:
            metadata = {"model": chooser.choice(["m-1", "m-2"])} if chooser.random() < 0.3 else {}
            role = chooser.choice(["user", "assistant"])
            made = [chooser.choice(blocks)() for _ in range(chooser.randrange(3))]
            message_append(
                conversation=c,
                role=role,
                blocks=[BLOCK_ADAPTER.validate_python(b) for b in made],
                metadata=metadata,
            )
        else:
            seq = chooser.randrange(count) if chooser.random() < 0.3 else count - 1
            add(c, seq, chooser.choice(blocks)())
        assert columns(c) == recomputed(c)


@pytest.mark.parametrize("source", [REJECTED, PARALLEL, COMPACT], ids=lambda p: p.stem)
def test_a_session_followed_line_by_line_keeps_the_columns_its_import_gets(
    db: None, tmp_path: Path, source: Path
) -> None:
    """`tail` grows the latest message block by block and merges its provenance (the
    model among it); the row ends as the same file imported in one batch does."""
    target = tmp_path / source.name
    tail = Tail(tmp_path)
    for line in lines(source):
        append_line(target, line)
        tail.discover()
        tail.poll()
    followed = conversation_of(target)
    assert columns(followed) == recomputed(followed)
    assert columns(followed)[2].startswith("claude")
    outcome = transcript_import(
        raw=source.read_bytes(), format="claude-code", title=None, file_name=None
    )
    assert columns(outcome.conversation) == columns(followed)


def test_an_imported_request_body_shows_its_model(operator_client: Client, db: None) -> None:
    body = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}
    outcome = transcript_import(
        raw=orjson.dumps(body), format="anthropic", title="Imported", file_name=None
    )
    assert outcome.conversation.model == ""  # no message names one: the body's is shown
    (row,) = list_rows(page(operator_client.get("/")))
    assert row.find("td", "model").text == "claude-sonnet-4-5"


def test_model_names_are_read_as_text_and_cut() -> None:
    assert list_status.model_of({"model": "  m  "}) == "m"
    assert list_status.model_of({"model": 3, "gen_ai.request.model": "req"}) == "req"
    assert list_status.model_of({"gen_ai.request.model": "r", "gen_ai.response.model": "s"}) == "s"
    assert list_status.model_of({"model": ""}) == "" == list_status.model_of(None)
    assert len(list_status.model_of({"model": "x" * 500})) == list_status.MODEL_CHARS


# -- the page --------------------------------------------------------------------------


@pytest.fixture
def three(db: None) -> dict[str, Conversation]:
    """One of each: with an error result, ending in an open call, and neither."""
    return {
        "errors": store(
            "Deploy failed", ("assistant", [tool_use("a")], {}), ("user", [error("a")], {})
        ),
        "open": store("Deploy waiting", ("assistant", [tool_use("b")], {"model": "gpt-5"})),
        "fine": store("Deploy fine", ("user", [text("all good")], {})),
    }


def titles(response: Any) -> set[str]:
    return {row.find("a").text for row in list_rows(page(response))}


def test_the_filters_narrow_the_list(operator_client: Client, three: Any) -> None:
    assert titles(operator_client.get("/")) == {"Deploy failed", "Deploy waiting", "Deploy fine"}
    assert titles(operator_client.get("/", {"has_errors": "1"})) == {"Deploy failed"}
    assert titles(operator_client.get("/", {"unanswered": "1"})) == {"Deploy waiting"}
    assert titles(operator_client.get("/", {"has_errors": "1", "unanswered": "1"})) == set()
    add(three["errors"], 1, tool_use("z"))
    assert titles(operator_client.get("/", {"has_errors": "1", "unanswered": "1"})) == {
        "Deploy failed"
    }


@pytest.mark.sqlite
def test_the_filters_combine_with_the_search(operator_client: Client, three: Any) -> None:
    store("Other failure", ("user", [error("x")], {}))
    assert titles(operator_client.get("/", {"has_errors": "1"})) == {
        "Deploy failed",
        "Other failure",
    }
    assert titles(operator_client.get("/", {"has_errors": "1", "q": "deploy"})) == {"Deploy failed"}
    root = page(operator_client.get("/", {"unanswered": "1", "q": "other"}))
    assert list_rows(root) == []
    assert root.find(cls="empty").text == "No conversation matches “other” with these filters."


def test_the_form_shows_the_filters_that_are_on(operator_client: Client, three: Any) -> None:
    root = page(operator_client.get("/", {"unanswered": "1"}))
    boxes = {
        n.attrs["name"]: n for n in root.find_all("input") if n.attrs.get("type") == "checkbox"
    }
    assert set(boxes) == {"has_errors", "unanswered", "alerts"}  # alerts: docs/contract.md §11
    assert "checked" in boxes["unanswered"].attrs and "checked" not in boxes["has_errors"].attrs
    assert "checked" not in boxes["alerts"].attrs and boxes["alerts"].attrs["value"] == "open"
    assert boxes["has_errors"].attrs["value"] == boxes["unanswered"].attrs["value"] == "1"
    form = root.find("form", "list-search")
    assert form.attrs["hx-replace-url"] == "true" and "hx-push-url" not in form.attrs
    # A filtered page is not live: a row arriving live is not checked against the filter.
    assert "ws-connect" not in root.by_id("results").attrs  # type: ignore[union-attr]
    assert "ws-connect" in page(operator_client.get("/")).by_id("results").attrs  # type: ignore[union-attr]


@pytest.mark.sqlite
def test_paging_keeps_the_search_and_the_filters(operator_client: Client, db: None) -> None:
    for n in range(27):
        store(f"Failing {n:02d}", ("user", [error("x")], {}))
    store("Failing but fine", ("user", [text("ok")], {}))
    first = page(operator_client.get("/", {"has_errors": "1", "q": "failing"}))
    older = first.find("nav", "pager").find("a")
    assert older.text == "Older →"
    assert older.attrs["href"] == "?q=failing&has_errors=1&page=2"
    second = page(operator_client.get("/" + str(older.attrs["href"])))
    assert len(list_rows(second)) == 2
    newer = second.find("nav", "pager").find("a")
    assert newer.attrs["href"] == "?q=failing&has_errors=1&page=1"


@pytest.mark.parametrize("name", ["has_errors", "unanswered"])
def test_a_bad_filter_value_is_a_400_naming_it(
    operator_client: Client, db: None, name: str
) -> None:
    response = operator_client.get("/", {name: "<b>yes</b>"})
    assert response.status_code == 400
    body = response.content.decode()
    assert f"{name} must be 1, 0, true or false" in body
    assert "<b>yes</b>" not in body and "&lt;b&gt;yes&lt;/b&gt;" in body


def test_rows_show_model_messages_and_errors(operator_client: Client, three: Any) -> None:
    Conversation.objects.filter(pk=three["fine"].pk).update(message_count=1234567)
    rows = {r.find("a").text: r for r in list_rows(page(operator_client.get("/")))}
    head = [th.text for th in parse(operator_client.get("/").content).find_all("th")]
    assert head == ["Title", "Model", "Messages", "Errors", "Last activity", "Last turn"]

    def cells(title: str) -> list[str]:
        return [td.text.strip() for td in rows[title].find_all("td")][1:4]

    assert cells("Deploy failed") == ["", "2", "1"]
    assert cells("Deploy waiting") == ["gpt-5", "1", ""]
    assert cells("Deploy fine") == ["", "1,234,567", ""]


def test_a_hostile_model_name_is_text(operator_client: Client, db: None) -> None:
    store("Hostile", ("assistant", [text("hi")], {"model": '<img src=x onerror="alert(1)">'}))
    body = operator_client.get("/").content.decode()
    assert "<img src=x" not in body
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in body


@pytest.mark.sqlite
def test_search_finds_tool_names_and_inputs_and_links_the_message(
    operator_client: Client, db: None
) -> None:
    c = store(
        "Tools",
        ("user", [text("find it")], {}),
        ("assistant", [text("on it"), tool_use("c1", "kubectl_rollout", namespace="zephyr")], {}),
    )
    for q in ("kubectl_rollout", "zephyr"):
        (row,) = list_rows(page(operator_client.get("/", {"q": q})))
        hit = row.find("p", "hit")
        assert hit.find("a").attrs["href"] == f"/c/{c.pk}/#m-1"
        assert hit.find("a").text == "message 1"
        assert 'kubectl_rollout {"namespace":"zephyr"}' in hit.find("span", "snippet").text


# -- the live rows ----------------------------------------------------------------------


def test_the_live_row_is_the_pages_row(operator_client: Client, three: Any) -> None:
    from tests.live.test_consumers import rows

    listed = rows(operator_client.get("/").content.decode())
    for conversation in three.values():
        live = fragments.row_html(str(conversation.pk))
        assert rows(live) == {str(conversation.pk): listed[str(conversation.pk)]}
    live = fragments.row_html(str(three["open"].pk))
    assert '<td class="model">gpt-5</td>' in live and "unanswered tool call" in live
    assert '<td class="errors">1</td>' in fragments.row_html(str(three["errors"].pk))


# -- the API -----------------------------------------------------------------------------


def api_titles(api: ApiClient, **query: str) -> set[str]:
    response = api.get(LIST, **query)
    assert response.status_code == 200, response.content
    return {r["title"] for r in response.json()["results"]}


def test_the_api_list_takes_the_same_filters(api: ApiClient, three: Any) -> None:
    assert api_titles(api, has_errors="1") == {"Deploy failed"}
    assert api_titles(api, unanswered="true") == {"Deploy waiting"}
    assert api_titles(api, unanswered="0") == {"Deploy failed", "Deploy waiting", "Deploy fine"}
    assert api_titles(api, has_errors="1", q="waiting") == set()
    for n in range(3):
        store(f"Failing {n}", ("user", [error("x")], {}))
    body = api.get(LIST, has_errors="1", page_size="2").json()
    assert body["count"] == 4
    assert "has_errors=1" in body["next"]


def test_a_bad_filter_is_a_400_naming_it_in_the_api(api: ApiClient, db: None) -> None:
    response = api.get(LIST, has_errors="maybe")
    assert response.status_code == 400
    assert response.json()["field"] == "has_errors"
    assert "has_errors must be 1, 0, true or false" in response.json()["error"]


# -- bounded: each filter reads its partial index ----------------------------------------


@pytest.mark.sqlite
@pytest.mark.parametrize(
    ("filters", "index"),
    [
        ({"has_errors": True}, "conversation_has_errors"),
        ({"unanswered": True}, "conversation_unanswered"),
    ],
)
def test_a_filtered_page_reads_its_partial_index(
    db: None, filters: dict[str, bool], index: str
) -> None:
    for n in range(40):
        store(f"c{n}", ("assistant", [tool_use("a")] if n % 5 else [error("a")], {}))
    found = search_reads.conversation_list(**filters)  # type: ignore[arg-type]
    sql, params = found[:25].query.sql_with_params()
    count_sql, count_params = found.order_by().values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        for statement, values in (
            (sql, params),
            (f"SELECT COUNT(*) FROM ({count_sql}) t", count_params),
        ):
            if connection.vendor == "sqlite":
                cursor.execute(f"EXPLAIN QUERY PLAN {statement}", values)
                plan = [str(row[-1]) for row in cursor.fetchall()]
                assert any(
                    f"USING INDEX {index}" in step or f"USING COVERING INDEX {index}" in step
                    for step in plan
                ), plan
                assert not any("TEMP B-TREE" in step for step in plan), plan
            else:
                # A few dozen rows are rightly read whole or sorted after a bitmap scan;
                # with those ways closed the plan shows the index gives the list's order.
                cursor.execute("SET LOCAL enable_seqscan = off")
                cursor.execute("SET LOCAL enable_bitmapscan = off")
                cursor.execute(f"EXPLAIN {statement}", values)
                plan = [row[0] for row in cursor.fetchall()]
                assert any(f"Scan using {index}" in step for step in plan), plan
                assert not any(step.lstrip(" ->").startswith("Sort") for step in plan), plan


# -- migration 0009 backfills what was stored before 0008 -----------------------------------


@pytest.mark.sqlite
@pytest.mark.django_db(transaction=True)
def test_the_migration_backfills_in_batches_and_keeps_the_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib

    from django.db.migrations.executor import MigrationExecutor

    backfill = importlib.import_module("conversations.migrations.0009_backfill_list_filters")
    monkeypatch.setattr(backfill, "BATCH", 2)  # five conversations: three batches
    before = [("conversations", "0007_share_share_links")]
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes()
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    conversations = old.get_model("conversations", "Conversation").objects
    messages = old.get_model("conversations", "Message").objects
    blocks = old.get_model("conversations", "Block").objects
    when = timezone.now() - timedelta(days=3)

    def conversation(title: str, *stored: tuple[str, dict[str, Any], list[dict[str, Any]]]) -> Any:
        made = conversations.create(id=uuid.uuid4(), title=title, message_count=len(stored))
        for seq, (role, metadata, rows) in enumerate(stored):
            message = messages.create(
                conversation=made, seq=seq, role=role, metadata=metadata, block_count=len(rows)
            )
            for index, row in enumerate(rows):
                blocks.create(message=message, seq=index, **row)
        conversations.filter(pk=made.pk).update(updated_at=when)
        return made.pk

    use = {"type": "tool_use", "input_json": "{}", "name": "t"}
    result = {"type": "tool_result", "name": "t", "text": "out"}
    expected = {
        conversation("empty"): (0, 0, ""),
        conversation(
            "errors and an open call",
            ("assistant", {"model": "m-old"}, [use | {"call_id": "a"}]),
            ("user", {}, [result | {"call_id": "a", "is_error": True}]),
            (
                "assistant",
                {"gen_ai.request.model": "m-new"},
                [use | {"call_id": "b"}, use | {"call_id": "c"}, result | {"call_id": "b"}],
            ),
        ): (1, 1, "m-new"),
        conversation(
            "model in an earlier message",
            ("assistant", {"model": "m-1"}, [{"type": "text", "text": "hi"}]),
            ("user", {"model": 7}, [result | {"call_id": "x", "is_error": True}]),
            ("user", {"source": "s"}, []),
        ): (1, 0, "m-1"),
        conversation(
            "the result before the call",
            ("assistant", {}, [result | {"call_id": "r"}, use | {"call_id": "r"}]),
        ): (0, 1, ""),
        conversation("plain", ("user", {}, [{"type": "text", "text": "hello"}])): (0, 0, ""),
    }
    executor = MigrationExecutor(connection)
    executor.migrate(leaves)
    for pk, want in expected.items():
        row = Conversation.objects.get(pk=pk)
        assert (row.error_count, row.unanswered_calls, row.model) == want, row.title
        assert row.updated_at == when  # the list's order is untouched
        assert want == recomputed(row)
