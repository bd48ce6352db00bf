"""The record: its models, the strict schemas, the one write path (`services`), the reads
(`reads`, `counting`, `search`, `notes`) and the events that announce what changed."""
