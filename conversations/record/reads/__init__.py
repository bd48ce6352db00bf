"""The record's reads: selectors (one query a shape, bounded), their plain rows, the
API's JSON shapes and the SQL compiled once per shape."""
