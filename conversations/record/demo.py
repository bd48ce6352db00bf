"""A demo conversation that shows every kind of block, loaded through the services."""

from __future__ import annotations

from conversations.record.models.conversation import Conversation
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_create

# A 96×64 PNG drawn for the demo: a chart-like thumbnail a user might paste.
DEMO_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAGAAAABACAIAAABqVuVZAAAB3UlEQVR42u3aPUgCYRgH8MfDybacavRAgoxw"
    "awt0SMJ08SuHosSGBMmoUJpFkUAQIsTBqcuvGjWXPo4IwaAhZ8U2g/IGz8HFhmsKhBY90/+fdzjuDg5+PM+9"
    "D8cpRFEgZHAYEAAIQAACEIAANKlRDrrwtrYy7GcvlSuoILTY1LbY8BphBM2LCgIQgP6Y+/sHrXZROs7l8jab"
    "y2Ta4Pkn6UwkErPbN+v1upzvIBkjimIica5UKono8/OrULjJ5bhGo+H17t/dlYmI4zLPz4/ZbEGj0UxjBUWj"
    "MY9nh2EYIhKE9vb2FsMwc3PzgtCWbnC7Xbu7ewbD6jRWULX60mp9mM3rweApEbEsy7IsERWLJaPRKN0TCp3I"
    "v83Lkl6vFw5HksmLX+ebzfdkMpXJXE77S7pUuu10RL//wOl0d7vdQOCIiESx6/P5Y7GoWj07RoOiLLFaLVar"
    "RTrW6fTx+Fm/3z88PPZ6PXr98nhN0mOSfP6a53lBaHPclUo1k06nAPSTWu2ViBwOm8Nhw6CISRpAAAIQAiAA"
    "jXAO+l9fSFFBABqzKPADFSoIQAACEIAANLHb/EKwoqA+1qCFCkKLAQhAAAIQgAAEIARAAAIQgAAEIAABCAEQ"
    "gAAEIAABaCLyDXwH5U5O1jzyAAAAAElFTkSuQmCC"
)

DEMO: list[tuple[str, list[dict[str, object]]]] = [
    (
        "system",
        [
            {
                "type": "text",
                "text": "You are a careful operations assistant. Use tools; never guess.",
            }
        ],
    ),
    (
        "user",
        [
            {
                "type": "text",
                "text": "Here is the dashboard panel that alerted. What is going on with api-7?",
            },
            {"type": "image", "media_type": "image/png", "data": DEMO_PNG},
        ],
    ),
    (
        "assistant",
        [
            {
                "type": "reasoning",
                "text": "The panel shows a spike. Check the host metrics first, then the deploy log.",
            },
            {"type": "text", "text": "Let me look at the host and its recent deploys."},
            {
                "type": "tool_use",
                "id": "toolu_01",
                "name": "host_metrics",
                "input": {"host": "api-7", "window": "15m", "metrics": ["cpu", "p99_latency"]},
            },
            {
                "type": "tool_use",
                "id": "toolu_02",
                "name": "deploy_log",
                "input": {"service": "api", "limit": 3},
            },
        ],
    ),
    (
        "user",
        [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01",
                "content": "cpu: 97% (was 35%)\np99_latency: 2.4s (was 180ms)",
            },
            {
                "type": "tool_result",
                "tool_use_id": "toolu_02",
                "content": "PermissionError: token lacks deploy:read",
                "is_error": True,
            },
        ],
    ),
    ("assistant", []),
    (
        "assistant",
        [
            {
                "type": "text",
                "text": "CPU on api-7 is pinned and p99 latency is 13× normal. I could not read the deploy log (permission denied), so I will ask the on-call rota.",
            },
            {
                "type": "tool_use",
                "id": "toolu_03",
                "name": "page_oncall",
                "input": {"team": "api", "severity": "high", "note": "api-7 CPU 97%, p99 2.4s"},
            },
        ],
    ),
]


def load_demo() -> Conversation:
    """Create the demo conversation. Its last tool call is never answered, as when a turn is
    killed mid-round; message 4 is empty."""
    conversation = conversation_create(
        title="Demo: api-7 latency alert", metadata={"agent": "ops-assistant", "demo": True}
    )
    for role, blocks in DEMO:
        message_append(
            conversation=conversation,
            role=role,
            blocks=[BLOCK_ADAPTER.validate_python(block) for block in blocks],
        )
    return conversation
