"""`claude-code`: a Claude Code session file (JSON Lines, one content block per line).

`SessionMapper` is a pure state machine fed parsed lines one at a time; it answers with
actions (a new message, blocks appended to message k, a marker before the next message, a
title, an ignored line). `manage.py tail` applies them as lines arrive; `read` feeds all
lines, then keeps the main chain (docs/contract.md §6 rule 5) and turns sidechains into linked
imports."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from conversations.core import strictjson
from conversations.core.blocks import JSONObject, Role
from conversations.core.importers import anthropic, common
from conversations.core.importers.common import (
    Builder,
    Gap,
    Imported,
    ImportedMessage,
    ImportFormatError,
)

SESSION_KEYS = ("sessionId", "cwd", "gitBranch", "version")
# Every line of a session file is an object with a `type` and at least one of these.
SESSION_LINE_KEYS = {"uuid", "parentUuid", "sessionId", "leafUuid", "messageId"}
SIDECHAIN_KEYS = ("agentId", "slug")
NOT_RECORDED = (
    ("system prompt", "Claude Code session files do not record it"),
    ("tool definitions", "Claude Code session files do not record them"),
)
LONG = 4096


@dataclass(frozen=True, slots=True)
class NewMessage:
    """Start message number `index` (0, 1, 2… in the order they are announced)."""

    index: int
    role: Role
    blocks: list[common.BlockDict]
    metadata: JSONObject
    gaps: list[Gap]  # `block` counts from this action's first block; `message` is None
    uuid: str | None


@dataclass(frozen=True, slots=True)
class AppendBlocks:
    """Append `blocks` to message `index`; `metadata` holds the line's newer provenance."""

    index: int
    blocks: list[common.BlockDict]
    metadata: JSONObject
    gaps: list[Gap]
    uuid: str | None


@dataclass(frozen=True, slots=True)
class Marker:
    """A compaction boundary: stored in the metadata of the next new message."""

    kind: str
    detail: JSONObject
    uuid: str | None


@dataclass(frozen=True, slots=True)
class Title:
    text: str
    leaf_uuid: str | None


@dataclass(frozen=True, slots=True)
class Ignored:
    """A line that is not a message (progress, snapshot, queue, other system lines)."""

    kind: str


Action: TypeAlias = NewMessage | AppendBlocks | Marker | Title | Ignored


@dataclass(slots=True)
class SessionMapper:
    """One session's lines → actions. Consecutive assistant lines with the same
    `message.id` are one message; consecutive tool-result lines are one user message."""

    announced: int = 0
    _assistant: tuple[int, str] | None = None  # (index, message.id) of the open message
    _results: int | None = None  # index of the open user message of tool results
    session: JSONObject = field(default_factory=dict)

    def feed(self, line: Any, where: str) -> list[Action]:
        """The actions for one parsed line; ImportFormatError (naming `where`) if malformed."""
        common.require(line, dict, where, "an object")
        kind = line.get("type")
        if kind in ("user", "assistant"):
            for key in SESSION_KEYS:
                if key in line and key not in self.session:
                    self.session[key] = line[key]
            return [self._message(line, where)]
        # Progress, snapshot, queue and summary lines interleave with a message's lines
        # without ending it; only a compaction boundary does.
        if kind == "summary":
            return [Title(str(line.get("summary", "")), line.get("leafUuid"))]
        if kind == "system" and line.get("subtype") == "compact_boundary":
            self._assistant, self._results = None, None
            detail: JSONObject = {"uuid": line.get("uuid"), "timestamp": line.get("timestamp")}
            compact = line.get("compactMetadata")
            if isinstance(compact, dict):
                detail.update(compact)
            return [Marker("compact_boundary", detail, line.get("uuid"))]
        if kind == "system":
            return [Ignored(f"system:{line.get('subtype') or 'other'}")]
        return [Ignored(str(kind or "untyped"))]

    def _message(self, line: dict[str, Any], where: str) -> Action:
        source = common.require(line.get("message"), dict, f"{where}.message", "an object")
        role = source.get("role", line["type"])
        if role not in ("user", "assistant"):
            raise ImportFormatError(f"{where}.message.role", f"{role!r} is not user or assistant")
        if "content" not in source:
            raise ImportFormatError(f"{where}.message.content", "is required")
        scratch = Imported(format="claude-code")
        builder = Builder(scratch)
        message = builder.message(role)
        anthropic.add_content(builder, message, source["content"], f"{where}.message.content")
        blocks, gaps = (
            message.blocks,
            [Gap(g.kind, g.detail, g.where, None, g.block) for g in scratch.gaps],
        )
        uuid = line.get("uuid")
        metadata = _provenance(line, source)
        if role == "assistant":
            self._results = None
            message_id = source.get("id")
            if self._assistant is not None and message_id and self._assistant[1] == message_id:
                return AppendBlocks(self._assistant[0], blocks, metadata, gaps, uuid)
            action = self._new(role, blocks, metadata, gaps, uuid)
            self._assistant = (action.index, message_id) if message_id else None
            return action
        self._assistant = None
        results_only = _is_result_line(source)
        extra = line.get("toolUseResult")
        if results_only and isinstance(extra, dict | list):
            blocks[0].setdefault("origin", {})["toolUseResult"] = _abridged(extra)
        if results_only and self._results is not None:
            return AppendBlocks(self._results, blocks, metadata, gaps, uuid)
        action = self._new(role, blocks, metadata, gaps, uuid)
        self._results = action.index if results_only else None
        return action

    def _new(
        self,
        role: Role,
        blocks: list[common.BlockDict],
        metadata: JSONObject,
        gaps: list[Gap],
        uuid: str | None,
    ) -> NewMessage:
        action = NewMessage(self.announced, role, blocks, metadata, gaps, uuid)
        self.announced += 1
        return action


