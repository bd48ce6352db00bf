"""The whole-record reads, streamed (docs/contract.md §3): the record, the replay, the payload
download and the Markdown export send the bytes the whole-in-memory reads give, as they are
read; the record pages with `?from_seq=&limit=`."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from conversations.core import diff
from conversations.core.counting.compact import Policy
from conversations.core.options import ReplayOptions
from conversations.core.replay import Shape
from conversations.dashboard.presenters.diff import DIFF_WINDOW
from conversations.ingest.imports import transcript_import
from conversations.record import streams
from conversations.record.counting import preview_counts
from conversations.record.models.conversation import Conversation
from conversations.record.reads import selectors, shapes
from conversations.record.schemas import TextIn, ToolResultIn, ToolUseIn
from conversations.record.services.api_tokens import api_token_create
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_create, conversation_delete
from conversations.sharing.services import share_create
from tests.api.test_api import one
from tests.conftest import Server
from tests.importdata import request_bodies
from tests.live.test_consumers import in_loop
from tests.realdata import REAL

RESPONSES = "openai_responses_reasoning_function_call_output.json"
# Real recordings of every importer family: system prompts (the anthropic shape lifts them),
# images (vision on and off), tool rounds, reasoning and errors.
SOURCES = [
    ("openai-chat", request_bodies("openai_chat_tool_calls_tool_role_image_url.json")[-1]),
    ("anthropic", request_bodies("anthropic_messages_tool_result_text_image_base64.json")[-1]),
    ("anthropic", request_bodies("anthropic_sdk_tool_result_is_error.json")[-1]),
    ("openai-responses", request_bodies(RESPONSES)[-1]),
    ("claude-code", (REAL / "claude_code_tool_heavy_parallel_interrupts.jsonl").read_bytes()),
    ("claude-code", (REAL / "large/claude_code_screenshot_tool_result_image.jsonl").read_bytes()),
]
TOGGLES = [(vision, shape) for vision in (True, False) for shape in ("openai", "anthropic")]


@pytest.fixture
def small_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows of 2 messages and block batches of 3 blocks: every seam is crossed."""
    monkeypatch.setattr(streams, "WINDOW", 2)
    monkeypatch.setattr(selectors, "STREAMED_BLOCKS", 3)


def imported(format: str, raw: bytes) -> Conversation:
    outcome = transcript_import(raw=raw, format=format, title=None, file_name=None)
    return Conversation.objects.get(pk=outcome.conversation.pk)


def toggles(vision: bool, shape: str) -> dict[str, str]:
    return {"vision": "1" if vision else "0", "shape": shape}


@pytest.mark.sqlite
@pytest.mark.parametrize(("format", "raw"), SOURCES, ids=[f for f, _ in SOURCES])
def test_streamed_reads_send_the_bytes_of_the_whole_reads(
    api: Any, operator_client: Client, small_reads: None, format: str, raw: bytes
) -> None:
    conversation = imported(format, raw)
    assert conversation.message_count > 2
    cid = conversation.pk
    record = api.get(one(cid))
    assert record.streaming
    url = f"http://testserver{conversation.get_absolute_url()}"
    assert record.content == orjson.dumps(shapes.record_data(conversation, url=url))
    for vision, shape in TOGGLES:
        whole = selectors.replay_json(conversation, vision=vision, shape=shape)
        for response in (
            api.get(f"/api/conversations/{cid}/replay", **toggles(vision, shape)),
            operator_client.get(f"/c/{cid}/replay.json", toggles(vision, shape)),
        ):
            assert response.status_code == 200
            assert response.streaming
            assert response.content == whole, (vision, shape)
        text = selectors.markdown_export(conversation, vision=vision, shape=shape).encode()
        for response in (
            api.get(f"/api/conversations/{cid}/markdown", **toggles(vision, shape)),
            operator_client.get(f"/c/{cid}/export.md", toggles(vision, shape)),
        ):
            assert response.status_code == 200
            assert response.streaming
            assert response.content == text, (vision, shape)


