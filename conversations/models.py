"""Django finds an app's models here; they live beside the code that owns them: the record's
in `conversations.record.models`, each slice's in its own `models` module."""

from conversations.alerts.models import Alert, AlertRule, AlertTimer, Delivery, DeliveryAttempt
from conversations.ingest.models import RejectedSpan, TailCursor, TraceConversation
from conversations.record.models.conversation import Block, BlockType, Conversation, Message, Role
from conversations.record.models.notes import Note, NoteLabel
from conversations.record.models.search import FinderMark, SearchEntry
from conversations.record.models.tokens import ApiToken, IdempotentResponse
from conversations.sharing.models import ShareLink

__all__ = [
    "Alert",
    "AlertRule",
    "AlertTimer",
    "ApiToken",
    "Block",
    "BlockType",
    "Conversation",
    "Delivery",
    "DeliveryAttempt",
    "FinderMark",
    "IdempotentResponse",
    "Message",
    "Note",
    "NoteLabel",
    "RejectedSpan",
    "Role",
    "SearchEntry",
    "ShareLink",
    "TailCursor",
    "TraceConversation",
]
