"""The projection's toggles, `?vision=` and `?shape=`, parsed once for every surface.

Pure: takes the query as a mapping of strings; the API, the pages and the sockets all
call `ReplayOptions.from_query` and report its `OptionError` in their own way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlencode

from conversations.core.replay import SHAPES, Shape

# Recordings of Anthropic's API: their images cost what Anthropic's formula says.
ANTHROPIC_FORMATS = frozenset({"anthropic", "claude-code"})

ShapeSource = Literal["query", "source", "default"]

TRUE = {"1", "true"}
FALSE = {"0", "false"}


class OptionError(ValueError):
    """A toggle with a value it cannot take; `field` names it, the message says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def flag(query: Mapping[str, str], name: str, default: bool) -> bool:
    value = query.get(name)
    if value is None:
        return default
    if value.lower() in TRUE:
        return True
    if value.lower() in FALSE:
        return False
    raise OptionError(name, f"{name} must be 1, 0, true or false, not {value[:40]!r}.")


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """docs/contract.md §3: vision on and the openai shape unless the query says otherwise."""

    vision: bool = True
    shape: Shape = "openai"

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> ReplayOptions:
        vision = flag(query, "vision", True)
        shape = query.get("shape", "openai")
        if shape not in SHAPES:
            raise OptionError(
                "shape", f"shape must be one of {', '.join(SHAPES)}, not {shape[:40]!r}."
            )
        return cls(vision=vision, shape=shape)

    def query(self) -> dict[str, object]:
        return {"vision": int(self.vision), "shape": self.shape}

    def urlencode(self) -> str:
        return urlencode(self.query())

    @classmethod
    def for_counts(
        cls, query: Mapping[str, str], *, metadata: Mapping[str, Any]
    ) -> tuple[ReplayOptions, ShapeSource]:
        """docs/contract.md §7: the counts' shape is `?shape=` when given, else anthropic for
        a conversation recorded from Anthropic's API (its import format), else openai."""
        options = cls.from_query(query)
        if "shape" in query:
            return options, "query"
        imported = metadata.get("import")
        format = imported.get("format") if isinstance(imported, Mapping) else None
        if format in ANTHROPIC_FORMATS:
            return cls(vision=options.vision, shape="anthropic"), "source"
        return options, "default"
