"""Django finds an app's models here; they live in `conversations.record.models`."""

from conversations.record.models import (
    ApiToken,
    Block,
    BlockType,
    Conversation,
    IdempotentResponse,
    Message,
    Role,
    SearchEntry,
    ShareLink,
    TailCursor,
    TraceConversation,
)

__all__ = [
    "ApiToken",
    "Block",
    "BlockType",
    "Conversation",
    "IdempotentResponse",
    "Message",
    "Role",
    "TailCursor",
    "TraceConversation",
    "SearchEntry",
    "ShareLink",
]
