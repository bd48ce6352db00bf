"""Django finds an app's models here; they live in `conversations.record.models`."""

from conversations.record.models import (
    Alert,
    AlertRule,
    AlertTimer,
    ApiToken,
    Block,
    BlockType,
    Conversation,
    Delivery,
    DeliveryAttempt,
    IdempotentResponse,
    Message,
    Role,
    SearchEntry,
    ShareLink,
    TailCursor,
    TraceConversation,
)

__all__ = [
    "Alert",
    "AlertRule",
    "AlertTimer",
    "Delivery",
    "DeliveryAttempt",
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
