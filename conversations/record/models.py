"""The record: conversations, their messages, and the messages' typed blocks (docs/contract.md §1).

Rows are written only by `conversations.services`; the constraints below hold the
invariants even against a writer that forgets.
"""

import uuid
from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse

from conversations.core import compact, replay


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
    """One block; which columns are used depends on `type` (see `selectors.block_value`)."""

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


class SearchEntry(models.Model):
    """The words of one block (message_seq, block_seq) or of a conversation's title (both
    null), as `core.search.index_words` makes them, for full-text search (docs/contract.md §3).

    Written by `services` in the transaction that stores the block or title; deleted with
    the conversation. The full-text index over `words` is the database's own (see
    `record.search`); on SQLite it is kept by triggers on this table, so a migration that
    rebuilds this table must run `search.install` again.
    """

    # Indexed by the unique constraint below, whose first column it is.
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    message_seq = models.PositiveIntegerField(null=True)
    block_seq = models.PositiveIntegerField(null=True)
    words = models.TextField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "message_seq", "block_seq"], name="search_entry_unique"
            ),
            models.UniqueConstraint(
                fields=["conversation"],
                condition=Q(message_seq__isnull=True),
                name="search_entry_one_title",
            ),
            models.CheckConstraint(
                condition=Q(message_seq__isnull=True, block_seq__isnull=True)
                | Q(message_seq__isnull=False, block_seq__isnull=False),
                name="search_entry_block_or_title",
            ),
        ]
        verbose_name_plural = "search entries"

    def __str__(self) -> str:
        if self.message_seq is None:
            return "title"
        return f"#{self.message_seq}.{self.block_seq}"


class FinderMark(models.Model):
    """A block the finder's "next problem" stops at (docs/contract.md §4 finding): a tool
    result with `is_error` ("error"), or a tool call with no result anywhere in its
    conversation yet ("unanswered", removed when its first result is stored).

    Written by `services` with the blocks, so that the next one from anywhere in a
    conversation is one indexed lookup, not a walk over its blocks (docs/contract.md §3)."""

    class Kind(models.TextChoices):
        ERROR = "error"
        UNANSWERED = "unanswered"

    # Indexed by the unique constraint below, whose first column it is.
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    message_seq = models.PositiveIntegerField()
    block_seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    call_id = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "message_seq", "block_seq"], name="finder_mark_unique"
            ),
        ]
        indexes = [
            # Answering a call removes its mark: looked up by the call's id.
            models.Index(
                fields=["conversation", "call_id"],
                condition=Q(kind="unanswered"),
                name="finder_mark_open_call",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} at #{self.message_seq}.{self.block_seq}"


class ApiToken(models.Model):
    """A service credential; only the SHA-256 digest of the token is kept."""

    label = models.CharField(max_length=200)
    digest = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(
        max_length=12, editable=False, help_text="First characters, to tell tokens apart."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Optional: refused from then on (create_api_token --expires-in DAYS); empty: never.
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.label} ({self.prefix}…)"


class IdempotentResponse(models.Model):
    """The first answer to a POST carrying an Idempotency-Key, replayed on a repeat."""

    token = models.ForeignKey(ApiToken, on_delete=models.CASCADE)
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField()
    body = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["token", "key"], name="idempotency_key_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.key} → {self.status}"


class TailCursor(models.Model):
    """Where `manage.py tail` stopped in one file, and the conversation the file feeds.

    Saved in the same transaction as what it appended, so a restart resumes exactly there.
    """

    path = models.TextField()
    # SHA-256 of the path: a unique index that any path length fits.
    path_digest = models.CharField(max_length=64, unique=True, editable=False)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="tail_cursors"
    )
    # Just past the last complete line stored; the file's first bytes then (length, digest).
    offset = models.BigIntegerField(default=0)
    head_len = models.PositiveIntegerField(default=0)
    head_digest = models.CharField(max_length=64, blank=True, default="")
    # Informative: the file as last seen (network filesystems and editors change these).
    device = models.BigIntegerField(null=True, blank=True)
    inode = models.BigIntegerField(null=True, blank=True)
    lines = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["path"]
        constraints = [
            models.CheckConstraint(condition=Q(offset__gte=0), name="tail_cursor_offset_gte_0"),
        ]

    def __str__(self) -> str:
        return f"{self.path} @ {self.offset}"