POLICIES = [
    {"compact": "microcompact"},
    {"compact": "microcompact", "keep": "0"},
    {"compact": "clear_tool_uses", "trigger": "0"},
    {"compact": "clear_tool_uses", "trigger": "0", "keep": "1", "clear_tool_inputs": "true"},
    {"compact": "clear_tool_uses"},
    {"compact": "clear_tool_uses", "trigger": "0", "keep": "0", "clear_at_least": "1"},
    {"compact": "clear_tool_uses", "trigger": "0", "keep": "0", "clear_at_least": "200"},
    {"compact": "clear_tool_uses", "trigger": "0", "exclude_tools": "Bash,read"},
    {"compact": "clear_thinking"},
    {"compact": "clear_thinking", "keep": "0"},
    {"compact": "boundary"},
]


@pytest.mark.sqlite
@pytest.mark.parametrize(("format", "raw"), SOURCES, ids=[f for f, _ in SOURCES])
def test_compacted_payloads_stream_the_bytes_of_the_whole_read(
    api: Any, operator_client: Client, small_reads: None, format: str, raw: bytes
) -> None:
    """Every policy and toggle: the API's and the download's bytes are those of the payload
    built whole (`preview_counts.compacted_payload`), sent as they are read."""
    conversation = imported(format, raw)
    cid = conversation.pk
    for query in POLICIES:
        policy = Policy.from_query(query)
        assert policy is not None
        for vision, shape in TOGGLES:
            options = ReplayOptions(vision, cast(Shape, shape))
            whole = orjson.dumps(preview_counts.compacted_payload(conversation, options, policy))
            for response in (
                api.get(f"/api/conversations/{cid}/replay", **toggles(vision, shape), **query),
                operator_client.get(f"/c/{cid}/replay.json", toggles(vision, shape) | query),
            ):
                assert response.status_code == 200
                assert response.streaming, (query, vision, shape)
                assert response.content == whole, (query, vision, shape)


@pytest.mark.sqlite
def test_a_boundary_payload_streams_from_the_boundary(api: Any, small_reads: None) -> None:
    """Messages before the last boundary are left out, system messages too (the anthropic
    shape lifts only those after it)."""
    conversation = conversation_create(title="Boundary")
    for seq, role in enumerate(["system", "user", "assistant", "system", "user", "assistant"]):
        blocks = [TextIn(type="text", text=f"{seq:03d} {role}")]
        message_append(conversation=conversation, role=role, blocks=blocks)
    conversation.metadata = {"compact_boundaries": [{"seq": 1}, {"seq": 3}]}
    conversation.save(update_fields=["metadata"])
    policy = Policy(name="boundary")
    path = f"/api/conversations/{conversation.pk}/replay"
    for shape in ("openai", "anthropic"):
        options = ReplayOptions(True, cast(Shape, shape))
        whole = orjson.dumps(preview_counts.compacted_payload(conversation, options, policy))
        response = api.get(path, compact="boundary", shape=shape)
        assert response.streaming
        assert response.content == whole, shape
        body = orjson.loads(response.content)
        if shape == "anthropic":
            assert body["system"] == "003 system"
            assert [m["content"][:3] for m in body["messages"]] == ["004", "005"]
        else:
            assert [m["content"][:3] for m in body["messages"]] == ["003", "004", "005"]


@pytest.mark.sqlite
@pytest.mark.parametrize(("format", "raw"), SOURCES, ids=[f for f, _ in SOURCES])
def test_the_diff_of_two_shapes_aligns_as_the_whole_projections_do(
    operator_client: Client, format: str, raw: bytes
) -> None:
    """Read from the messages' starts, the page's rows are those of the two whole payloads
    aligned (on records whose texts fit a page's cut)."""
    conversation = imported(format, raw)
    for query, policy in (({}, None), ({"b_compact": "microcompact"}, "microcompact")):
        left = selectors.replay_payload(conversation, vision=True, shape="openai")
        options = ReplayOptions(True, "anthropic")
        if policy is None:
            right = selectors.replay_payload(conversation, vision=True, shape="anthropic")
        else:
            found = Policy.from_query({"compact": policy})
            assert found is not None
            right = preview_counts.compacted_payload(conversation, options, found)
        rows = diff.diff(left, right)[:DIFF_WINDOW]
        page = operator_client.get(
            f"/c/{conversation.pk}/diff", {"b_shape": "anthropic"} | query
        ).content.decode()
        assert re.findall(r'data-status="(\w+)"', page) == [r.status for r in rows], query


