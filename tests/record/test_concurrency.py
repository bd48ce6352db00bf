"""Concurrent writers on one conversation: threads, OS processes and HTTP clients.

Whatever interleaving the database allows, a conversation ends with dense message seqs,
dense block seqs in every message, a `message_count` equal to the number of messages,
and every appended payload stored exactly once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx2 as httpx
import pytest
from django.conf import settings
from django.db import connections

from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.reads import selectors
from conversations.record.schemas import ReasoningIn, TextIn
from conversations.record.services.appending import block_append, message_append
from conversations.record.services.conversations import conversation_create
from tests.conftest import ROOT, Server, database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sqlite]  # WAL, busy timeout

THREADS = 8
APPENDS_PER_THREAD = 25
PROCESSES = 4
APPENDS_PER_PROCESS = 25
HTTP_CLIENTS = 8
APPENDS_PER_CLIENT = 10


def assert_record_is_whole(conversation_id: Any, expected: list[str]) -> None:
    """Dense message and block seqs, counters that match the rows, each payload once."""
    conversation = Conversation.objects.get(pk=conversation_id)
    messages = list(Message.objects.filter(conversation=conversation).order_by("seq"))
    assert [m.seq for m in messages] == list(range(len(messages)))
    assert conversation.message_count == len(messages)
    rows = selectors.message_rows(conversation)
    for message, row in zip(messages, rows, strict=True):
        assert [b.seq for b in row.blocks] == list(range(len(row.blocks))), message.seq
        assert message.block_count == len(row.blocks), message.seq
    stored = Counter(
        Block.objects.filter(message__conversation=conversation).values_list("text", flat=True)
    )
    assert stored == Counter(expected)


def run_in_threads(count: int, work: Callable[[int], None]) -> None:
    """Run `work(i)` in `count` threads released together; re-raise the first failure."""
    barrier = threading.Barrier(count)

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            work(index)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(count) as pool:
        for future in [pool.submit(run, i) for i in range(count)]:
            future.result(timeout=120)


def test_threads_appending_messages_and_blocks_keep_the_record_dense() -> None:
    conversation = conversation_create(title="threads")
    shared, _ = message_append(
        conversation=conversation, role="user", blocks=[TextIn(type="text", text="shared-0")]
    )

    def work(worker: int) -> None:
        # Each thread holds its own instances, as separate requests would.
        mine = Conversation.objects.get(pk=conversation.pk)
        target = Message.objects.get(pk=shared.pk)
        for i in range(APPENDS_PER_THREAD):
            message, _ = message_append(
                conversation=mine,
                role="assistant",
                blocks=[TextIn(type="text", text=f"t{worker}-m{i}")],
            )
            block_append(
                message=message, block=ReasoningIn(type="reasoning", text=f"t{worker}-b{i}")
            )
            block_append(message=target, block=TextIn(type="text", text=f"t{worker}-s{i}"))

    run_in_threads(THREADS, work)

    expected = ["shared-0"] + [
        f"t{w}-{kind}{i}"
        for w in range(THREADS)
        for i in range(APPENDS_PER_THREAD)
        for kind in ("m", "b", "s")
    ]
    assert_record_is_whole(conversation.pk, expected)
    assert Message.objects.filter(conversation=conversation).count() == (
        1 + THREADS * APPENDS_PER_THREAD
    )
    assert Message.objects.get(pk=shared.pk).block_count == 1 + THREADS * APPENDS_PER_THREAD


# Run by each OS process: waits for "go" on stdin so that all processes write at once.
WORKER = """
import sys
import django

django.setup()
from conversations.record.reads import selectors
from conversations.record.services import appending
from conversations.record.models.conversation import Conversation
from conversations.record.schemas import ReasoningIn, TextIn

conversation_id, worker, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
conversation = Conversation.objects.get(pk=conversation_id)
shared = selectors.message_get(conversation, 0)
print("ready", flush=True)
sys.stdin.readline()
for i in range(count):
    message, _ = appending.message_append(
        conversation=conversation, role="assistant",
        blocks=[TextIn(type="text", text=f"p{worker}-m{i}")],
    )
    appending.block_append(
        message=message, block=ReasoningIn(type="reasoning", text=f"p{worker}-b{i}")
    )
    appending.block_append(message=shared, block=TextIn(type="text", text=f"p{worker}-s{i}"))
