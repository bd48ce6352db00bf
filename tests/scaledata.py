"""A scale fixture written straight into PostgreSQL with COPY (issue 18's benchmark).

`build(connection, messages=…)` stores agent conversations of 50–500 messages (a system
prompt, user turns, assistant turns with reasoning, text and tool calls with JSON input,
tool results of 1–20 KB of logs, code and listings, about 4 % of them errors), a few of
50,000 and one of 100,000 messages, with every block's search entry and every finder mark
made as the services make them — by the production functions, each distinct text once
(texts are drawn from a pool, each with words of its own in front so that rows differ).

Rows go in with COPY, indexes are built after the load: the fixture, not ingest, is
what this times (ingest is measured through the API by the benchmark).

Planted, for the benchmark's queries (`Planted`): a word in three blocks of the whole
store (`RARE`), one in about 300 (`UNCOMMON`), tool errors and an unanswered call near
the end of the 100,000-message conversation, and compaction boundaries in it.
"""

from __future__ import annotations

import io
import random
import string
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

RARE = "zanzibarquokka"
UNCOMMON = "heliotrope"
BIG = 100_000
LARGE = (50_000, 50_000)
POOL = 1500  # distinct texts of each kind

# fmt: off
COMMON = [
    "the", "a", "to", "of", "and", "in", "is", "for", "that", "it", "with", "on", "this",
    "file", "error", "test", "function", "return", "value", "agent", "tool", "result",
    "config", "request", "response", "model", "data", "user", "run", "check", "update",
    "import", "class", "def", "self", "none", "true", "false", "line", "path", "src",
]
# fmt: on


def _vocabulary(rng: random.Random, size: int = 30_000) -> list[str]:
    letters = string.ascii_lowercase
    return COMMON + [
        "".join(rng.choices(letters, k=rng.randint(3, 11))) for _ in range(size - len(COMMON))
    ]


def _zipf_words(rng: random.Random, vocabulary: list[str], count: int) -> list[str]:
    # Zipf-like: word rank r drawn with weight ~ 1/r (via a log-uniform rank).
    top = len(vocabulary)
    return [vocabulary[min(top - 1, int(top ** rng.random()) - 1)] for _ in range(count)]


