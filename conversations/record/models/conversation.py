"""conversation: split from conversations.record.models."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.urls import reverse

from conversations.core import replay
from conversations.core.counting import compact


class Role(models.TextChoices):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"


class BlockType(models.TextChoices):
    TEXT = "text"
    TOOL_USE = "tool_use"
    TOOL_RESULT = "tool_result"
    REASONING = "reasoning"
    IMAGE = "image"


class Conversation(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    title = models.CharField(max_length=500)
    metadata = models.JSONField(default=dict, blank=True)
    # The number of messages, which is also the next message's seq.
    message_count = models.PositiveIntegerField(default=0, editable=False)
    # SHA-256 of the transcript this conversation was imported from (docs/contract.md §6 rule 6):
    # unique, so the same bytes imported again find this conversation and store nothing.
    import_sha256 = models.CharField(
        max_length=64, null=True, blank=True, unique=True, editable=False
    )
    # The number of blocks of all its messages: the page's totals without an O(N) sum.
    block_count = models.PositiveIntegerField(default=0, editable=False)
    # What the list shows and filters on, kept by the services as blocks arrive (a list
    # page reads them from its rows, never from the messages): the error results stored,
    # the tool calls of the last message with no later result in it, and the model the
    # latest message naming one names.
    error_count = models.PositiveIntegerField(default=0, editable=False)
    unanswered_calls = models.PositiveIntegerField(default=0, editable=False)
    model = models.CharField(max_length=200, blank=True, default="", editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)

    class Meta:
        ordering = ["-updated_at", "-created_at"]
        permissions = [("share_conversation", "Can share a conversation by link")]
        constraints = [
            models.CheckConstraint(
                condition=Q(message_count__gte=0), name="conversation_message_count_gte_0"
            ),
        ]
        # The list's filters, in the list's order: a filtered page reads only its rows.
        indexes = [
            models.Index(
                fields=["-updated_at", "-created_at", "id"],
                condition=Q(error_count__gt=0),
                name="conversation_has_errors",
            ),
            models.Index(
                fields=["-updated_at", "-created_at", "id"],
                condition=Q(unanswered_calls__gt=0),
                name="conversation_unanswered",
            ),
        ]

    def __str__(self) -> str:
        return self.title or str(self.id)

    def get_absolute_url(self) -> str:
        return reverse("conversation", args=[str(self.id)])


class Message(models.Model):
    # Indexed by the unique constraint below, whose first column it is.
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages", db_index=False
    )
    seq = models.PositiveIntegerField(editable=False)
    role = models.CharField(max_length=16, choices=Role.choices)
    # The number of blocks, which is also the next block's seq.
    block_count = models.PositiveIntegerField(default=0, editable=False)
    # Provenance (model, usage, stop reason, source ids and timestamps); never replayed.
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Token figures (docs/contract.md §7), written by the services as blocks are stored
    # (`services.token_figures`), so no page counts stored text again: this message's count
    # and the running total up to and including it, with the default toggles (vision on,
    # openai); `counts` holds the figures by kind (and for every toggle when `varies`: the
    # message holds an image or is a system message), `heaviest` its heaviest block, and
    # `measured` the provider's measured input of an assistant turn (`turn_start`: the seq
    # its response began at).
    tokens = models.PositiveIntegerField(null=True, editable=False)
    cumulative = models.BigIntegerField(null=True, editable=False)
    counts = models.JSONField(null=True, editable=False)
    varies = models.BooleanField(default=False, editable=False)
    heaviest = models.PositiveIntegerField(default=0, editable=False)
    measured = models.PositiveIntegerField(null=True, editable=False)
    turn_start = models.PositiveIntegerField(null=True, editable=False)

    class Meta:
        # By the foreign key's column: ordering by "conversation" would join conversations
        # and sort by their own ordering on every unordered query.
        ordering = ["conversation_id", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "seq"], name="message_seq_unique"),
            models.CheckConstraint(condition=Q(seq__gte=0), name="message_seq_gte_0"),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="message_role_valid"),
        ]
        # The few rows a count reads past the running totals: the messages whose count
        # depends on the toggles, the measured turns, and the heaviest blocks' messages.
        indexes = [
            models.Index(
                fields=["conversation", "seq"], condition=Q(varies=True), name="message_varies"
            ),
            models.Index(
                fields=["conversation", "seq"],
                condition=Q(measured__isnull=False),
                name="message_measured",
            ),
            models.Index(fields=["conversation", "-heaviest"], name="message_heaviest"),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.role}"

    def get_absolute_url(self) -> str:
        return reverse("conversation", args=[str(self.conversation_id)]) + f"#m-{self.seq}"


class Block(models.Model):
    """One block; which columns are used depends on `type` (see `rows.block_value`)."""

    # Indexed by the unique constraint below, whose first column it is.
    message = models.ForeignKey(
        Message, on_delete=models.CASCADE, related_name="blocks", db_index=False
    )
    seq = models.PositiveIntegerField(editable=False)
    type = models.CharField(max_length=16, choices=BlockType.choices)
    # text and reasoning: the text; tool_result: the content.
    text = models.TextField(blank=True, default="")
    # tool_use: its id; tool_result: tool_use_id.
    # Looked up by equality only (`block_call_id` below; no LIKE index beside it).
    call_id = models.CharField(max_length=255, blank=True, default="")
    # tool_use and tool_result: the tool's name (resolved at ingest for results).
    name = models.CharField(max_length=255, blank=True, default="")
    # tool_use: the input object as canonical JSON text; text keeps key order, jsonb does not.
    input_json = models.TextField(blank=True, default="")
    is_error = models.BooleanField(default=False)
    # image: media type and base64 data.
    media_type = models.CharField(max_length=32, blank=True, default="")
    data = models.TextField(blank=True, default="")
    # image: pixel size, decoded once at ingest (token estimates need it, not the bytes).
    width = models.PositiveIntegerField(null=True, blank=True)
    height = models.PositiveIntegerField(null=True, blank=True)
    # The source element an imported block came from, where the five kinds cannot hold
    # all of it (docs/contract.md §1); never replayed.
    origin = models.JSONField(null=True, blank=True)
    # Its own tokens (docs/contract.md §7) as `services.token_figures` counted them once,
    # when it was stored: its prose's, or an image's with the default toggles.
    tokens = models.PositiveIntegerField(null=True, editable=False)

    class Meta:
        ordering = ["message_id", "seq"]
        indexes = [
            models.Index(fields=["call_id"], name="block_call_id"),
            # The blocks that already hold a policy's marker (few, often none): a preview
            # or a diff finds them without reading every result (`policy_reads`).
            models.Index(
                fields=["message"],
                name="block_cleared_result",
                condition=Q(type="tool_result", text=compact.CLEARED_RESULT),
            ),
            models.Index(
                fields=["message"],
                name="block_cleared_reasoning",
                condition=Q(type="reasoning", text=compact.CLEARED_REASONING),
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["message", "seq"], name="block_seq_unique"),
            models.CheckConstraint(condition=Q(seq__gte=0), name="block_seq_gte_0"),
            models.CheckConstraint(condition=Q(type__in=BlockType.values), name="block_type_valid"),
            models.CheckConstraint(
                condition=~Q(type="image") | Q(media_type__in=replay.IMAGE_MEDIA_TYPES),
                name="block_image_media_type_valid",
            ),
            models.CheckConstraint(
                condition=~Q(type="tool_use") | ~Q(input_json=""),
                name="block_tool_use_has_input",
            ),
            models.CheckConstraint(
                condition=~Q(type="tool_result") | ~Q(name=""),
                name="block_tool_result_has_name",
            ),
            models.CheckConstraint(
                condition=Q(is_error=False) | Q(type="tool_result"),
                name="block_is_error_only_on_results",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.seq}: {self.type}"
