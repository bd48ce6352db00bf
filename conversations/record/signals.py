"""What the record announces to the slices built on it, so that it never imports them.

`appended` is sent inside an append's transaction, once an append (a message, a batch, a
block) is stored: `conversation_id`, `first_seq` (the first message it touched), `errors`
(the error results it added) and `error_seq` (the message holding the first of them, or
None). The alerts slice evaluates its rules on it once the transaction commits
(docs/contract.md §11).
"""

from django.dispatch import Signal

appended = Signal()
