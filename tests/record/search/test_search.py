"""Search (docs/contract.md §3): words and word prefixes, case-insensitive in every script, through
a full-text index on both databases; q over 200 characters refused; user input is never query
syntax; the index follows every write and every deletion."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pytest
from django.db import connection
from django.test import Client

from conversations.core import search
from conversations.core.blocks import TextBlock, ToolResultBlock, ToolUseBlock
from conversations.record import fulltext
from conversations.record.models.conversation import Conversation
from conversations.record.models.search import SearchEntry
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.search import index
from conversations.record.search import reads as search_reads
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_create, conversation_update
from tests.builders import png, text, tool_result, tool_use
from tests.conftest import ApiClient

LIST = "/api/conversations"

# FTS5 on SQLite, a GIN index on PostgreSQL: both passes run every search test.
pytestmark = pytest.mark.sqlite


def create(api: ApiClient, title: str = "Untitled", *blocks: dict[str, Any]) -> str:
    response = api.post(LIST, {"title": title})
    assert response.status_code == 201, response.content
    cid = str(response.json()["id"])
    if blocks:
        response = api.post(f"{LIST}/{cid}/messages", {"role": "user", "blocks": list(blocks)})
        assert response.status_code == 201, response.content
    return cid


def found(api: ApiClient, q: str) -> set[str]:
    response = api.get(LIST, q=q)
    assert response.status_code == 200, response.content
    return {c["id"] for c in response.json()["results"]}


def fts_matches(word: str) -> set[int]:
    """SQLite: the entry ids FTS5's own index holds for a word."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT rowid FROM {fulltext.FTS} WHERE {fulltext.FTS} MATCH %s", [word])
        return {row[0] for row in cursor.fetchall()}


# --- words, without a database ------------------------------------------------------


@pytest.mark.parametrize(
    ("stored", "typed"),
    [
        ("Émile", "émile"),
        ("émile", "ÉMILE"),
        ("Émile", "emile"),
        ("ΣΊΣΥΦΟΣ", "σίσυφος"),  # final sigma folds to σ
        ("Достоевский", "ДОСТОЕВСКИЙ"),
        ("Straße", "STRASSE"),
        ("ＦＵＬＬＷＩＤＴＨ", "fullwidth"),
        ("ﬁle", "FILE"),
    ],
)
def test_words_are_the_same_whatever_the_case_or_script(stored: str, typed: str) -> None:
    assert search.words(stored) == search.words(typed)


def test_each_han_and_kana_character_is_a_word() -> None:
    assert search.words("東京都に住む") == ["東", "京", "都", "に", "住", "む"]
    assert search.words("가나다 한국어") == ["가나다", "한국어"]  # Hangul is spaced


def test_words_split_on_punctuation_and_keep_combining_marks() -> None:
    assert search.words("ZEBRA-42 foo_bar a.b/c") == ["zebra", "42", "foo", "bar", "a", "b", "c"]
    assert search.words("नमस्ते दुनिया") == ["नमस्ते", "दुनिया"]


def test_index_words_are_distinct_and_bounded() -> None:
    assert search.index_words("the cat and THE dog") == "the cat and dog"
    huge = "early " + "x" * search.INDEXED_CHARS + " late"
    assert search.index_words(huge).split() == ["early", "x" * search.MAX_WORD_CHARS]
    assert search.index_words("") == search.index_words("!?") == ""


def test_block_text_covers_tools_and_unglues_json_escapes() -> None:
    use = ToolUseBlock.of("c1", "grep_files", {"pattern": "line1\nline2", "path": "src/"})
    assert {"grep", "files", "pattern", "line1", "line2", "path", "src"} <= set(
        search.words(search.block_text(use))
    )
    result = ToolResultBlock("c1", "grep_files", "3 matches")
    assert search.words(search.block_text(result)) == ["grep", "files", "3", "matches"]
    assert search.block_text(TextBlock("hi")) == "hi"


def test_a_query_is_words_and_prefixes() -> None:
    query = search.parse_query("Emi zo a emile z")
    assert query.words == ("a", "z")  # one character: only the word itself
    assert query.prefixes == ("zo", "emile")  # "emi" is implied by "emile"
    assert search.parse_query("  ").empty and search.parse_query("%_\\").empty


