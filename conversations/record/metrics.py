"""The process's own measures (docs/contract.md §5), exposed at `/metrics` by
`replaysite/metrics.py` in Prometheus's text format.

Each server process counts what it did; Prometheus scrapes each process on its own port
and adds them up. Counters only go up (a restart starts them at 0, which Prometheus's
`rate()` understands). Labels take a small, fixed set of values: never a conversation,
a user or a path as sent.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# Ingest, counted when the transaction that stored it commits.
MESSAGES = Counter("replay_ingest_messages", "Messages stored (API, batch, imports, OTLP, tails).")
BLOCKS = Counter("replay_ingest_blocks", "Blocks stored, in new messages or appended to one.")
IMPORTS = Counter("replay_imports", "Imports that stored a new conversation (a repeat is not).")
SPANS = Counter("replay_otlp_spans", "OTLP GenAI spans received, by outcome.", ["outcome"])

# Requests, by the URL pattern they matched ("(unmatched)" for a 404 of the resolver).
REQUESTS = Histogram(
    "replay_http_request_duration_seconds",
    "Time to answer an HTTP request, by route, method and status class.",
    ["route", "method", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)

# Live updates.
SOCKETS = Gauge("replay_live_sockets", "Open live sockets in this process, by kind.", ["kind"])
FRAMES = Counter("replay_live_frames", "Frames sent to live sockets.")
BROADCAST_FAILURES = Counter(
    "replay_broadcast_failures", "Events the channel layer did not take (logged, then dropped)."
)

# Alerts' webhooks (docs/contract.md §11): each attempt, by what it left the delivery as.
WEBHOOK_ATTEMPTS = Counter(
    "replay_webhook_attempts",
    "Webhook delivery attempts, by outcome (delivered, pending: retried later, failed: given up).",
    ["outcome"],
)


def ingested(*, messages: int = 0, blocks: int = 0) -> None:
    MESSAGES.inc(messages)
    BLOCKS.inc(blocks)
