"""The pure rules of following live sources: complete lines, file identity, the suffix rule."""

from __future__ import annotations

from conversations.core import live_sources


def test_only_complete_lines_are_taken_and_a_partial_last_line_waits():
    assert live_sources.complete_lines(b"") == ([], 0)
    assert live_sources.complete_lines(b'{"a": 1') == ([], 0)
    assert live_sources.complete_lines(b'{"a": 1}\n{"b"') == ([b'{"a": 1}'], 9)
    assert live_sources.complete_lines(b"one\ntwo\n") == ([b"one", b"two"], 8)
    assert live_sources.complete_lines(b"\n\n") == ([b"", b""], 2)


def test_a_grown_file_is_the_same_file_a_truncated_or_replaced_one_is_not():
    first = b'{"uuid": "a"}\n'
    position = live_sources.Position(len(first), len(first), live_sources.head_digest(first))
    grown = first + b'{"uuid": "b"}\n'
    assert live_sources.still_the_same_file(position, len(grown), grown[: live_sources.HEAD_BYTES])
    assert not live_sources.still_the_same_file(position, 3, first[:3])  # truncated
    other = b'{"uuid": "z"}\n{"uuid": "b"}\n'
    assert not live_sources.still_the_same_file(position, len(other), other)  # replaced
    # A cursor that has read nothing yet (new, or rewound) fits any file.
    assert live_sources.still_the_same_file(live_sources.Position(0, 0, ""), len(other), other)


def messages(*texts: str) -> list[str]:
    return [live_sources.fingerprint("user", [{"type": "text", "text": t}]) for t in texts]


def test_fingerprints_ignore_origin_but_not_role_or_content():
    block = {"type": "text", "text": "hi"}
    assert live_sources.fingerprint("user", [block]) == live_sources.fingerprint(
        "user", [block | {"origin": {"x": 1}}]
    )
    assert live_sources.fingerprint("user", [block]) != live_sources.fingerprint(
        "assistant", [block]
    )
    assert live_sources.fingerprint("user", [block]) != live_sources.fingerprint(
        "user", [{"type": "text", "text": "hi!"}]
    )


def test_the_suffix_rule_appends_only_the_continuation():
    stored = live_sources.chain(messages("a", "b", "c"))
    longer = live_sources.chain(messages("a", "b", "c", "d", "e"))
    index = live_sources.compared_index(len(longer), len(stored))
    assert index == 2
    assert live_sources.continuation(longer, 3, stored[index]) == live_sources.Continuation(start=3)
    # Nothing stored yet: everything is new.
    assert live_sources.continuation(longer, 0, None) == live_sources.Continuation(start=0)


def test_a_span_that_repeats_a_stored_prefix_adds_nothing():
    stored = live_sources.chain(messages("a", "b", "c", "d"))
    older = live_sources.chain(messages("a", "b"))
    index = live_sources.compared_index(len(older), len(stored))
    assert live_sources.continuation(older, 4, stored[index]) == live_sources.Continuation(start=2)


def test_a_diverging_history_is_reported_with_its_first_difference():
    stored = live_sources.chain(messages("a", "b", "c"))
    other = live_sources.chain(messages("a", "X", "c", "d"))
    index = live_sources.compared_index(len(other), len(stored))
    plan = live_sources.continuation(other, 3, stored[index])
    assert plan.diverges
    assert live_sources.first_difference(other, stored) == 1


def test_provenance_of_a_message_over_several_lines_lists_every_uuid_once():
    first = {"uuid": "u1", "timestamp": "t1", "usage": {"output_tokens": 1}}
    merged = live_sources.merge_provenance(first, {"uuid": "u2", "usage": {"output_tokens": 9}})
    merged = live_sources.merge_provenance(merged, {"uuid": "u2"})
    assert merged == {
        "uuid": "u1",
        "timestamp": "t1",
        "usage": {"output_tokens": 9},
        "uuids": ["u1", "u2"],
    }
    assert live_sources.source_ids(merged) == {"u1", "u2"}