def test_a_query_over_200_characters_is_refused_naming_q() -> None:
    search.parse_query("a" * search.MAX_QUERY_CHARS)
    with pytest.raises(search.QueryError) as raised:
        search.parse_query("a" * (search.MAX_QUERY_CHARS + 1))
    assert raised.value.field == "q"
    assert raised.value.message.startswith("q is 201 characters long")


def test_a_query_of_too_many_words_is_refused_naming_q() -> None:
    search.parse_query(" ".join(f"w{n}" for n in range(search.MAX_QUERY_WORDS)))
    with pytest.raises(search.QueryError, match="^q has 17 different words"):
        search.parse_query(" ".join(f"w{n}" for n in range(search.MAX_QUERY_WORDS + 1)))


def test_query_syntax_is_quoted_for_both_databases() -> None:
    query = search.Query(words=('a"b',), prefixes=("it's\\",))
    assert fulltext.fts5_query(query) == '"a""b" AND "it\'s\\"*'
    assert fulltext.tsquery(query) == "'a\"b' & 'it''s\\\\':*"


# --- the API and the index, on the database under test --------------------------------


def test_search_finds_words_and_word_prefixes(api: ApiClient) -> None:
    zola = create(api, "Naturalism", text("Émile Zola wrote Germinal."))
    create(api, "Other", text("Nothing about it."))
    for q in ("émile", "EMILE", "Emile", "emi", "zol", "germinal", "ZOLA émile"):
        assert found(api, q) == {zola}, q
    for q in ("mile", "ola", "zolas", "e"):  # inside a word, longer than it, one letter
        assert found(api, q) == set(), q


@pytest.mark.parametrize(
    ("stored", "typed"),
    [
        ("Émile", "émile"),
        ("ΣΊΣΥΦΟΣ ΚΑΙ ΠΡΟΜΗΘΕΑΣ", "σίσυφος"),
        ("Фёдор Достоевский", "достоевский фёдор"),
        ("東京都に住む", "東京"),
        ("Straße", "strasse"),
    ],
)
def test_search_is_case_insensitive_in_every_script(
    api: ApiClient, stored: str, typed: str
) -> None:
    cid = create(api, "Untitled", text(stored))
    create(api, "Unrelated", text("plain english words"))
    assert found(api, typed) == {cid}
    assert found(api, stored) == {cid}


def test_search_covers_titles_text_reasoning_and_tools(api: ApiClient) -> None:
    by_title = create(api, "Refund for the Zebra order")
    by_reasoning = create(api, "R", {"type": "reasoning", "text": "the zebra is striped"})
    by_tool_name = create(api, "N", tool_use("c1", "zebra_lookup", q="x"))
    by_tool_input = create(api, "I", tool_use("c1", "lookup", animal="Zebra"))
    by_result = create(api, "O", tool_use("c1"), tool_result("c1", "ZEBRA-42 shipped"))
    create(api, "Nothing", text("an elephant"), png())
    assert found(api, "zebra") == {by_title, by_reasoning, by_tool_name, by_tool_input, by_result}


def test_every_word_must_be_in_the_same_block_or_title(api: ApiClient) -> None:
    both = create(api, "Untitled", text("red apple"))
    create(api, "Untitled", text("red"), text("apple"))  # two blocks
    create(api, "red", text("apple"))  # title and block
    assert found(api, "apple red") == {both}


def test_blocks_appended_later_are_found(api: ApiClient) -> None:
    cid = create(api, "Untitled", text("first"))
    response = api.post(f"{LIST}/{cid}/messages/0/blocks", text("appended afterwards"))
    assert response.status_code == 201, response.content
    assert found(api, "afterwards") == {cid}
    entry = SearchEntry.objects.get(words__contains="afterwards")
    assert (entry.message_seq, entry.block_seq) == (0, 1)