@pytest.mark.sqlite
def test_a_share_links_download_streams_the_projection_of_its_scope(
    db: None, small_reads: None
) -> None:
    format, raw = SOURCES[4]
    conversation = imported(format, raw)
    _, token = share_create(conversation=conversation, up_to_seq=4)
    response = Client().get(f"/s/{token}/replay.json")
    assert response.status_code == 200
    assert response.streaming
    whole = selectors.replay_json(conversation, vision=True, shape="openai", stop=5)
    assert response.content == whole
    assert len(orjson.loads(response.content)["messages"]) == 5


def texts(count: int, size: int = 10) -> Conversation:
    conversation = conversation_create(title="Pages")
    for seq in range(count):
        blocks = [TextIn(type="text", text=f"{seq:03d} " + "x" * size)]
        message_append(conversation=conversation, role="user", blocks=blocks)
    conversation.refresh_from_db()
    return conversation


def seqs(body: dict[str, Any]) -> list[int]:
    return [m["seq"] for m in body["messages"]]


@pytest.mark.sqlite
def test_the_record_pages_with_from_seq_and_limit(api: Any, small_reads: None) -> None:
    conversation = texts(7)
    whole = api.get(one(conversation.pk)).json()
    assert "next" not in whole  # the unpaginated default keeps its shape
    page = api.get(one(conversation.pk), limit="3").json()
    assert seqs(page) == [0, 1, 2]
    assert page["next"].startswith("http://testserver/api/conversations/")
    gathered = page["messages"]
    while page["next"]:
        page = api.get(page["next"].removeprefix("http://testserver")).json()
        gathered += page["messages"]
    assert gathered == whole["messages"]
    assert seqs(api.get(one(conversation.pk), from_seq="5").json()) == [5, 6]
    rest = api.get(one(conversation.pk), from_seq="4", limit="3").json()
    assert (seqs(rest), rest["next"]) == ([4, 5, 6], None)
    past = api.get(one(conversation.pk), from_seq="9").json()
    assert (past["messages"], past["next"], past["message_count"]) == ([], None, 7)
    others = {k: v for k, v in past.items() if k not in ("messages", "next")}
    assert others == {k: v for k, v in whole.items() if k != "messages"}


@pytest.mark.sqlite
@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "2.5"}, "limit"),
        ({"from_seq": "-1"}, "from_seq"),
        ({"from_seq": "<b>x</b>"}, "from_seq"),
        ({"from_seq": "99999999999"}, "from_seq"),
    ],
)
def test_bad_paging_is_a_400_naming_the_field(api: Any, query: dict[str, str], field: str) -> None:
    conversation = texts(1)
    response = api.get(one(conversation.pk), **query)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["field"] == field
    assert body["error"].startswith(f"{field} must be a whole number")


def test_a_record_deleted_while_it_streams_never_reads_whole(db: None, small_reads: None) -> None:
    conversation = texts(6)
    head = shapes.conversation_data(conversation, url="u")
    pieces = streams.record_pieces(conversation, head, start=0, stop=6)
    body = next(pieces) + next(pieces)  # the head and message 0
    conversation_delete(conversation=conversation)
    body += b"".join(pieces)
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(body)  # unterminated: never a shorter record that parses
    conversation = texts(6)
    replay = streams.replay_pieces(conversation, vision=True, shape="openai", stop=6)
    body = next(replay) + next(replay)
    conversation_delete(conversation=conversation)
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(body + b"".join(replay))
    conversation = texts(6)
    text = streams.markdown_pieces(conversation, vision=True, shape="openai", stop=6)
    start = next(text) + next(text)
    conversation_delete(conversation=conversation)
    assert (start + b"".join(text)).endswith(
        b"\n\n**Incomplete: the conversation was deleted while it was exported.**\n"
    )


