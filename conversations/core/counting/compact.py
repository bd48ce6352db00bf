"""Compaction previews (docs/contract.md §7): pure `compact(record, policy) → record` functions.

They run before the unchanged projection: a compacted record is a list of stored
messages like any other, so vision stays the projection's only variable. Each result
also says which blocks the policy changed and which messages it left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, assert_never
from urllib.parse import urlencode

from conversations.core.blocks import (
    Block,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from conversations.core.counting import tokens
from conversations.core.options import OptionError, flag
from conversations.core.replay import Shape, StoredMessage

PolicyName = Literal["microcompact", "clear_tool_uses", "clear_thinking", "boundary"]
POLICIES: tuple[PolicyName, ...] = ("microcompact", "clear_tool_uses", "clear_thinking", "boundary")
# Claude Code's microcompact text; the others are Replay's own, stated in
# docs/guide/context-pressure.md.
CLEARED_RESULT = "[Old tool result content cleared]"
CLEARED_TOOL_RESULT = "[Tool result cleared]"
CLEARED_INPUT = "{}"
CLEARED_REASONING = "[Reasoning cleared]"
# Where the importers store Claude Code's compact_boundary markers (conversation metadata,
# docs/contract.md §6.5): a list of objects whose "seq" names the first message after the boundary.
BOUNDARIES_KEY = "compact_boundaries"

DEFAULT_KEEP: dict[PolicyName, int] = {
    "microcompact": 3,
    "clear_tool_uses": 3,
    "clear_thinking": 1,
    "boundary": 0,
}
DEFAULT_TRIGGER = 100_000
MAX_NUMBER = 100_000_000
MAX_NAMES = 100
# Which parameters each policy takes; any other is a 400 naming it.
PARAMETERS: dict[PolicyName, tuple[str, ...]] = {
    "microcompact": ("keep",),
    "clear_tool_uses": ("keep", "trigger", "clear_at_least", "exclude_tools", "clear_tool_inputs"),
    "clear_thinking": ("keep",),
    "boundary": (),
}
ALL_PARAMETERS = ("keep", "trigger", "clear_at_least", "exclude_tools", "clear_tool_inputs")


@dataclass(frozen=True, slots=True)
class Policy:
    """One policy and its parameters, with docs/contract.md §7's defaults; parse a query with
    `from_query`.

    `clear_tool_inputs` is True (every cleared use), False, or the tool names whose inputs
    are cleared, as Anthropic's `clear_tool_uses_20250919` takes it.
    """

    name: PolicyName
    keep: int = 3
    trigger: int = DEFAULT_TRIGGER
    clear_at_least: int = 0
    exclude_tools: frozenset[str] = field(default_factory=frozenset)
    clear_tool_inputs: bool | frozenset[str] = False

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> Policy | None:
        """`?compact=POLICY&keep=…` → a Policy, None without `compact`; OptionError names
        the parameter that is unknown, out of range or not one this policy takes."""
        name = query.get("compact", "")
        if name in ("", "none"):
            stray = [p for p in ALL_PARAMETERS if p in query]
            if stray:
                raise OptionError(stray[0], f"{stray[0]} needs a compact policy (compact=…).")
            return None
        if name not in POLICIES:
            raise OptionError(
                "compact", f"compact must be one of {', '.join(POLICIES)}, not {name[:40]!r}."
            )
        policy: PolicyName = name
        for parameter in ALL_PARAMETERS:
            if parameter in query and parameter not in PARAMETERS[policy]:
                raise OptionError(parameter, f"{parameter} is not a parameter of compact={policy}.")
        keep = _number(query, "keep", DEFAULT_KEEP[policy])
        inputs: bool | frozenset[str]
        raw_inputs = query.get("clear_tool_inputs")
        if raw_inputs is None or raw_inputs.lower() in ("0", "false", "1", "true"):
            inputs = flag(query, "clear_tool_inputs", False)
        else:
            inputs = _names(query, "clear_tool_inputs")
            if not inputs:
                raise OptionError(
                    "clear_tool_inputs",
                    "clear_tool_inputs must be true, false or comma-separated tool names.",
                )
        return cls(
            name=policy,
            keep=keep,
            trigger=_number(query, "trigger", DEFAULT_TRIGGER),
            clear_at_least=_number(query, "clear_at_least", 0),
            exclude_tools=_names(query, "exclude_tools"),
            clear_tool_inputs=inputs,
        )

    def query(self) -> dict[str, str]:
        """The query parameters that give this policy back (defaults left out)."""
        params: dict[str, str] = {"compact": self.name}
        if self.keep != DEFAULT_KEEP[self.name] and "keep" in PARAMETERS[self.name]:
            params["keep"] = str(self.keep)
        if self.name == "clear_tool_uses":
            if self.trigger != DEFAULT_TRIGGER:
                params["trigger"] = str(self.trigger)
            if self.clear_at_least:
                params["clear_at_least"] = str(self.clear_at_least)
            if self.exclude_tools:
                params["exclude_tools"] = ",".join(sorted(self.exclude_tools))
            if self.clear_tool_inputs is True:
                params["clear_tool_inputs"] = "true"
            elif self.clear_tool_inputs:
                params["clear_tool_inputs"] = ",".join(sorted(self.clear_tool_inputs))
        return params

    def urlencode(self) -> str:
        return urlencode(self.query())

    def describe(self) -> str:
        """One line naming the policy and its parameters, for the page."""
        return " ".join(f"{k}={v}" for k, v in self.query().items())


def _number(query: Mapping[str, str], name: str, default: int) -> int:
    value = query.get(name)
    if value is None:
        return default
    value = value.replace("_", "")
    if not re.fullmatch(r"[0-9]{1,9}", value) or int(value) > MAX_NUMBER:
        raise OptionError(
            name, f"{name} must be a whole number from 0 to {MAX_NUMBER:,}, not {value[:40]!r}."
        )
    return int(value)


def _names(query: Mapping[str, str], name: str) -> frozenset[str]:
    value = query.get(name, "")
    names = [n.strip() for n in value.split(",") if n.strip()]
    if len(names) > MAX_NAMES or any(len(n) > 255 for n in names):
        raise OptionError(name, f"{name} takes up to {MAX_NAMES} tool names of 255 characters.")
    return frozenset(names)


@dataclass(frozen=True, slots=True)
class Compacted:
    """A compacted record: its messages with their stored seqs, the (seq, block seq) of every
    block the policy changed, how many messages it left out, and why nothing changed."""

    messages: tuple[StoredMessage, ...]
    seqs: tuple[int, ...]
    changed: frozenset[tuple[int, int]]
    dropped: int = 0
    note: str = ""


def unchanged(messages: Sequence[StoredMessage], seqs: Sequence[int], note: str) -> Compacted:
    return Compacted(tuple(messages), tuple(seqs), frozenset(), 0, note)


def compact(
    messages: Sequence[StoredMessage],
    policy: Policy,
    *,
    seqs: Sequence[int] | None = None,
    boundaries: Sequence[int] = (),
    vision: bool = True,
    shape: Shape = "openai",
    input_tokens: int | None = None,
    own_tokens: Mapping[tuple[int, int], int] | None = None,
) -> Compacted:
    """Apply `policy` to the record. `seqs` are the messages' stored seqs (0… by default),
    `boundaries` the seqs that start a stored compaction; vision and shape only matter to
    `clear_tool_uses`, whose trigger and clear_at_least are counted in tokens
    (`input_tokens`: the uncompacted payload's count, when the caller has it;
    `own_tokens`: (message index, block index) → a block's own count, when the caller has
    it, as for a record of the blocks a policy looks at with their texts cut)."""
    seqs = tuple(seqs) if seqs is not None else tuple(range(len(messages)))
    match policy.name:
        case "microcompact":
            return _microcompact(messages, seqs, policy.keep)
        case "clear_tool_uses":
            return _clear_tool_uses(
                messages, seqs, policy, vision, shape, input_tokens, own_tokens or {}
            )
        case "clear_thinking":
            return _clear_thinking(messages, seqs, policy.keep)
        case "boundary":
            return _boundary(messages, seqs, boundaries)
        case _:
            assert_never(policy.name)


def cleared(block: Block, marker: str) -> Block:
    """The block with the text a policy clears replaced by `marker`: a tool result's
    content, a tool use's input, a reasoning block's text. Text and images are never
    cleared: they come back as they are."""
    match block:
        case ToolResultBlock():
            return replace(block, content=marker)
        case ToolUseBlock():
            return replace(block, input_json=marker)
        case ReasoningBlock():
            return ReasoningBlock(marker)
        case TextBlock() | ImageBlock():
            return block
        case _:
            assert_never(block)


def clearable_text(block: Block) -> str:
    """The text `cleared` replaces ("" for a kind it never clears): a block that already
    holds its policy's marker is not changed again."""
    match block:
        case ToolResultBlock():
            return block.content
        case ToolUseBlock():
            return block.input_json
        case ReasoningBlock():
            return block.text
        case TextBlock() | ImageBlock():
            return ""
        case _:
            assert_never(block)