def _prose(rng: random.Random, vocabulary: list[str], chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        sentence = " ".join(_zipf_words(rng, vocabulary, rng.randint(6, 18)))
        out.append(sentence.capitalize() + ".")
        size += len(out[-1]) + 1
    return " ".join(out)


def _tool_output(rng: random.Random, vocabulary: list[str], chars: int) -> str:
    """Logs, code and listings: lines from a few templates each (output repeats itself,
    as real output does), with paths, numbers and ids varying."""
    style = rng.choice(("log", "code", "listing"))
    templates = [_zipf_words(rng, vocabulary, rng.randint(3, 9)) for _ in range(rng.randint(4, 12))]
    lines: list[str] = []
    size = 0
    while size < chars:
        words = rng.choice(templates)
        match style:
            case "log":
                line = (
                    f"2026-11-{rng.randint(1, 30):02d}T{rng.randint(0, 23):02d}:"
                    f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z "
                    f"{rng.choice(('INFO', 'DEBUG', 'WARN'))} {' '.join(words)} "
                    f"id={rng.getrandbits(24):06x} took {rng.randint(1, 999)}ms"
                )
            case "code":
                line = (
                    f"{'    ' * rng.randint(0, 3)}{words[0]}_{words[-1]} = "
                    f"{words[1]}({', '.join(words[2:])})"
                )
            case _:
                line = (
                    f"src/{words[0]}/{'_'.join(words[1:3])}.py:{rng.randint(1, 900)}: "
                    f"{' '.join(words[3:])}"
                )
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


@dataclass
class Pool:
    """Texts drawn for blocks, each with its search words computed once."""

    rng: random.Random
    prose: list[tuple[str, str]] = field(default_factory=list)
    reasoning: list[tuple[str, str]] = field(default_factory=list)
    outputs: list[tuple[str, str]] = field(default_factory=list)
    inputs: list[tuple[str, str, str]] = field(default_factory=list)  # name, json, words


TOOLS = ["bash", "read_file", "grep", "edit_file", "web_search", "list_dir", "run_tests"]


def _pool(rng: random.Random) -> Pool:
    from conversations.core import search
    from conversations.core.blocks import ReasoningBlock, TextBlock, ToolResultBlock, ToolUseBlock

    vocabulary = _vocabulary(rng)
    pool = Pool(rng)
    for _ in range(POOL):
        text = _prose(rng, vocabulary, rng.choice((120, 300, 600, 1200)))
        pool.prose.append((text, search.index_words(search.block_text(TextBlock(text)))))
        text = _prose(rng, vocabulary, rng.choice((200, 500, 1500)))
        pool.reasoning.append((text, search.index_words(search.block_text(ReasoningBlock(text)))))
        name = rng.choice(TOOLS)
        # 1–20 KB, most of them small (the log-uniform size of real tool output).
        output = _tool_output(rng, vocabulary, int(1000 * 20 ** rng.random()))
        pool.outputs.append(
            (output, search.index_words(search.block_text(ToolResultBlock("", output, name))))
        )
        arguments = {"path": f"src/{_zipf_words(rng, vocabulary, 1)[0]}.py",
                     "command": " ".join(_zipf_words(rng, vocabulary, rng.randint(2, 12))),
                     "limit": rng.randint(1, 500)}  # fmt: skip
        input_json = orjson.dumps(arguments).decode()
        words = search.index_words(search.block_text(ToolUseBlock("", name, input_json)))
        pool.inputs.append((name, input_json, words))
    return pool


def _copy_text(value: str) -> str:
    return (
        value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    )


@dataclass
class Planted:
    """Where the benchmark's queries land."""

    big: uuid.UUID = uuid.UUID(int=0)
    big_errors: list[int] = field(default_factory=list)  # message seqs holding an error
    big_unanswered: list[int] = field(default_factory=list)
    big_boundaries: list[int] = field(default_factory=list)
    rare: list[tuple[uuid.UUID, int]] = field(default_factory=list)
    conversations: int = 0
    messages: int = 0
    blocks: int = 0
    request_bytes: int = 0  # the batch-API JSON of every message, as a client sends it


class Tables:
    """COPY buffers, flushed every few MB."""

    COLUMNS = {
        "conversations_conversation": "id, title, metadata, message_count, created_at, "
        "updated_at, block_count, error_count, model, unanswered_calls",
        "conversations_message": (
            "id, conversation_id, seq, role, block_count, created_at, metadata, varies, heaviest"
        ),
        "conversations_block": "id, message_id, seq, type, text, call_id, name, input_json, "
        "is_error, media_type, data",
        "conversations_searchentry": "conversation_id, message_seq, block_seq, words",
        "conversations_findermark": "conversation_id, message_seq, block_seq, kind, call_id",
    }

    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor
        self.buffers = {table: io.StringIO() for table in self.COLUMNS}
        self.extra: dict[str, str] = {}

    def row(self, table: str, line: str) -> None:
        buffer = self.buffers[table]
        buffer.write(line)
        if buffer.tell() > 8_000_000:
            self.flush(table)

    def flush(self, table: str | None = None) -> None:
        for name in [table] if table else list(self.COLUMNS):
            data = self.buffers[name].getvalue()
            if not data:
                continue
            with self.cursor.copy(f"COPY {name} ({self.COLUMNS[name]}) FROM STDIN") as copy:
                copy.write(data)
            self.buffers[name] = io.StringIO()


def _sizes(rng: random.Random, messages: int) -> list[int]:
    """Conversation sizes: the large ones first (when they fit), then 50–500 each."""
    sizes: list[int] = []
    left = messages
    for size in (BIG, *LARGE):
        if left >= 2 * size:
            sizes.append(size)
            left -= size
    while left > 0:
        size = min(left, rng.randint(50, 500))
        sizes.append(size)
        left -= size
    rng.shuffle(sizes)
    return sizes


def build(connection: Any, *, messages: int, seed: int = 18) -> Planted:
    """Store about `messages` messages through `connection` (psycopg, PostgreSQL)."""
    from conversations.core import search

    rng = random.Random(seed)
    pool = _pool(rng)
    planted = Planted()
    sizes = _sizes(rng, messages)
    rare_at = {rng.randrange(len(sizes)) for _ in range(3)}
    now = datetime.now(UTC)
    start = now - timedelta(days=180)
    step = (now - start) / max(1, messages)
    message_id = block_id = 0
    clock = start
    with connection.cursor() as cursor:
        tables = Tables(cursor)
        for number, size in enumerate(sizes):
            conversation = uuid.uuid4()
            big = size == BIG and not planted.big_errors
            if big:
                planted.big = conversation
            key = str(conversation)
            title = search.index_words(f"Agent run {number}")
            tables.row("conversations_searchentry", f"{key}\t\\N\t\\N\t{title}\n")
            created = clock
            errors = blocks_total = 0
            boundaries: list[int] = []
            open_call = ""
            for seq in range(size):
                clock += step
                message_id += 1
                role, blocks, meta = _message(rng, pool, seq, size, big, planted)
                if number in rare_at and seq == size // 4 * 2 + 1:  # a user's text
                    kind, text, *rest, words = blocks[0]
                    blocks[0] = (kind, f"{RARE} {text}", *rest, f"{RARE} {words}")
                    planted.rare.append((conversation, seq))
                if big and seq in (size // 3, 2 * size // 3):
                    boundaries.append(seq)
                for bseq, (kind, text, call_id, name, input_json, is_error, words) in enumerate(
                    blocks
                ):
                    block_id += 1
                    tables.row(
                        "conversations_block",
                        f"{block_id}\t{message_id}\t{bseq}\t{kind}\t{text}\t{call_id}\t{name}\t"
                        f"{input_json}\t{'t' if is_error else 'f'}\t\t\n",
                    )
                    if words:
                        tables.row("conversations_searchentry",
                                   f"{key}\t{seq}\t{bseq}\t{words}\n")  # fmt: skip
                    errors += is_error
                    if kind == "tool_use":
                        open_call = call_id
                    elif kind == "tool_result":
                        open_call = ""
                    if is_error:
                        tables.row("conversations_findermark",
                                   f"{key}\t{seq}\t{bseq}\terror\t{call_id}\n")  # fmt: skip
                tables.row(
                    "conversations_message",
                    f"{message_id}\t{key}\t{seq}\t{role}\t{len(blocks)}\t"
                    # Stored token figures are left unset (NULL): search does not read them.
                    f"{clock.isoformat()}\t{meta}\tf\t0\n",
                )
                blocks_total += len(blocks)
                planted.request_bytes += _request_bytes(role, blocks)
            if open_call:  # the last message's call: answered by nothing
                mark = f"{key}\t{size - 1}\t{len(blocks) - 1}\tunanswered\t{open_call}\n"
                tables.row("conversations_findermark", mark)
            metadata = {"source": "scale"}
            if boundaries:
                metadata["compact_boundaries"] = [{"seq": s} for s in boundaries]
                planted.big_boundaries = boundaries
            meta = _copy_text(orjson.dumps(metadata).decode())
            tables.row(
                "conversations_conversation",
                f"{key}\tAgent run {number}\t{meta}\t{size}\t{created.isoformat()}\t"
                f"{clock.isoformat()}\t{blocks_total}\t{errors}\tclaude-sonnet-4-5\t"
                f"{1 if open_call else 0}\n",
            )
            planted.conversations += 1
            planted.messages += size
            planted.blocks += blocks_total
        # Conversations first: the foreign keys are checked at commit, but keep it tidy.
        tables.flush("conversations_conversation")
        tables.flush()
        for table in ("conversations_message", "conversations_block"):
            cursor.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                f"(SELECT max(id) FROM {table}))"
            )
    return planted


USAGE = '{"model": "claude-sonnet-4-5", "usage": {"input_tokens": 1200, "output_tokens": 80}}'
Block = tuple[str, str, str, str, str, bool, str]  # kind, text, call id, name, input, error, words


def _message(
    rng: random.Random, pool: Pool, seq: int, size: int, big: bool, planted: Planted
) -> tuple[str, list[Block], str]:
    """Message `seq` of a conversation: system, then user / assistant rounds with tools.
    COPY-escaped texts; the words as the services index them."""
    if seq == 0:
        text, words = rng.choice(pool.prose)
        return "system", [("text", _copy_text(text), "", "", "", False, words)], "{}"
    phase = seq % 4
    call = f"toolu_{seq:07d}"
    if big and seq == size - 1:  # the largest conversation ends on a call never answered
        name, input_json, words = rng.choice(pool.inputs)
        planted.big_unanswered.append(seq)
        return (
            "assistant",
            [("tool_use", "", call, name, _copy_text(input_json), False, words)],
            USAGE,
        )
    if phase == 1:
        text, words = rng.choice(pool.prose)
        if rng.random() < 0.01:
            text, words = f"{UNCOMMON} {text}", f"{UNCOMMON} {words}"
        return "user", [("text", _copy_text(text), "", "", "", False, words)], "{}"
    if phase == 0:  # the answer after a tool round
        text, words = rng.choice(pool.prose)
        meta = (
            '{"model": "claude-sonnet-4-5", "usage": {"input_tokens": 1200, "output_tokens": 80}}'
        )
        return "assistant", [("text", _copy_text(text), "", "", "", False, words)], meta
    if phase == 2:
        blocks: list[Block] = []
        if rng.random() < 0.4:
            text, words = rng.choice(pool.reasoning)
            blocks.append(("reasoning", _copy_text(text), "", "", "", False, words))
        text, words = rng.choice(pool.prose)
        blocks.append(("text", _copy_text(text), "", "", "", False, words))
        if seq + 1 < size:
            name, input_json, words = rng.choice(pool.inputs)
            blocks.append(("tool_use", "", call, name, _copy_text(input_json), False, words))
        meta = (
            '{"model": "claude-sonnet-4-5", "usage": {"input_tokens": 1200, "output_tokens": 80}}'
        )
        return "assistant", blocks, meta
    # phase 3: the results of the call made at seq - 1
    previous = f"toolu_{seq - 1:07d}"
    output, words = rng.choice(pool.outputs)
    error = rng.random() < 0.04 and not big
    if big and seq > size * 0.95 and not planted.big_errors:
        error = True  # the error 95 % into the big conversation
    if error and big:
        planted.big_errors.append(seq)
    unique = f"run{seq:x} "
    name = "bash"
    return (
        "user",
        [("tool_result", _copy_text(unique + output), previous, name, "", error, unique + words)],
        "{}",
    )


def _request_bytes(role: str, blocks: list[Block]) -> int:
    """The size of the message as a batch POST carries it (texts unescaped)."""
    size = len(role) + 30
    for kind, text, call_id, name, input_json, _, _ in blocks:
        size += 30 + len(kind) + len(call_id) + len(name)
        size += len(text.encode()) + len(input_json.encode())
    return size


def rows_for_api(rng: random.Random, pool: Pool, count: int) -> Iterator[dict[str, Any]]:
    """Messages of the same shape as the fixture's, as the batch API takes them."""
    planted = Planted()
    for seq in range(1, count + 1):
        role, blocks, _ = _message(rng, pool, seq, count + 2, False, planted)
        out = []
        for kind, text, call_id, name, input_json, is_error, _ in blocks:
            plain = _unescape(text)
            match kind:
                case "text" | "reasoning":
                    out.append({"type": kind, "text": plain})
                case "tool_use":
                    out.append({"type": kind, "id": call_id, "name": name,
                                "input": orjson.loads(_unescape(input_json))})  # fmt: skip
                case _:
                    out.append({"type": kind, "tool_use_id": call_id, "content": plain,
                                "is_error": is_error})  # fmt: skip
        yield {"role": role, "blocks": out}


def _unescape(value: str) -> str:
    return (
        value.replace("\\n", "\n").replace("\\t", "\t").replace("\\r", "\r").replace("\\\\", "\\")
    )


def pool(seed: int = 18) -> Pool:
    return _pool(random.Random(seed))