print("done", flush=True)
"""


def test_processes_appending_to_one_conversation_keep_the_record_dense() -> None:
    conversation = conversation_create(title="processes")
    message_append(
        conversation=conversation, role="user", blocks=[TextIn(type="text", text="shared-0")]
    )
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "replaysite.settings",
        "DATABASE_URL": database_url(),
        "DJANGO_SECRET_KEY": settings.SECRET_KEY,
        "PYTHONPATH": str(ROOT),
    }
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(conversation.pk), str(w), str(APPENDS_PER_PROCESS)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(PROCESSES)
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None
            line = worker.stdout.readline()
            assert line == "ready\n", worker.communicate(timeout=30)
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        results = [worker.communicate(timeout=120) for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    for worker, (out, err) in zip(workers, results, strict=True):
        assert worker.returncode == 0, err
        assert out.strip() == "done", err

    expected = ["shared-0"] + [
        f"p{w}-{kind}{i}"
        for w in range(PROCESSES)
        for i in range(APPENDS_PER_PROCESS)
        for kind in ("m", "b", "s")
    ]
    assert_record_is_whole(conversation.pk, expected)
    assert Conversation.objects.get(pk=conversation.pk).message_count == (
        1 + PROCESSES * APPENDS_PER_PROCESS
    )


def test_concurrent_api_clients_keep_the_record_dense(daphne: Server, token: str) -> None:
    with daphne.client(token) as client:
        created = client.post("/api/conversations", json={"title": "http"})
        assert created.status_code == 201, created.text
        conversation_id = created.json()["id"]
        first = client.post(
            f"/api/conversations/{conversation_id}/messages",
            json={"role": "user", "blocks": [{"type": "text", "text": "shared-0"}]},
        )
        assert first.status_code == 201, first.text
    base = f"/api/conversations/{conversation_id}"
    answered: list[list[int]] = [[] for _ in range(HTTP_CLIENTS)]

    def work(worker: int) -> None:
        with daphne.client(token) as client:
            for i in range(APPENDS_PER_CLIENT):
                message = client.post(
                    f"{base}/messages",
                    json={
                        "role": "assistant",
                        "blocks": [{"type": "text", "text": f"h{worker}-m{i}"}],
                    },
                )
                assert message.status_code == 201, message.text
                seq = message.json()["seq"]
                answered[worker].append(seq)
                block = client.post(
                    f"{base}/messages/{seq}/blocks",
                    json={"type": "reasoning", "text": f"h{worker}-b{i}"},
                )
                assert block.status_code == 201, block.text
                assert block.json()["seq"] == 1
                shared = client.post(
                    f"{base}/messages/0/blocks", json={"type": "text", "text": f"h{worker}-s{i}"}
                )
                assert shared.status_code == 201, shared.text

    run_in_threads(HTTP_CLIENTS, work)

    total = 1 + HTTP_CLIENTS * APPENDS_PER_CLIENT
    seqs = sorted(seq for worker in answered for seq in worker)
    assert seqs == list(range(1, total)), "each POST answered its own seq"
    expected = ["shared-0"] + [
        f"h{w}-{kind}{i}"
        for w in range(HTTP_CLIENTS)
        for i in range(APPENDS_PER_CLIENT)
        for kind in ("m", "b", "s")
    ]
    assert_record_is_whole(conversation_id, expected)

    with daphne.client(token) as client:
        record = client.get(base)
    assert record.status_code == 200, record.text
    data = record.json()
    assert data["message_count"] == total
    assert [m["seq"] for m in data["messages"]] == list(range(total))
    for message in data["messages"]:
        assert [b["seq"] for b in message["blocks"]] == list(range(len(message["blocks"])))
    texts = Counter(b["text"] for m in data["messages"] for b in m["blocks"])
    assert texts == Counter(expected)
    # Each client's own messages kept their order: a later POST got a later seq.
    for worker in answered:
        assert worker == sorted(worker)


def test_concurrent_idempotent_posts_store_one_message(daphne: Server, token: str) -> None:
    """The same Idempotency-Key sent by several clients at once stores the message once."""
    with daphne.client(token) as client:
        conversation_id = client.post("/api/conversations", json={"title": "idem"}).json()["id"]
    path = f"/api/conversations/{conversation_id}/messages"
    body = {"role": "user", "blocks": [{"type": "text", "text": "once"}]}
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def work(worker: int) -> None:
        with daphne.client(token) as client:
            response = client.post(path, json=body, headers={"Idempotency-Key": "same-key"})
        with lock:
            answers.append(response)

    run_in_threads(6, work)

    assert Message.objects.filter(conversation_id=conversation_id).count() == 1
    assert Conversation.objects.get(pk=conversation_id).message_count == 1
    statuses = Counter(a.status_code for a in answers)
    # A repeat answers as the first POST did; a repeat racing it may be told to retry.
    assert set(statuses) <= {201, 409}, [a.text for a in answers]
    assert statuses[201] >= 1
    assert {a.json()["seq"] for a in answers if a.status_code == 201} == {0}