def _is_result_line(source: dict[str, Any]) -> bool:
    content = source.get("content")
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    )


def _provenance(line: dict[str, Any], source: dict[str, Any]) -> JSONObject:
    metadata: JSONObject = {}
    for key in ("uuid", "timestamp", "requestId"):
        if key in line:
            metadata[key] = line[key]
    for key in ("id", "model", "stop_reason", "usage"):
        if source.get(key) is not None:
            metadata[key] = source[key]
    for key in ("isMeta", "isCompactSummary", "isVisibleInTranscriptOnly"):
        if line.get(key):
            metadata[key] = True
    return metadata


def _abridged(value: Any) -> Any:
    """`toolUseResult` (Claude Code's own view of a result) without long strings: the
    result block already holds what the model saw."""
    if isinstance(value, dict):
        return {key: _abridged(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_abridged(item) for item in value]
    if isinstance(value, str) and len(value) > LONG:
        return f"[{len(value)} characters, not kept here]"
    return value


# The batch import: feed every line, then keep the main chain.


@dataclass(slots=True)
class _Node:
    parent: str | None
    logical: str | None
    line: int


@dataclass(slots=True)
class _Session:
    key: str
    mapper: SessionMapper = field(default_factory=SessionMapper)
    actions: list[tuple[int, Action]] = field(default_factory=list)
    first_line: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class _Chain:
    """What the chain resolution needs of every line: tree links, message ids, call ids."""

    nodes: dict[str, _Node] = field(default_factory=dict)
    last: str | None = None
    message_ids: dict[str, str] = field(default_factory=dict)  # uuid → message.id
    calls: dict[str, list[str]] = field(default_factory=dict)  # uuid → tool_use ids
    answers: dict[str, list[str]] = field(default_factory=dict)  # uuid → answered ids


def read(lines: Iterable[bytes | str]) -> Imported:
    """A whole session file; ImportFormatError names the line (1-based) that is not JSON
    or not a session line. Progress, snapshot and queue lines are counted in `stats`."""
    sessions: dict[str, _Session] = {}
    chains: dict[str, _Chain] = {}
    side_of: dict[str, str] = {}  # sidechain line uuid → its session key
    ignored: dict[str, int] = {}
    total = 0
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = f"line {number}"
        try:
            line = strictjson.loads(raw)
        except strictjson.StrictJSONError as exc:
            at = f"{where}, {exc.path}" if exc.path else where
            raise ImportFormatError(at, exc.reason) from None
        if not isinstance(line, dict):
            raise ImportFormatError(where, "must be a JSON object")
        if not isinstance(line.get("type"), str) or not SESSION_LINE_KEYS & set(line):
            # Another format's JSON on one line would otherwise be an empty session.
            raise ImportFormatError(
                where,
                "is not a Claude Code session line (an object with `type` and one of "
                f"{', '.join(f'`{k}`' for k in sorted(SESSION_LINE_KEYS))})",
            )
        total += 1
        key = _session_key(line, side_of)
        session = sessions.get(key)
        if session is None:
            session = sessions[key] = _Session(key, first_line=_first(line))
            chains[key] = _Chain()
        _note_chain(chains[key], line, number)
        for action in session.mapper.feed(line, where):
            if isinstance(action, Ignored):
                ignored[action.kind] = ignored.get(action.kind, 0) + 1
            session.actions.append((number, action))
    if total == 0:
        raise ImportFormatError("line 1", "the file holds no session lines")
    keys = list(sessions)
    main_key = "main" if "main" in sessions and _has_messages(sessions["main"]) else None
    if main_key is None:
        main_key = next((k for k in keys if _has_messages(sessions[k])), keys[0])
    results = {key: _resolve(sessions[key], chains[key]) for key in keys}
    main = results[main_key]
    main.linked = [results[key] for key in keys if key != main_key and results[key].messages]
    main.stats.update({"lines": total, **{f"ignored:{k}": v for k, v in sorted(ignored.items())}})
    return main


def _session_key(line: dict[str, Any], side_of: dict[str, str]) -> str:
    if not line.get("isSidechain"):
        return "main"
    uuid = line.get("uuid")
    parent = line.get("parentUuid")
    key = side_of.get(parent) if isinstance(parent, str) else None
    if key is None:
        key = str(line.get("agentId") or uuid or "sidechain")
    if isinstance(uuid, str):
        side_of[uuid] = key
    return key


def _first(line: dict[str, Any]) -> dict[str, Any]:
    return {
        key: line[key] for key in SESSION_KEYS + SIDECHAIN_KEYS + ("isSidechain",) if key in line
    }


def _note_chain(chain: _Chain, line: dict[str, Any], number: int) -> None:
    uuid = line.get("uuid")
    if not isinstance(uuid, str):
        return
    parent = line.get("parentUuid")
    logical = line.get("logicalParentUuid")
    chain.nodes[uuid] = _Node(
        parent if isinstance(parent, str) else None,
        logical if isinstance(logical, str) else None,
        number,
    )
    chain.last = uuid
    message = line.get("message")
    if not isinstance(message, dict):
        return
    if isinstance(message.get("id"), str):
        chain.message_ids[uuid] = message["id"]
    content = message.get("content")
    if isinstance(content, list):
        calls = [
            b["id"]
            for b in content
            if isinstance(b, dict)
            and b.get("type") in anthropic.TOOL_USE_TYPES
            and isinstance(b.get("id"), str)
        ]
        answers = [
            b["tool_use_id"]
            for b in content
            if isinstance(b, dict)
            and str(b.get("type", "")).endswith("tool_result")
            and isinstance(b.get("tool_use_id"), str)
        ]
        if calls:
            chain.calls[uuid] = calls
        if answers:
            chain.answers[uuid] = answers


def _main_chain(chain: _Chain) -> set[str]:
    """The uuids from the last line back to the root (through `logicalParentUuid` at a
    compact boundary), plus lines of kept message ids and results answering kept calls."""
    kept: set[str] = set()
    current = chain.last
    while current is not None and current not in kept:
        kept.add(current)
        node = chain.nodes.get(current)
        if node is None:
            break
        current = node.parent or node.logical
    kept_ids = {chain.message_ids[u] for u in kept if u in chain.message_ids}
    kept.update(u for u, mid in chain.message_ids.items() if mid in kept_ids)
    kept_calls = {call for u in kept for call in chain.calls.get(u, ())}
    kept.update(u for u, ids in chain.answers.items() if any(i in kept_calls for i in ids))
    return kept


def _has_messages(session: _Session) -> bool:
    return any(isinstance(a, NewMessage) for _n, a in session.actions)


def _resolve(session: _Session, chain: _Chain) -> Imported:
    kept = _main_chain(chain)
    result = Imported(format="claude-code")
    result.metadata = dict(session.first_line)
    result.metadata.update(session.mapper.session)
    placed: dict[int, int] = {}  # mapper's message index → index in the import
    marker: JSONObject | None = None
    titles: list[Title] = []
    abandoned: list[int] = []
    for number, action in session.actions:
        match action:
            case NewMessage() | AppendBlocks():
                if action.uuid is not None and action.uuid not in kept:
                    abandoned.append(number)
                    continue
                target = placed.get(action.index)
                if target is None:
                    role: Role = action.role if isinstance(action, NewMessage) else "assistant"
                    metadata = dict(action.metadata)
                    if marker is not None:
                        metadata["compact_boundary"] = marker
                        result.metadata.setdefault("compact_boundaries", []).append(  # type: ignore[union-attr]
                            {**marker, "seq": len(result.messages)}
                        )
                        marker = None
                    result.messages.append(ImportedMessage(role, [], metadata))
                    target = placed[action.index] = len(result.messages) - 1
                else:
                    _merge_provenance(result.messages[target].metadata, action.metadata)
                message = result.messages[target]
                offset = len(message.blocks)
                message.blocks.extend(action.blocks)
                for gap in action.gaps:
                    block = None if gap.block is None else gap.block + offset
                    result.gaps.append(Gap(gap.kind, gap.detail, gap.where, target, block))
            case Marker():
                if action.uuid is None or action.uuid in kept:
                    marker = {"kind": action.kind, **action.detail}
            case Title():
                titles.append(action)
            case Ignored():
                result.count("ignored_lines")
    chosen = [t for t in titles if t.leaf_uuid in kept] or titles
    if chosen:
        result.title = chosen[-1].text
    for kind, detail in NOT_RECORDED:
        result.gaps.append(Gap(kind, detail, ""))
    if abandoned:
        shown = ", ".join(str(n) for n in abandoned[:20]) + ("…" if len(abandoned) > 20 else "")
        result.gaps.append(
            Gap("abandoned branch", f"{len(abandoned)} lines off the main chain", f"lines {shown}")
        )
    result.stats["abandoned_lines"] = len(abandoned)
    common.resolve_names(result.messages)
    return result


def _merge_provenance(metadata: JSONObject, newer: JSONObject) -> None:
    """A message written over several lines: keep its first uuid and timestamp, list the
    other uuids, and take the latest usage and stop reason."""
    uuid = newer.get("uuid")
    if uuid is not None:
        metadata.setdefault("uuids", [metadata.get("uuid")])
        metadata["uuids"].append(uuid)  # type: ignore[union-attr]
    for key in ("usage", "stop_reason"):
        if key in newer:
            metadata[key] = newer[key]