async def asgi_get(path: str, token: str, reads: Callable[[], int]) -> tuple[int | None, bytes]:
    """GET `path` through the ASGI application daphne serves: how many messages had been
    read when the first body bytes were sent, and the body."""
    from replaysite.asgi import application

    first_at: int | None = None
    chunks: list[bytes] = []
    done = asyncio.Event()
    requests = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict[str, Any]:
        if requests:
            return requests.pop()
        await done.wait()  # no disconnect while the answer is sent
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal first_at
        if message["type"] == "http.response.start":
            assert message["status"] == 200
        elif message.get("body"):
            if first_at is None:
                first_at = reads()
            chunks.append(message["body"])
        elif not message.get("more_body"):
            done.set()

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 5000),
        "headers": [(b"host", b"testserver"), (b"authorization", f"Bearer {token}".encode())],
    }
    await application(scope, receive, send)
    return first_at, b"".join(chunks)


@pytest.mark.django_db(transaction=True)
@in_loop
async def test_the_first_bytes_leave_before_the_last_message_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the ASGI handler daphne runs: Django would read a sync iterator whole before
    sending its first byte (and a plain response is built whole)."""
    conversation = await sync_to_async(texts)(40, size=100_000)  # 4 MB
    _, token = await sync_to_async(api_token_create)(label="stream")
    monkeypatch.setattr(streams, "WINDOW", 4)
    monkeypatch.setattr(streams, "CHUNK_BYTES", 200_000)
    read = [0]  # messages read so far
    reader = selectors.message_rows_streamed

    def counted(*args: Any, **kwargs: Any) -> Any:
        for row in reader(*args, **kwargs):
            read[0] += 1
            yield row

    monkeypatch.setattr(selectors, "message_rows_streamed", counted)
    cid = conversation.pk
    replay = sync_to_async(selectors.replay_json)
    markdown = sync_to_async(selectors.markdown_export)
    for path, expected in (
        (one(cid), None),
        (
            f"/api/conversations/{cid}/replay",
            await replay(conversation, vision=True, shape="openai"),
        ),
        (
            f"/api/conversations/{cid}/markdown",
            (await markdown(conversation, vision=True, shape="openai")).encode(),
        ),
    ):
        read[0] = 0
        first_at, body = await asgi_get(path, token, lambda: read[0])
        assert first_at is not None and first_at < 40 // 2, (path, first_at)
        if expected is None:
            assert [m["seq"] for m in orjson.loads(body)["messages"]] == list(range(40))
        else:
            assert body == expected


@pytest.mark.sqlite
def test_a_streamed_read_fetches_its_block_batches_by_id_alone(db: None, small_reads: None) -> None:
    """Kept in the range's join, each batch made the database probe its id list once per
    message of the range: 0.6 s a batch at 1,000 messages on PostgreSQL."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    conversation = texts(7)
    with CaptureQueriesContext(connection) as queries:
        rows = list(selectors.message_rows_streamed(conversation, image_data=True))
    assert [r.seq for r in rows] == list(range(7))
    batches = [q["sql"] for q in queries if '"conversations_block"."id" IN' in q["sql"]]
    assert len(batches) >= 3
    assert all("conversations_message" not in sql for sql in batches)


