"""Following live sources (pure): complete lines of a growing file, its identity, and the
suffix rule for sources that repeat the whole history each time (OTel GenAI spans).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

HEAD_BYTES = 4096  # how much of a file's start tells a replaced file from a grown one
FINGERPRINT_KEY = "fingerprint"


def complete_lines(data: bytes) -> tuple[list[bytes], int]:
    """The complete lines in `data` (without their newline) and how many bytes they take;
    a last line without its newline is still being written and waits for the next read."""
    end = data.rfind(b"\n")
    if end < 0:
        return [], 0
    return data[:end].split(b"\n"), end + 1


def head_digest(head: bytes) -> str:
    return hashlib.sha256(head).hexdigest()


@dataclass(frozen=True, slots=True)
class Position:
    """Where a follower stopped in a file: `offset` is just past the last line it stored;
    `head_len` and `head` (a digest) identify the file's first bytes at that time."""

    offset: int
    head_len: int
    head: str


def still_the_same_file(position: Position, size: int, head: bytes) -> bool:
    """Whether a file is the one `position` was read from, grown or not: it is no shorter
    than what was read and starts with the same bytes. (A rotated or replaced file, or one
    truncated and written again, is not; inode numbers are not trusted, since network
    filesystems and atomic-rename writers change them for the same content.)"""
    if position.head_len == 0:
        return position.offset == 0  # nothing read yet: any file is where it starts
    if size < position.offset or len(head) < position.head_len:
        return False
    return head_digest(head[: position.head_len]) == position.head


def fingerprint(role: str, blocks: Sequence[dict[str, Any]]) -> str:
    """A message's stable identity: its role and its blocks' stored fields (not `origin`,
    not metadata, which differ between a span's output and the next span's input)."""
    content = [{k: v for k, v in block.items() if k != "origin"} for block in blocks]
    text = json.dumps([role, content], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def chain(fingerprints: Sequence[str]) -> list[str]:
    """The history's fingerprint after each message: each one names the whole prefix, so
    one stored value tells whether a span repeats the stored history up to there."""
    out: list[str] = []
    previous = ""
    for value in fingerprints:
        previous = hashlib.sha256(f"{previous}:{value}".encode()).hexdigest()
        out.append(previous)
    return out


@dataclass(frozen=True, slots=True)
class Continuation:
    """What a span adds to the stored history: its messages from `start` on (none when
    it only repeats what is stored), unless it `diverges` from the stored history."""

    start: int
    diverges: bool = False


def compared_index(span_length: int, stored_count: int) -> int | None:
    """The one stored message whose chain value the suffix rule compares (None: none)."""
    shared = min(span_length, stored_count)
    return shared - 1 if shared else None


def continuation(chained: Sequence[str], stored_count: int, stored: str | None) -> Continuation:
    """The suffix rule: `chained` is a span's whole history as `chain` values and `stored`
    the stored chain value at `compared_index`. The span continues the stored history
    when they agree there; then only what it holds past the stored messages is new."""
    index = compared_index(len(chained), stored_count)
    if index is None:
        return Continuation(start=0)
    if stored != chained[index]:
        return Continuation(start=len(chained), diverges=True)
    return Continuation(start=min(stored_count, len(chained)))


def first_difference(chained: Sequence[str], stored: Sequence[str]) -> int:
    """The first message where a diverging span and the stored history disagree."""
    for index, (mine, theirs) in enumerate(zip(chained, stored, strict=False)):
        if mine != theirs:
            return index
    return min(len(chained), len(stored))


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A followed source's next message; `source_ids` name the source elements (Claude
    Code line uuids) it was read from, so that reading them again stores nothing."""

    role: str
    blocks: list[dict[str, Any]]
    metadata: dict[str, Any]
    source_ids: tuple[str, ...]
    # A compaction boundary just before this message (docs/contract.md §6 rule 5), if any.
    marker: dict[str, Any] | None = None
    # What its blocks could not hold (`block` counts from its first block).
    gaps: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class MoreBlocks:
    """Blocks that continue the latest message (a Claude Code line of the same turn)."""

    blocks: list[dict[str, Any]]
    metadata: dict[str, Any]
    source_ids: tuple[str, ...]
    gaps: tuple[dict[str, Any], ...] = ()  # `block` counts from the first of these blocks


@dataclass(frozen=True, slots=True)
class Describe:
    """A change to what describes the conversation: a title, or metadata keys to set."""

    title: str | None = None
    metadata: dict[str, Any] | None = None


Step = NewMessage | MoreBlocks | Describe


def merge_provenance(metadata: dict[str, Any], newer: dict[str, Any]) -> dict[str, Any]:
    """A message's metadata once one more of its lines is stored, as the import keeps it:
    its first uuid and timestamp, the other uuids listed, the latest usage and stop reason."""
    merged = dict(metadata)
    uuid = newer.get("uuid")
    if uuid is not None:
        uuids = list(merged.get("uuids") or [merged.get("uuid")])
        if uuid not in uuids:
            uuids.append(uuid)
        merged["uuids"] = uuids
    for key in ("usage", "stop_reason"):
        if key in newer:
            merged[key] = newer[key]
    return merged


def source_ids(metadata: dict[str, Any]) -> set[str]:
    """The uuids of the source lines a stored message was read from."""
    ids = {metadata["uuid"]} if isinstance(metadata.get("uuid"), str) else set()
    uuids = metadata.get("uuids")
    if isinstance(uuids, list):
        ids.update(u for u in uuids if isinstance(u, str))
    return ids


def placed_gap(gap: dict[str, Any], message: int, first_block: int) -> dict[str, Any]:
    """A gap of a step, placed: in message `message`, counting blocks from `first_block`."""
    placed = gap | {"message": message}
    if isinstance(gap.get("block"), int):
        placed["block"] = gap["block"] + first_block
    return placed
