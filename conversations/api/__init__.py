"""The JSON API (SPEC §3), token-authenticated."""