@pytest.mark.sqlite
def test_the_markdown_export_heads_each_message_with_the_source_time_as_the_page_does(
    operator_client: Client,
) -> None:
    """A message's heading carries the source's own time (`metadata.timestamp`) where one
    is stored, in UTC, and the storage time otherwise, in both the whole and streamed
    exports (docs/contract.md §6)."""
    conversation = conversation_create(title="Times")
    for metadata in ({"timestamp": "2024-05-06T09:08:07+02:00"}, {"timestamp": "yesterday"}, {}):
        message_append(
            conversation=conversation,
            role="user",
            blocks=[TextIn(type="text", text="hi")],
            metadata=metadata,
        )
    rows = conversation.messages.order_by("seq")
    stored = [m.created_at.isoformat(timespec="seconds") for m in rows]
    whole = selectors.markdown_export(conversation, vision=True, shape="openai")
    streamed = operator_client.get(f"/c/{conversation.pk}/export.md").content.decode()
    for text in (whole, streamed):
        headings = re.findall(r"^### (#\d+ \w+ · .*)$", text, re.MULTILINE)
        assert headings == [
            "#0 user · 2024-05-06T07:08:07+00:00",
            f"#1 user · {stored[1]}",
            f"#2 user · {stored[2]}",
        ]


HUGE_MESSAGES = 30
HUGE = 10 * 1024 * 1024  # characters of each of its messages
# What one whole-record read may add to the server's RSS: the uncompacted streamed replay
# of this record adds 110-150 MB on a shared 2-core machine (a message of 10 MB is held a
# few times over while it is sent); whole, these reads added 770-1,200 MB.
GROWTH_MB = 200


def huge_record() -> Conversation:
    """30 messages × 10 MB: tool rounds (so microcompact clears results) and a system
    message (so the anthropic shape lifts one), each message's text 10 MB."""
    conversation = conversation_create(title="huge")
    line = "a line of a large tool result, repeated to ten megabytes\n"
    huge = (line * (HUGE // len(line) + 1))[:HUGE]
    for seq in range(HUGE_MESSAGES):
        blocks: list[Any]
        if seq == 0:
            role, blocks = "system", [TextIn(type="text", text=huge)]
        elif seq % 2:
            call = ToolUseIn(type="tool_use", id=f"c{seq}", name="read", input={"n": seq})
            role, blocks = "assistant", [TextIn(type="text", text=huge), call]
        else:
            result = ToolResultIn(
                type="tool_result", tool_use_id=f"c{seq - 1}", name="read", content=huge
            )
            role, blocks = "user", [result]
        message_append(conversation=conversation, role=role, blocks=blocks)
    conversation.refresh_from_db()
    return conversation


def rss_mb(pid: int, field: str) -> float:
    """`field` (VmRSS, or VmHWM: the peak since the last reset) of process `pid`, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc status")


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_whole_record_reads_with_a_policy_or_two_shapes_stay_bounded(
    daphne: Server, operator: Any
) -> None:
    """A real daphne serving a 30 × 10 MB record: the compacted payload (API and download)
    and the diff page of two shapes each add at most GROWTH_MB to the server's RSS (peak,
    reset before each read, over its RSS just before it); they held the record whole."""
    conversation = huge_record()
    _, token = api_token_create(label="huge")
    cid = conversation.pk
    pid = daphne.process.pid
    session = Client()
    session.force_login(operator)
    cookies = {name: morsel.value for name, morsel in session.cookies.items()}
    paths = [
        (f"/api/conversations/{cid}/replay?compact=microcompact", 100 * 1024 * 1024),
        (f"/c/{cid}/replay.json?compact=microcompact", 100 * 1024 * 1024),
        (f"/c/{cid}/diff?b_shape=anthropic", 0),
    ]
    with daphne.client(token) as client:
        client.cookies.update(cookies)
        assert client.get(f"/c/{cid}/diff?b_shape=anthropic&vision=0").status_code == 200
        for path, at_least in paths:
            before = rss_mb(pid, "VmRSS")
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak, from now
            size = 0
            with client.stream("GET", path) as response:
                assert response.status_code == 200, path
                for chunk in response.iter_raw():
                    size += len(chunk)
            assert size >= at_least, path
            grew = rss_mb(pid, "VmHWM") - before
            assert grew <= GROWTH_MB, (path, round(grew))