def _rewrite(
    messages: Sequence[StoredMessage],
    seqs: tuple[int, ...],
    changes: Mapping[tuple[int, int], Block],
) -> Compacted:
    """The record with the blocks at these (message index, block index) replaced."""
    out: list[StoredMessage] = []
    changed: set[tuple[int, int]] = set()
    for i, message in enumerate(messages):
        blocks = list(message.blocks)
        touched = False
        for j in range(len(blocks)):
            new = changes.get((i, j))
            if new is not None and new != blocks[j]:
                blocks[j] = new
                changed.add((seqs[i], j))
                touched = True
        out.append(replace(message, blocks=tuple(blocks)) if touched else message)
    return Compacted(tuple(out), seqs, frozenset(changed))


def _microcompact(messages: Sequence[StoredMessage], seqs: tuple[int, ...], keep: int) -> Compacted:
    """Every tool_result but the `keep` most recent: content cleared, name and flag kept."""
    results = [
        (i, j)
        for i, m in enumerate(messages)
        for j, b in enumerate(m.blocks)
        if type(b) is ToolResultBlock
    ]
    old = results[: max(0, len(results) - keep)]
    changes: dict[tuple[int, int], Block] = {}
    for i, j in old:
        block = messages[i].blocks[j]
        changes[(i, j)] = cleared(block, CLEARED_RESULT)
    if not old:
        return unchanged(messages, seqs, f"{len(results)} tool results, all within keep={keep}.")
    return _rewrite(messages, seqs, changes)


