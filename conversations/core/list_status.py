"""What a conversation's list row says about it: its error results, the tool calls its last
message leaves unanswered, and the model its latest message names.

Pure (no Django): the services keep these on the conversation's row as blocks arrive (the
migration that added them wrote the same rules out for what was stored before), and the
list page and the API filter on them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import assert_never

from conversations.core.blocks import BlockKind
from conversations.core.notes import NoteError, checked_label
from conversations.core.options import OptionError, flag

# Where provenance names the model: imports and the API's `metadata` (`model`), OpenTelemetry
# GenAI attributes (the response's model before the request's).
MODEL_KEYS = ("model", "gen_ai.response.model", "gen_ai.request.model")
MODEL_CHARS = 200  # the column's size; longer names are cut


def open_calls(blocks: Iterable[tuple[BlockKind, str]], already: Iterable[str] = ()) -> set[str]:
    """The call ids left open after `blocks` ((kind, call id) in block order), starting
    from `already`: a tool_use opens its id, a later tool_result for it closes it."""
    found = set(already)
    for kind, call_id in blocks:
        match kind:
            case "tool_use":
                found.add(call_id)
            case "tool_result":
                found.discard(call_id)
            case "text" | "reasoning" | "image":
                pass
            case _:
                assert_never(kind)
    return found


def model_of(metadata: object) -> str:
    """The model a message's (or a conversation's) metadata names, or ""."""
    if not isinstance(metadata, dict):
        return ""
    for key in MODEL_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()[:MODEL_CHARS]
    return ""


def latest_model(metadatas: Iterable[object]) -> str:
    """The model named by the last of these metadata (in message order) that names one."""
    found = ""
    for metadata in metadatas:
        found = model_of(metadata) or found
    return found


@dataclass(frozen=True, slots=True)
class ListFilters:
    """The list's filters (`?has_errors=1`, `?unanswered=1`, `?label=NAME`: a note's label,
    docs/contract.md §10), parsed once for the page and the API; a bad value is an
    OptionError naming it."""

    has_errors: bool = False
    unanswered: bool = False
    label: str = ""
    alerts_open: bool = False  # `?alerts=open` (docs/contract.md §11)

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> ListFilters:
        label = query.get("label", "")
        if label:
            try:
                checked_label(label)
            except NoteError as exc:
                raise OptionError("label", f"label {exc.message}.") from None
        alerts = query.get("alerts", "")
        if alerts not in {"", "open"}:
            raise OptionError("alerts", f"alerts must be 'open' or empty, not {alerts[:40]!r}.")
        return cls(
            has_errors=flag(query, "has_errors", False),
            unanswered=flag(query, "unanswered", False),
            label=label,
            alerts_open=alerts == "open",
        )

    def query(self) -> dict[str, str]:
        """The query parameters of the filters that are on."""
        on = {name: "1" for name in ("has_errors", "unanswered") if getattr(self, name)}
        on |= {"label": self.label} if self.label else {}
        return on | ({"alerts": "open"} if self.alerts_open else {})

    def __bool__(self) -> bool:
        return self.has_errors or self.unanswered or bool(self.label) or self.alerts_open
