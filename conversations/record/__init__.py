"""The record: models, strict schemas, the one write path (services) and the reads (selectors)."""
