"""The pure rules of following live sources: complete lines, file identity, the suffix rule."""

from __future__ import annotations

from conversations.core import follow


def test_only_complete_lines_are_taken_and_a_partial_last_line_waits():
    assert follow.complete_lines(b"") == ([], 0)
    assert follow.complete_lines(b'{"a": 1') == ([], 0)
    assert follow.complete_lines(b'{"a": 1}\n{"b"') == ([b'{"a": 1}'], 9)
    assert follow.complete_lines(b"one\ntwo\n") == ([b"one", b"two"], 8)
    assert follow.complete_lines(b"\n\n") == ([b"", b""], 2)


def test_a_grown_file_is_the_same_file_a_truncated_or_replaced_one_is_not():
    first = b'{"uuid": "a"}\n'
    position = follow.Position(len(first), len(first), follow.head_digest(first))
    grown = first + b'{"uuid": "b"}\n'
    assert follow.still_the_same_file(position, len(grown), grown[: follow.HEAD_BYTES])
    assert not follow.still_the_same_file(position, 3, first[:3])  # truncated
    other = b'{"uuid": "z"}\n{"uuid": "b"}\n'
    assert not follow.still_the_same_file(position, len(other), other)  # replaced
    # A cursor that has read nothing yet (new, or rewound) fits any file.
    assert follow.still_the_same_file(follow.Position(0, 0, ""), len(other), other)


def messages(*texts: str) -> list[str]:
    return [follow.fingerprint("user", [{"type": "text", "text": t}]) for t in texts]


def test_fingerprints_ignore_origin_but_not_role_or_content():
    block = {"type": "text", "text": "hi"}
    assert follow.fingerprint("user", [block]) == follow.fingerprint(
        "user", [block | {"origin": {"x": 1}}]
    )
    assert follow.fingerprint("user", [block]) != follow.fingerprint("assistant", [block])
    assert follow.fingerprint("user", [block]) != follow.fingerprint(
        "user", [{"type": "text", "text": "hi!"}]
    )


def test_the_suffix_rule_appends_only_the_continuation():
    stored = follow.chain(messages("a", "b", "c"))
    longer = follow.chain(messages("a", "b", "c", "d", "e"))
    index = follow.compared_index(len(longer), len(stored))
    assert index == 2
    assert follow.continuation(longer, 3, stored[index]) == follow.Continuation(start=3)
    # Nothing stored yet: everything is new.
    assert follow.continuation(longer, 0, None) == follow.Continuation(start=0)


def test_a_span_that_repeats_a_stored_prefix_adds_nothing():
    stored = follow.chain(messages("a", "b", "c", "d"))
    older = follow.chain(messages("a", "b"))
    index = follow.compared_index(len(older), len(stored))
    assert follow.continuation(older, 4, stored[index]) == follow.Continuation(start=2)


def test_a_diverging_history_is_reported_with_its_first_difference():
    stored = follow.chain(messages("a", "b", "c"))
    other = follow.chain(messages("a", "X", "c", "d"))
    index = follow.compared_index(len(other), len(stored))
    plan = follow.continuation(other, 3, stored[index])
    assert plan.diverges
    assert follow.first_difference(other, stored) == 1


def test_provenance_of_a_message_over_several_lines_lists_every_uuid_once():
    first = {"uuid": "u1", "timestamp": "t1", "usage": {"output_tokens": 1}}
    merged = follow.merge_provenance(first, {"uuid": "u2", "usage": {"output_tokens": 9}})
    merged = follow.merge_provenance(merged, {"uuid": "u2"})
    assert merged == {
        "uuid": "u1",
        "timestamp": "t1",
        "usage": {"output_tokens": 9},
        "uuids": ["u1", "u2"],
    }
    assert follow.source_ids(merged) == {"u1", "u2"}