@dataclass
class _ToolUse:
    """One tool use as Anthropic counts them: the call and its results, by call id (a result
    without its call is a use of its own)."""

    name: str
    call: tuple[int, int] | None = None
    results: list[tuple[int, int]] = field(default_factory=list)


def _tool_uses(messages: Sequence[StoredMessage]) -> list[_ToolUse]:
    uses: list[_ToolUse] = []
    open_calls: dict[str, _ToolUse] = {}
    for i, m in enumerate(messages):
        for j, b in enumerate(m.blocks):
            if type(b) is ToolUseBlock:
                use = _ToolUse(b.name, call=(i, j))
                uses.append(use)
                open_calls[b.id] = use
            elif type(b) is ToolResultBlock:
                found = open_calls.get(b.tool_use_id)
                if found is None:
                    found = _ToolUse(b.name)
                    uses.append(found)
                found.results.append((i, j))
    return uses


def _clear_tool_uses(
    messages: Sequence[StoredMessage],
    seqs: tuple[int, ...],
    policy: Policy,
    vision: bool,
    shape: Shape,
    input_tokens: int | None,
    own_tokens: Mapping[tuple[int, int], int],
) -> Compacted:
    """Anthropic's clear_tool_uses_20250919: at or over `trigger` input tokens, every tool
    use but the `keep` most recent (and those of `exclude_tools`) has its results cleared,
    and its input too when `clear_tool_inputs` says so; unless that frees fewer than
    `clear_at_least` tokens, in which case nothing is cleared."""
    before = input_tokens
    if before is None:
        before = tokens.payload_count(messages, vision=vision, shape=shape).total
    if before < policy.trigger:
        return unchanged(
            messages, seqs, f"≈{before:,} input tokens, under the trigger of {policy.trigger:,}."
        )
    uses = _tool_uses(messages)
    eligible = [u for u in uses[: max(0, len(uses) - policy.keep)]
                if u.name not in policy.exclude_tools]  # fmt: skip
    changes: dict[tuple[int, int], Block] = {}
    for use in eligible:
        for i, j in use.results:
            changes[(i, j)] = cleared(messages[i].blocks[j], CLEARED_TOOL_RESULT)
        inputs = policy.clear_tool_inputs
        if use.call is not None and (inputs is True or (inputs and use.name in inputs)):
            i, j = use.call
            changes[(i, j)] = cleared(messages[i].blocks[j], CLEARED_INPUT)
    result = _rewrite(messages, seqs, changes)
    if not result.changed:
        return unchanged(messages, seqs, f"{len(uses)} tool uses, none to clear.")
    if policy.clear_at_least:
        # Replacing a block's text by a marker changes only that block's own count.
        def own(i: int, j: int) -> int:
            if (i, j) in own_tokens:
                return own_tokens[(i, j)]
            return tokens.block_tokens(messages[i].blocks[j], vision=vision, shape=shape)

        freed = sum(
            own(i, j) - tokens.block_tokens(new, vision=vision, shape=shape)
            for (i, j), new in changes.items()
        )
        if freed < policy.clear_at_least:
            return unchanged(
                messages,
                seqs,
                f"clearing frees ≈{freed:,} tokens, under clear_at_least="
                f"{policy.clear_at_least:,}.",
            )
    return result


