"""Hypothesis strategies for stored records: every block type, unicode, nested JSON inputs."""

from __future__ import annotations

import base64

from hypothesis import strategies as st

from conversations.core import replay

# Any unicode but surrogates (not valid in UTF-8) and NUL (refused at ingest).
texts = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"))
names = st.text(st.characters(blacklist_categories=["Cs", "Cc"]), min_size=1, max_size=20)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
# Dictionaries keep the order hypothesis drew their keys in: arbitrary, not sorted.
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=6,
)
json_objects = st.dictionaries(texts, json_values, max_size=4)

# Empty and whitespace-only texts (str.isspace, beyond ASCII), drawn often enough that
# blank runs beside images (docs/contract.md §2 rule 6) and blank messages (rule 7) come up.
blank_texts = st.text(st.sampled_from(" \t\n\r\x0b\x0c\x1c\x85\xa0\u2003\u2028\u3000"), max_size=4)
text_blocks = st.builds(replay.TextBlock, texts | blank_texts)
reasoning_blocks = st.builds(replay.ReasoningBlock, texts)
tool_use_blocks = st.builds(replay.ToolUseBlock.of, names, names, json_objects)
tool_result_blocks = st.builds(replay.ToolResultBlock, names, names, texts, st.booleans())
image_blocks = st.builds(
    replay.ImageBlock,
    st.sampled_from(replay.IMAGE_MEDIA_TYPES),
    st.binary(min_size=1, max_size=48).map(lambda raw: base64.b64encode(raw).decode()),
)

prose_blocks = text_blocks | reasoning_blocks | tool_use_blocks | tool_result_blocks
user_blocks = prose_blocks | image_blocks  # images are stored in user messages only


@st.composite
def stored_messages(draw: st.DrawFn) -> replay.StoredMessage:
    role = draw(st.sampled_from(replay.ROLES))
    blocks = user_blocks if role == "user" else prose_blocks
    return replay.StoredMessage(role, tuple(draw(st.lists(blocks, max_size=5))))


records = st.lists(stored_messages(), max_size=6)