def test_a_block_is_searched_in_its_first_100000_characters(api: ApiClient) -> None:
    cid = create(
        api, "Untitled", text("beginning " + "filler " * (search.INDEXED_CHARS // 7) + "ending")
    )
    assert found(api, "beginning") == {cid}
    assert found(api, "ending") == set()


@pytest.mark.parametrize(
    "q",
    [
        '"',
        '"unterminated',
        "*",
        "a*",
        "NEAR(one two)",
        "NEAR",
        "title:one",
        ":",
        "&|!()",
        "one & !two",
        "'",
        "\\",
        "one OR two",
        "NOT one",
        "-one",
        "^one",
        "{one}",
        "one:*",
        "<->",
        "🦓",
        "\u200b",
        "ǅ",
        "one\x01two",
    ],
)
def test_query_syntax_in_q_is_only_text(api: ApiClient, q: str) -> None:
    cid = create(api, "Untitled", text("one two near title not or"))
    response = api.get(LIST, q=q)
    assert response.status_code == 200, response.content
    words = set(search.words(q))
    expected = {cid} if words and words <= {"one", "two", "near", "title", "not", "or"} else set()
    assert {c["id"] for c in response.json()["results"]} == expected


def test_a_q_over_200_characters_is_a_400_naming_q(api: ApiClient) -> None:
    cid = create(api, "Untitled", text("a" * 200))
    assert found(api, "a" * 200) == {cid}
    response = api.get(LIST, q="a" * 1000 + "b")
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == "q" and body["error"].startswith("q is 1,001 characters long")


def test_the_dashboard_says_why_a_long_q_is_refused(operator_client: Client) -> None:
    conversation_create(title="<script>alert(1)</script>")
    response = operator_client.get("/", {"q": "<script>" * 30})
    assert response.status_code == 400
    body = response.content.decode()
    assert "q is 240 characters long; a search may have at most 200." in body
    assert "<script><script>" not in body  # the query is shown only escaped, in the field
    assert 'maxlength="200"' in body


def test_deleting_a_conversation_deletes_its_entries_from_the_index(api: ApiClient) -> None:
    gone = create(api, "Doomed zebra", text("zebra text"), tool_use("c1", "zebra_tool"))
    kept = create(api, "Kept zebra", text("zebra text"))
    before = SearchEntry.objects.count()
    assert SearchEntry.objects.filter(conversation_id=gone).count() == 3
    assert api.client.delete(f"{LIST}/{gone}", headers=api._headers(None)).status_code == 204
    assert SearchEntry.objects.filter(conversation_id=gone).count() == 0
    assert SearchEntry.objects.count() == before - 3
    assert found(api, "zebra") == {kept}
    if connection.vendor == "sqlite":
        kept_ids = set(
            SearchEntry.objects.filter(conversation_id=kept).values_list("pk", flat=True)
        )
        assert fts_matches("zebra") == kept_ids
        with connection.cursor() as cursor:  # FTS5 checks its index against the entries
            cursor.execute(
                f"INSERT INTO {fulltext.FTS}({fulltext.FTS}, rank) VALUES ('integrity-check', 1)"
            )


def test_the_orm_cascade_also_deletes_a_conversations_entries(api: ApiClient) -> None:
    gone = create(api, "Doomed zebra", text("zebra text"))
    Conversation.objects.get(pk=gone).delete()  # the admin's or a shell's delete
    assert not SearchEntry.objects.filter(conversation_id=gone).exists()
    assert found(api, "zebra") == set()


def test_renaming_a_conversation_reindexes_its_title(api: ApiClient) -> None:
    conversation = conversation_create(title="Old name")
    conversation_update(conversation=conversation, title="New name", metadata={})
    assert found(api, "old") == set()
    assert found(api, "new") == {str(conversation.pk)}
    conversation_update(conversation=conversation, title="", metadata={})
    assert found(api, "new") == set()
    assert not SearchEntry.objects.filter(conversation=conversation).exists()


def test_a_block_without_words_has_no_entry(db: None) -> None:
    conversation = conversation_create(title="")
    message, _ = message_append(
        conversation=conversation,
        role="user",
        blocks=[BLOCK_ADAPTER.validate_python(b) for b in (text(""), text("!!"), png())],
    )
    assert not SearchEntry.objects.filter(conversation=conversation).exists()


def test_the_search_reads_the_full_text_index(db: None) -> None:
    for n in range(30):
        conversation = conversation_create(title=f"conversation {n}")
        message_append(
            conversation=conversation,
            role="user",
            blocks=[BLOCK_ADAPTER.validate_python(text(f"word{n} and more words"))],
        )
    # The list reads the entries through the index, then the conversations by their ids.
    entries = search_reads.search_entries("word1 mor").values("conversation_id")
    sql, params = entries.query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            plan = [str(row[-1]) for row in cursor.fetchall()]
            assert any(f"SCAN {fulltext.FTS} VIRTUAL TABLE INDEX" in step for step in plan), plan
            assert not any(step.startswith("SCAN conversations_searchentry ") for step in plan)
            assert not any("conversations_block" in step for step in plan), plan
        else:
            # A few dozen rows are rightly read whole; with that way closed the plan shows
            # the condition is one the GIN index answers (bench.search: at scale).
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}", params)
            plan = [row[0] for row in cursor.fetchall()]
            assert any(f"Bitmap Index Scan on {index.GIN}" in step for step in plan), plan
            assert not any("Seq Scan on conversations_searchentry" in step for step in plan)
            assert not any("conversations_block" in step for step in plan), plan


@pytest.mark.django_db(transaction=True)
def test_the_migration_indexes_what_was_stored_before_it() -> None:
    from django.db.migrations.executor import MigrationExecutor

    before = [("conversations", "0002_provenance_and_dimensions")]
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes()
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    conversation = old.get_model("conversations", "Conversation").objects.create(
        id=uuid.uuid4(), title="Émile's notebook"
    )
    message = old.get_model("conversations", "Message").objects.create(
        conversation_id=conversation.pk, seq=0, role="assistant", block_count=2
    )
    blocks = old.get_model("conversations", "Block").objects
    blocks.create(message=message, seq=0, type="text", text="ΣΊΣΥΦΟΣ " + "x" * 200_000)
    blocks.create(
        message=message,
        seq=1,
        type="tool_use",
        call_id="c1",
        name="grep",
        input_json='{"pattern":"needle"}',
    )
    executor = MigrationExecutor(connection)
    executor.migrate(leaves)
    cid = conversation.pk
    assert set(search_reads.conversation_list(q="emile").values_list("pk", flat=True)) == {cid}
    assert set(search_reads.conversation_list(q="σίσυφος").values_list("pk", flat=True)) == {cid}
    assert set(search_reads.conversation_list(q="grep needle").values_list("pk", flat=True)) == {
        cid
    }
    assert SearchEntry.objects.filter(conversation_id=cid).count() == 3


# --- where a conversation matched -------------------------------------------------------


def test_list_results_link_the_first_matching_block_with_a_snippet(api: ApiClient) -> None:
    cid = create(api, "Untitled", text("nothing here"))
    api.post(
        f"{LIST}/{cid}/messages",
        {
            "role": "assistant",
            "blocks": [
                text("still nothing"),
                tool_use("c1", "grep", pattern="Émile Zola " + "padding " * 100),
            ],
        },
    )
    api.post(f"{LIST}/{cid}/messages", {"role": "user", "blocks": [text("zola again")]})
    titled = create(api, "Zola in the title only")
    results = {r["id"]: r for r in api.get(LIST, q="zola").json()["results"]}
    match = results[cid]["match"]
    assert (match["message_seq"], match["block_seq"]) == (1, 1)
    assert match["url"] == f"http://testserver/c/{cid}/#m-1"
    assert match["snippet"].startswith('grep {"pattern":"Émile Zola padding')
    assert match["snippet"].endswith("…") and len(match["snippet"]) <= search.SNIPPET_CHARS + 2
    assert results[titled]["match"] is None
    assert "match" not in api.get(LIST).json()["results"][0]


def test_a_snippet_is_cut_around_the_match_on_one_line() -> None:
    query = search.parse_query("needle")
    haystack = "hay\nstack " * 100 + "the Needle\n\tis here " + "more hay " * 100
    cut = search.snippet(haystack, query)
    assert cut.startswith("…") and cut.endswith("…") and "\n" not in cut
    assert "the Needle is here" in cut
    assert search.snippet("short text", query) == "short text"


def test_dashboard_rows_link_the_matching_message_and_show_the_snippet_as_text(
    operator_client: Client,
) -> None:
    conversation = conversation_create(title="Hostile")
    message_append(
        conversation=conversation,
        role="user",
        blocks=[BLOCK_ADAPTER.validate_python(text("<img src=x onerror=alert(1)> zebra"))],
    )
    body = operator_client.get("/", {"q": "zebra"}).content.decode()
    assert f'href="/c/{conversation.pk}/#m-0">message 0</a>' in body
    assert "&lt;img src=x onerror=alert(1)&gt; zebra" in body
    assert "<img src=x" not in body


def test_a_batch_of_messages_is_indexed_with_each_message_seq(api: ApiClient) -> None:
    cid = create(api, "Untitled", text("first"))
    batch = [{"role": "user", "blocks": [text(f"batchword{n}"), text("x")]} for n in range(3)]
    response = api.post(f"{LIST}/{cid}/messages/batch", {"messages": batch})
    assert response.status_code == 201, response.content
    assert found(api, "batchword2") == {cid}
    entry = SearchEntry.objects.get(words="batchword2")
    assert (entry.message_seq, entry.block_seq) == (3, 0)


def test_an_imported_transcript_is_searchable_by_title_and_blocks(api: ApiClient) -> None:
    body = {
        "model": "claude-x",
        "system": "You are terse.",
        "messages": [
            {"role": "user", "content": "Where is Émile?"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "locate_person",
                        "input": {"who": "X"},
                    },
                ],
            },
        ],
    }
    response = api.client.post(
        "/api/imports?format=anthropic&title=Quarterly%20hunt",
        orjson.dumps(body),
        content_type="application/json",
        headers=api._headers(None),
    )
    assert response.status_code == 201, response.content
    cid = response.json()["id"]
    assert found(api, "quarterly") == {cid}
    assert found(api, "emile") == {cid}
    assert found(api, "locate_person") == {cid}