def _clear_thinking(
    messages: Sequence[StoredMessage], seqs: tuple[int, ...], keep: int
) -> Compacted:
    """Reasoning outside the `keep` most recent assistant messages → `[Reasoning cleared]`."""
    assistant = [i for i, m in enumerate(messages) if m.role == "assistant"]
    kept = set(assistant[len(assistant) - keep :]) if keep else set()
    changes: dict[tuple[int, int], Block] = {
        (i, j): cleared(b, CLEARED_REASONING)
        for i, m in enumerate(messages)
        if i not in kept
        for j, b in enumerate(m.blocks)
        if type(b) is ReasoningBlock
    }
    if not changes:
        return unchanged(messages, seqs, "No reasoning outside the kept assistant turns.")
    return _rewrite(messages, seqs, changes)


def _boundary(
    messages: Sequence[StoredMessage], seqs: tuple[int, ...], boundaries: Sequence[int]
) -> Compacted:
    """From the last stored compaction boundary on: what the model still receives."""
    if not boundaries:
        return unchanged(messages, seqs, "No compaction boundary is stored.")
    last = max(boundaries)
    kept = [i for i, seq in enumerate(seqs) if seq >= last]
    return Compacted(
        tuple(messages[i] for i in kept),
        tuple(seqs[i] for i in kept),
        frozenset(),
        len(messages) - len(kept),
        f"From the boundary before message #{last}.",
    )


def payload_policy(query: Mapping[str, str], metadata: object) -> Policy | None:
    """The policy a payload is read under: `?compact=` when given, `none` for the whole
    record, else the last stored boundary's when there is one (after a compaction the
    request starts at the boundary, docs/contract.md §7)."""
    policy = Policy.from_query(query)
    if policy is None and "compact" not in query and boundary_seqs(metadata):
        return Policy(name="boundary", keep=DEFAULT_KEEP["boundary"])
    return policy


def boundary_seqs(metadata: object) -> list[int]:
    """The seqs the stored compaction boundaries name, from conversation metadata."""
    if not isinstance(metadata, dict):
        return []
    marks = metadata.get(BOUNDARIES_KEY)
    if not isinstance(marks, list):
        return []
    seqs = []
    for mark in marks:
        seq = mark.get("seq") if isinstance(mark, dict) else mark
        if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0:
            seqs.append(seq)
    return seqs
