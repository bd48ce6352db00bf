"""The error every write raises for a request that is well-formed but cannot be stored."""

from __future__ import annotations


class IngestError(Exception):
    """A request that is well-formed but cannot be stored; `field` names the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
