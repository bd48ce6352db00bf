"""Reads during writes (docs/contract.md §3): every read serves one consistent snapshot, never a
500.

`message_rows` reads messages, then blocks; whatever commits between the two queries (a new
message, a block on a message already read) is left out, so each message carries exactly
the blocks its count says and the record's `message_count` matches its messages.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx2 as httpx
import pytest
from django.db import connection, connections

from conversations.record.models.conversation import Conversation, Message
from conversations.record.reads import selectors, shapes
from conversations.record.schemas import TextIn
from conversations.record.services.api_tokens import api_token_create
from conversations.record.services.appending import block_append, message_append, messages_append
from conversations.record.services.conversations import conversation_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sqlite]  # WAL, busy timeout


def text(value: str) -> TextIn:
    return TextIn(type="text", text=value)


def elsewhere(work: Callable[[], None]) -> None:
    """Run `work` to its commit on another thread (its own connection) and wait for it."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:
            failures.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    if failures:
        raise failures[0]


@contextmanager
def before_reading(table: str, work: Callable[[], None]) -> Iterator[None]:
    """Commit `work` from another connection just before this one first reads `table`."""
    done = False

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal done
        if not done and sql.lstrip().startswith("SELECT") and f'FROM "{table}"' in sql:
            done = True
            elsewhere(work)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield
    assert done, f"no query read {table}"


def before_reading_blocks(work: Callable[[], None]) -> Any:
    """Commit `work` just before this connection first reads blocks."""
    return before_reading("conversations_block", work)


@pytest.fixture
def conversation() -> Conversation:
    conversation = conversation_create(title="Consistency")
    for n in range(3):
        message_append(
            conversation=conversation, role="user", blocks=[text(f"{n}.0"), text(f"{n}.1")]
        )
    return Conversation.objects.get(pk=conversation.pk)


def write_meanwhile(conversation_id: Any) -> None:
    target = Conversation.objects.get(pk=conversation_id)
    message_append(conversation=target, role="assistant", blocks=[text("new")])
    block_append(
        message=Message.objects.get(conversation_id=conversation_id, seq=1), block=text("1.2")
    )


def test_a_message_and_a_block_committed_between_the_two_reads_are_left_out(conversation):
    with before_reading_blocks(lambda: write_meanwhile(conversation.pk)):
        rows = selectors.message_rows(conversation)
    assert [row.seq for row in rows] == [0, 1, 2]
    assert [[b.text for b in row.blocks] for row in rows] == [
        ["0.0", "0.1"], ["1.0", "1.1"], ["2.0", "2.1"],
    ]  # fmt: skip
    # The next read sees both.
    rows = selectors.message_rows(conversation)
    assert [len(row.blocks) for row in rows] == [2, 3, 2, 1]


def test_a_window_read_during_a_write_is_consistent_too(conversation):
    with before_reading_blocks(lambda: write_meanwhile(conversation.pk)):
        rows = selectors.message_rows(conversation, start=1)
    assert [(row.seq, len(row.blocks)) for row in rows] == [(1, 2), (2, 2)]


def test_the_record_during_a_write_matches_its_own_message_count(conversation):
    with before_reading_blocks(lambda: write_meanwhile(conversation.pk)):
        record = shapes.record_data(conversation, url="/")
    assert record["message_count"] == len(record["messages"]) == 3
    assert [len(m["blocks"]) for m in record["messages"]] == [2, 2, 2]


# -- a writer hammering while readers loop, over a real daphne ----------------------------

HAMMER_SECONDS = 6.0
READERS = 2