class TraceConversation(models.Model):
    """The conversation that OTLP spans with this `gen_ai.conversation.id` (else trace id)
    land in."""

    key = models.CharField(max_length=255, unique=True)
    conversation = models.OneToOneField(
        Conversation, on_delete=models.CASCADE, related_name="trace_source"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.key


class RejectedSpan(models.Model):
    """An OTLP span that `POST /v1/traces` did not store, and why (kept 24 hours): the list
    page says how many were rejected recently, the admin lists them."""

    received_at = models.DateTimeField(auto_now_add=True, db_index=True)
    trace_id = models.CharField(max_length=64)
    span_id = models.CharField(max_length=32)
    reason = models.TextField()

    class Meta:
        ordering = ["-received_at", "-id"]

    def __str__(self) -> str:
        return f"span {self.span_id}"


class ShareLink(models.Model):
    """A read-only link to one conversation (docs/contract.md §8); only the SHA-256 of its token is
    kept.

    `up_to_seq` None: the whole conversation, live; else messages 0..up_to_seq, frozen.
    `vision`/`shape` None: the toggle is free; else fixed. `images` False: images are
    withheld (the projection is then shown with vision off, so it is what is shown).
    """

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="share_links"
    )
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    up_to_seq = models.PositiveIntegerField(null=True, blank=True)
    vision = models.BooleanField(null=True, blank=True)
    shape = models.CharField(max_length=16, blank=True, default="")
    images = models.BooleanField(default=True)
    notes = models.BooleanField(default=False)  # the operators' notes shown (docs/contract.md §10)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    view_count = models.PositiveIntegerField(default=0, editable=False)
    last_viewed_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(shape__in=["", *replay.SHAPES]), name="share_link_shape_valid"
            ),
            models.CheckConstraint(
                condition=Q(images=True) | ~Q(vision=True),
                name="share_link_no_vision_without_images",
            ),
        ]

    def __str__(self) -> str:
        return f"share {self.pk} of {self.conversation_id}"

    @property
    def frozen(self) -> bool:
        return self.up_to_seq is not None

    @property
    def toggles_label(self) -> str:
        """What the link fixes, as its lists say it: "vision off, anthropic, no images",
        or "free"."""
        fixed = []
        if self.vision is not None:
            fixed.append(f"vision {'on' if self.vision else 'off'}")
        if self.shape:
            fixed.append(self.shape)
        if not self.images:
            fixed.append("no images")
        if self.notes:
            fixed.append("notes")
        return ", ".join(fixed) or "free"

    def state(self, now: datetime) -> str:
        """The state at `now`: "active", "revoked" or "expired"."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"


class Note(models.Model):
    """An operator's note on a message, or on one block of it (docs/contract.md §10).

    Never part of the record's replay: no projection, payload or count reads this table.
    `author` is the user's name or the API token's label; `user` is set when a signed-in
    user wrote it (their notes are theirs to edit), `token_label` when a token did.
    `words` are `core.search.index_words` of the text, under a full-text index of their
    own (`record.note_search`).
    """

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="+")
    message_seq = models.PositiveIntegerField()
    block_seq = models.PositiveIntegerField(null=True, blank=True)
    text = models.TextField()
    labels = models.JSONField(default=list, blank=True)
    author = models.CharField(max_length=200)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    token_label = models.CharField(max_length=200, blank=True, default="")
    words = models.TextField(blank=True, default="", editable=False)
    # Set by the services, equal until the note is edited.
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["conversation_id", "message_seq", "id"]
        indexes = [
            models.Index(fields=["conversation", "message_seq", "id"], name="note_by_message"),
        ]

    def __str__(self) -> str:
        return f"note {self.pk} on #{self.message_seq}"


class NoteLabel(models.Model):
    """One label of one note, for `?label=` (an index by name) and the list's rows."""

    note = models.ForeignKey(Note, on_delete=models.CASCADE, related_name="label_rows")
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    name = models.CharField(max_length=40)

    class Meta:
        indexes = [
            models.Index(fields=["name", "conversation"], name="note_label_by_name"),
            models.Index(fields=["conversation", "name"], name="note_label_by_conversation"),
        ]

    def __str__(self) -> str:
        return self.name


# -- alerts (docs/contract.md §11) ----------------------------------------------------------------


# The alert models live beside the record's own; Django finds them through this import.
from conversations.record.alert_models import Alert as Alert  # noqa: E402
from conversations.record.alert_models import AlertKind as AlertKind  # noqa: E402
from conversations.record.alert_models import AlertRule as AlertRule  # noqa: E402
from conversations.record.alert_models import AlertTimer as AlertTimer  # noqa: E402
from conversations.record.alert_models import Delivery as Delivery  # noqa: E402
from conversations.record.alert_models import DeliveryAttempt as DeliveryAttempt  # noqa: E402
from conversations.record.alert_models import DeliveryState as DeliveryState  # noqa: E402