# --- at scale (docs/api.md, Search): what is indexed, and the same answers by either path


def test_a_tool_result_is_indexed_in_its_start_and_its_end(api: ApiClient) -> None:
    middle = " ".join(f"filler{n}" for n in range(2000))  # far more than head and tail
    content = f"command echoed {middle} traceback ends here"
    cid = create(api, "Untitled", tool_use("c1", "bash"))
    api.post(f"{LIST}/{cid}/messages", {"role": "user", "blocks": [tool_result("c1", content)]})
    assert found(api, "echoed") == {cid}
    assert found(api, "traceback") == {cid}
    assert found(api, "filler1000") == set()  # the middle of a long output is not indexed
    # Text, reasoning and tool inputs are still indexed to INDEXED_CHARS.
    other = create(api, "Untitled", text(f"start {middle} finish"))
    assert found(api, "filler1000") == {other}


@pytest.fixture
def common_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Words in more than 3 entries take the walking path (as a common word does at scale)."""
    monkeypatch.setattr(search_reads, "SEARCH_ENTRIES", 3)
    monkeypatch.setattr(search_reads, "HIT_ENTRIES", 3)


def test_a_common_word_is_found_by_walking_with_the_same_answer(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [create(api, f"run {n}", text(f"word{n} shared alpha")) for n in range(6)]
    quiet = create(api, "quiet", text("nothing to see"))
    api.post(f"{LIST}/{ids[2]}/messages", {"role": "user", "blocks": [text("shared again")]})
    exact = api.get(LIST, q="shared alp").json()
    monkeypatch.setattr(search_reads, "SEARCH_ENTRIES", 3)
    monkeypatch.setattr(search_reads, "HIT_ENTRIES", 3)
    walked = api.get(LIST, q="shared alp").json()
    assert [r["id"] for r in walked["results"]] == [r["id"] for r in exact["results"]]
    assert {r["id"] for r in walked["results"]} == set(ids) and quiet not in str(walked)
    assert [r["match"] for r in walked["results"]] == [r["match"] for r in exact["results"]]
    assert walked["count"] == exact["count"] == 6 and walked["count_capped"] is False


def test_a_common_words_count_stops_at_the_cap(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch, common_paths: None
) -> None:
    monkeypatch.setattr(search_reads, "SEARCH_COUNT_CAP", 4)
    for n in range(6):
        create(api, f"run {n}", text("shared"))
    body = api.get(LIST, q="shared", page_size="2").json()
    assert (body["count"], body["count_capped"], body["pages"]) == (4, True, 2)
    assert len(body["results"]) == 2 and body["next"] is not None
    assert api.get(LIST, q="shared", page_size="2", page="3").status_code == 404


def test_the_list_page_says_a_capped_count_is_more(
    operator_client: Client, monkeypatch: pytest.MonkeyPatch, common_paths: None
) -> None:
    monkeypatch.setattr(search_reads, "SEARCH_COUNT_CAP", 26)
    for n in range(30):
        message_append(
            conversation=conversation_create(title=f"run {n}"),
            role="user",
            blocks=[BLOCK_ADAPTER.validate_python(text("shared"))],
        )
    page = operator_client.get("/", {"q": "shared"}).content.decode()
    assert "Page 1 of 2+" in page


def test_a_search_reads_a_bounded_number_of_entries_whatever_is_stored(
    db: None, django_assert_max_num_queries: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_reads, "SEARCH_ENTRIES", 3)
    monkeypatch.setattr(search_reads, "HIT_ENTRIES", 3)
    for n in range(8):
        message_append(
            conversation=conversation_create(title=f"run {n}"),
            role="user",
            blocks=[BLOCK_ADAPTER.validate_python(text("shared")) for _ in range(3)],
        )
    # The notes' matches; the index's first entries; planner settings.
    with django_assert_max_num_queries(7):
        found = search_reads.conversation_list(q="shared")
    with django_assert_max_num_queries(1):
        page = list(found[:5])
    assert len(page) == 5
    # The index and then the walks (each with its planner settings, in a savepoint), a
    # walk per conversation, the blocks: a number bounded by the page, not by what is stored.
    with django_assert_max_num_queries(5 + 5 + 5):
        hits = search_reads.search_hits(page, "shared")
    assert {hit.message_seq for hit in hits.values()} == {0}


def test_ascii_text_is_split_as_any_text_is() -> None:
    sample = "Zebra-42 foo_bar a.b/c ID=8f3A __init__ x--y 2026-11-03T12:44:01Z ~`!@#$%^&*()"
    sample += "".join(chr(code) for code in range(128))
    assert sample.isascii()
    expected = [w[: search.MAX_WORD_CHARS] for w in search._WORD.findall(search.fold(sample))]
    assert search.words(sample) == expected
    assert search.words("x" * 300) == ["x" * search.MAX_WORD_CHARS]


def test_a_word_most_newest_conversations_hold_is_walked_without_the_index(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [create(api, f"run {n}", text(f"word{n} shared")) for n in range(5)]
    create(api, "quiet", text("nothing"))
    exact = api.get(LIST, q="shar").json()
    monkeypatch.setattr(search_reads, "PROBE_CONVERSATIONS", 4)
    monkeypatch.setattr(search_reads, "PROBE_COMMON", 3)
    found = search_reads.conversation_list(q="shar")
    # PostgreSQL walks (each row carries its first match); SQLite's FTS5 is always asked.
    walked = connection.vendor == "postgresql"
    assert all(hasattr(c, "first_entry") for c in found) == walked
    assert api.get(LIST, q="shar").json() == exact
    assert {r["id"] for r in exact["results"]} == set(ids)
    # A word fewer of them hold is asked of the index.
    assert not any(hasattr(c, "first_entry") for c in search_reads.conversation_list(q="word1"))


def test_the_planner_settings_of_a_search_are_put_back(db: None) -> None:
    # Inside the test's transaction the settings are set in a savepoint, whose release
    # would keep them to the transaction's end: they must be put back by hand.
    def settings() -> tuple[str, ...]:
        if connection.vendor != "postgresql":
            return ()
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('enable_seqscan'), current_setting('jit')")
            return tuple(cursor.fetchone())

    before = settings()
    with index.through_index(), index.along_entries():
        inside = settings()
    assert settings() == before
    if connection.vendor == "postgresql":
        assert inside == ("off", "off") and before[0] == "on"
