"""A message's token figures as the record stores them (docs/contract.md §7), and its count
for any toggles read back from them without its texts.

Pure (no Django). Each block is counted once, when it is stored (its own tokens with the
default toggles: vision on, openai); a message keeps what its count needs besides those
(`figures`): its own tokens by block kind, how many blocks it has and which are blank,
and, when it holds an image, its whole count for each of the four toggle pairs (an image
part splits the blank runs the projection leaves out, so no sum gives it). Every other
message's count for any toggles follows from those sums (`count`), exactly as
`tokens.message_count` counts it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from conversations.core.blocks import BlockKind, Role
from conversations.core.counting import tokens
from conversations.core.replay import Shape

DEFAULT: tuple[bool, Shape] = (True, "openai")
TOGGLES: tuple[tuple[bool, Shape], ...] = (
    (True, "openai"),
    (False, "openai"),
    (True, "anthropic"),
    (False, "anthropic"),
)


def toggle_key(vision: bool, shape: Shape) -> str:
    return f"{int(vision)}{shape}"


@dataclass(frozen=True, slots=True)
class StoredFacts:
    """One stored block as a count needs it: its kind, its own tokens with the default
    toggles, whether it is blank, and an image's media type and size."""

    kind: BlockKind
    tokens: int
    blank: bool = False
    media_type: str = ""
    width: int | None = None
    height: int | None = None

    def own(self, vision: bool, shape: Shape) -> int:
        if self.kind == "image":
            return tokens.image_own(
                self.media_type, self.width, self.height, vision=vision, shape=shape
            )
        return self.tokens


def exact_count(
    role: Role, facts: Sequence[StoredFacts], *, vision: bool, shape: Shape
) -> tokens.MessageCount:
    """The message's count from its blocks' facts, block by block (`sent` included)."""
    return tokens.count_of_facts(
        role,
        [tokens.BlockFacts(f.kind, f.blank) for f in facts],
        [f.own(vision, shape) for f in facts],
        vision=vision,
        shape=shape,
    )


def figures(role: Role, facts: Sequence[StoredFacts]) -> dict[str, Any]:
    """What a message stores besides its blocks' own tokens (JSON): `o` own tokens by
    block kind, `n` blocks, `bl` the blank ones, and `t` with an image: [tokens, framing,
    by kind] for each toggle pair."""
    own: dict[str, int] = {}
    for fact in facts:
        own[fact.kind] = own.get(fact.kind, 0) + fact.tokens
    data: dict[str, Any] = {"o": own, "n": len(facts)}
    blank = [i for i, f in enumerate(facts) if f.blank]
    if blank:
        data["bl"] = blank
    if any(f.kind == "image" for f in facts):
        data["t"] = {}
        for vision, shape in TOGGLES:
            c = exact_count(role, facts, vision=vision, shape=shape)
            data["t"][toggle_key(vision, shape)] = [c.tokens, c.framing, c.by_kind]
    return data


def varies(role: str, data: Mapping[str, Any]) -> bool:
    """Whether the message's count differs between toggle pairs (an image; a system
    message, lifted into Anthropic's `system` without an envelope)."""
    return role == "system" or "t" in data


def count(role: str, data: Mapping[str, Any], *, vision: bool, shape: Shape) -> tokens.MessageCount:
    """The message's count for these toggles from its stored `figures` (tokens, framing
    and by kind; no per-block tuples)."""
    pair = data.get("t")
    if pair is not None:
        n, framing, kinds = pair[toggle_key(vision, shape)]
        return tokens.MessageCount(n, dict(kinds), framing, ())
    own = cast(dict[tokens.CountKind, int], data.get("o", {}))
    blocks = int(data.get("n", 0))
    lifted = shape == "anthropic" and role == "system"
    framing = 0 if lifted else tokens.MESSAGE_FRAMING[shape]
    if len(data.get("bl", ())) == blocks:  # every block blank (or none): "[Empty message]"
        framing += tokens.empty_message_tokens()
        empty: dict[tokens.CountKind, int] = dict.fromkeys(own, 0)
        if role == "system" and own:
            empty = {"system": 0}
        return tokens.MessageCount(framing, empty, framing, ())
    framing += tokens.separator_tokens() * (blocks - 1)
    by_kind: dict[tokens.CountKind, int] = (
        {"system": sum(own.values())} if role == "system" else dict(own)
    )
    return tokens.MessageCount(sum(own.values()) + framing, by_kind, framing, ())


def heaviest(role: Role, facts: Sequence[StoredFacts]) -> int:
    """The most any one block sends with the default toggles."""
    sent = exact_count(role, facts, vision=DEFAULT[0], shape=DEFAULT[1]).sent
    return max(sent, default=0)


def blank_of(data: Mapping[str, Any]) -> frozenset[int]:
    return frozenset(data.get("bl", ()))


def add_kinds(
    run: Mapping[Any, int], plus: Mapping[Any, int], minus: Mapping[Any, int] | None = None
) -> dict[str, int]:
    """`run` + `plus` − `minus`, kind by kind (running totals by kind)."""
    out = dict(run)
    for kind, n in plus.items():
        out[kind] = out.get(kind, 0) + n
    for kind, n in (minus or {}).items():
        out[kind] = out.get(kind, 0) - n
    return out
