"""Alerts (docs/contract.md §11): rules over the record, the alerts they open, the signed
webhooks that tell them, and the loop each server process runs for them. Built on the record
(`record.signals.appended`), which never imports it."""