def test_reads_during_writes_never_fail_and_are_consistent(daphne, operator_client) -> None:
    """An agent appends messages, blocks and batches as fast as it can while readers loop
    over every read path: no 5xx, and every record agrees with itself."""
    from django.conf import settings

    conversation = conversation_create(title="Hammered")
    for n in range(5):
        message_append(conversation=conversation, role="user", blocks=[text(f"seed {n}")])
    _, token = api_token_create(label="readers")
    cid = str(conversation.pk)
    cookie = operator_client.cookies[settings.SESSION_COOKIE_NAME].value
    stop = threading.Event()
    writes = [0]

    def writer() -> None:
        from conversations.record.schemas import MessageIn

        try:
            n = 0
            while not stop.is_set():
                n += 1
                target = Conversation.objects.get(pk=cid)
                message, _ = message_append(
                    conversation=target, role="assistant", blocks=[text(f"w{n}"), text("x")]
                )
                block_append(message=message, block=text(f"w{n} more"))
                earlier = Message.objects.get(conversation_id=cid, seq=n % 5)
                block_append(message=earlier, block=text(f"late {n}"))
                if n % 5 == 0:
                    batch = [MessageIn(role="user", blocks=[text(f"b{n}.{i}")]) for i in range(5)]
                    messages_append(conversation=target, messages=batch)
                writes[0] += 1
        finally:
            connections.close_all()

    paths = [
        ("api", f"/api/conversations/{cid}"),
        ("api", f"/api/conversations/{cid}/replay"),
        ("api", f"/api/conversations/{cid}/replay?vision=0&shape=anthropic"),
        ("page", f"/c/{cid}/replay.json"),
        ("page", f"/c/{cid}/"),
    ]
    failures: list[str] = []
    reads = [0] * READERS

    def reader(index: int) -> None:
        api = daphne.client(token)
        page = httpx.Client(base_url=daphne.url, cookies={"sessionid": cookie}, timeout=30)
        with api, page:
            i = index
            while not stop.is_set():
                kind, path = paths[i % len(paths)]
                i += 1
                response = (api if kind == "api" else page).get(path)
                reads[index] += 1
                if response.status_code != 200:
                    failures.append(f"{path}: {response.status_code} {response.text[:300]}")
                elif path == f"/api/conversations/{cid}":
                    problem = record_problem(response.json())
                    if problem:
                        failures.append(f"{path}: {problem}")

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader, args=(i,)) for i in range(READERS)
    ]
    for thread in threads:
        thread.start()
    stop.wait(HAMMER_SECONDS)
    stop.set()
    for thread in threads:
        thread.join(60)
    assert not failures, failures[:5]
    assert writes[0] >= 10 and sum(reads) >= 20, (writes, reads)  # they really overlapped


def record_problem(record: dict[str, Any]) -> str:
    """What is inconsistent in a served record, or ""."""
    messages = record["messages"]
    if [m["seq"] for m in messages] != list(range(record["message_count"])):
        return f"{record['message_count']} messages counted, seqs {[m['seq'] for m in messages]}"
    for message in messages:
        if [b["seq"] for b in message["blocks"]] != list(range(len(message["blocks"]))):
            return f"message {message['seq']} has blocks {[b['seq'] for b in message['blocks']]}"
    return ""


# -- a live frame read while its message grows ---------------------------------------------


def margin_tokens(html: str, seq: int) -> str:
    import re

    article = html[html.index(f'<article id="m-{seq}"') :]
    article = article[: article.index("</article>")]
    found = re.search(r'class="tokens" data-tokens="(\d+)"', article)
    assert found is not None, "the message has no margin count"
    return found.group(1)


def test_a_frame_whose_message_grew_mid_render_counts_the_blocks_it_shows() -> None:
    """An agent creates a message with no blocks, then streams a block into it: the frame
    rendered for the first event reads the conversation's row, then (after the block's
    commit) the message with its block. Its margin count is of that block, as a page
    rendered now shows it; before, it was the cached count of the empty message, and the
    block's own event was then skipped as already sent (the scale-out flake)."""
    from conversations.live import fragments

    conversation = conversation_create(title="Growing")
    message_append(conversation=conversation, role="user", blocks=[text("hello")])
    message, _ = message_append(conversation=conversation, role="assistant", blocks=[])
    cid = str(conversation.pk)
    fragments.messages_frame(cid, [1], True, "openai")  # warm: the empty message counted

    def stream() -> None:
        block_append(
            message=Message.objects.get(pk=message.pk), block=text("a streamed answer " * 40)
        )

    # After the conversation's row is read, before the message's.
    with before_reading("conversations_message", stream):
        raced = fragments.messages_frame(cid, [1], True, "openai")
    fresh = fragments.messages_frame(cid, [1], True, "openai")
    assert raced.counts == fresh.counts == {1: 1}
    assert margin_tokens(raced.html, 1) == margin_tokens(fresh.html, 1)


# -- the streamed read that cold counts use ------------------------------------------------


def test_streamed_rows_are_message_rows_one_message_at_a_time(
    conversation: Conversation, monkeypatch: Any
) -> None:
    message_append(conversation=conversation, role="assistant", blocks=[])
    message_append(conversation=conversation, role="user", blocks=[text("x" * 5000), text("y")])
    whole = selectors.message_rows(conversation, image_data=False)
    for limit in (1, 100, 10**9):  # a block per batch, a few, all at once
        monkeypatch.setattr(selectors, "STREAMED_BYTES", limit)
        assert list(selectors.message_rows_streamed(conversation)) == whole
    assert list(selectors.message_rows_streamed(conversation, start=1, stop=3)) == whole[1:3]


def test_a_streamed_read_during_a_write_is_consistent_too(conversation: Conversation) -> None:
    with before_reading_blocks(lambda: write_meanwhile(conversation.pk)):
        rows = list(selectors.message_rows_streamed(conversation))
    assert [(row.seq, len(row.blocks)) for row in rows] == [(0, 2), (1, 2), (2, 2)]
