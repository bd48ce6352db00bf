"""Notes from the conversation page (docs/contract.md §10): add, read whole, edit, delete.

Each answer is the message's `notes` partial (or, for one note, its `note` partial), which
htmx swaps in; every change is also told live to the conversation's open pages. A change
refused (bad text or labels, not the author) answers the partial with the reason, 400 or
403, rendered from the template: nothing a request sent is echoed as markup."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from conversations.core import notes
from conversations.dashboard.presenters.notes import note_item, notes_view
from conversations.record.errors import IngestError
from conversations.record.models.conversation import Conversation
from conversations.record.models.notes import Note
from conversations.record.notes import reads as note_reads
from conversations.record.notes import services as services_module
from conversations.record.reads import selectors
from conversations.web.pages import conversation_or_404, operator_required


def _notes_answer(
    request: HttpRequest,
    conversation: Conversation,
    seq: int,
    *,
    error: str = "",
    status: int = 200,
    every: bool = False,
) -> HttpResponse:
    """The message's notes partial as they now are (htmx), else back to the message."""
    message = selectors.message_get(conversation, seq)
    if message is None:
        raise Http404("No such message.")
    if not getattr(request, "htmx", None) and status == 200:
        return redirect(conversation.get_absolute_url() + f"#m-{seq}")
    view = notes_view(
        conversation.id,
        seq,
        message.block_count,
        note_reads.notes_at(conversation.id, [seq], every=every).get(seq, notes.MessageNotes()),
        error=error,
    )
    return render(request, "conversations/detail.html#notes", {"n": view}, status=status)


def _note(conversation: Conversation, note_id: int) -> Note:
    found = note_reads.note_get(note_id, conversation.id)
    if found is None:
        raise Http404("No such note.")
    return found


def _form(post: Any) -> tuple[str, tuple[str, ...]]:
    """The form's text and labels (labels separated by commas or spaces); NoteError names
    what is wrong."""
    return notes.checked_text(post.get("text", "")), notes.parse_labels(post.get("labels", ""))


@require_http_methods(["GET", "POST"])
@operator_required
def note_add(request: HttpRequest, conversation_id: str, seq: int) -> HttpResponse:
    """POST: a new note by the signed-in user (conversations.add_note) on message SEQ, or
    on the block the form names. GET: every note of the message (the page shows a few)."""
    if request.method == "GET":
        conversation = conversation_or_404(conversation_id)
        return _notes_answer(request, conversation, seq, every=True)
    if not request.user.has_perm(note_reads.ADD):
        raise PermissionDenied
    conversation = conversation_or_404(conversation_id)
    block = request.POST.get("block", "").strip()
    try:
        if block and (not block.isascii() or not block.isdigit() or len(block) > 9):
            raise notes.NoteError("block", "must be a block number, or empty for the message")
        text, labels = _form(request.POST)
        services_module.note_add(
            conversation=conversation,
            message_seq=seq,
            block_seq=int(block) if block else None,
            text=text,
            labels=labels,
            user=request.user,
        )
    except (notes.NoteError, IngestError) as exc:
        return _notes_answer(request, conversation, seq, error=_sentence(exc), status=400)
    return _notes_answer(request, conversation, seq)


def _sentence(exc: notes.NoteError | IngestError) -> str:
    names = {"text": "The note", "labels": "Labels", "block": "Block", "seq": "This message"}
    field = exc.field.split("[")[0]
    return f"{names.get(field, field)}: {exc.message}."


@require_GET
@operator_required
def note_detail(request: HttpRequest, conversation_id: str, note_id: int) -> HttpResponse:
    """One note whole (`?edit=1`: its edit form, for its author)."""
    conversation = conversation_or_404(conversation_id)
    found = _note(conversation, note_id)
    editing = request.GET.get("edit") == "1"
    if editing and not note_reads.may_edit(found, request.user):
        raise PermissionDenied
    item = note_item(conversation.id, note_reads.value(found), whole=True)
    return render(request, "conversations/detail.html#note", {"note": item, "editing": editing})


@require_POST
@operator_required
def note_edit(request: HttpRequest, conversation_id: str, note_id: int) -> HttpResponse:
    """Its author changes a note's text and labels."""
    conversation = conversation_or_404(conversation_id)
    found = _note(conversation, note_id)
    if not note_reads.may_edit(found, request.user):
        return _notes_answer(
            request,
            conversation,
            found.message_seq,
            error="Only the note's author may edit it.",
            status=403,
        )
    try:
        text, labels = _form(request.POST)
        services_module.note_edit(note=found, text=text, labels=labels)
    except (notes.NoteError, IngestError) as exc:
        return _notes_answer(
            request, conversation, found.message_seq, error=_sentence(exc), status=400
        )
    return _notes_answer(request, conversation, found.message_seq)


@require_POST
@operator_required
def note_delete(request: HttpRequest, conversation_id: str, note_id: int) -> HttpResponse:
    """Its author, or a user with conversations.delete_note, deletes a note."""
    conversation = conversation_or_404(conversation_id)
    found = _note(conversation, note_id)
    if not note_reads.may_delete(found, request.user):
        return _notes_answer(
            request,
            conversation,
            found.message_seq,
            error="Only the note's author, or a user who may delete notes, may delete it.",
            status=403,
        )
    services_module.note_delete(note=found)
    return _notes_answer(request, conversation, found.message_seq)
