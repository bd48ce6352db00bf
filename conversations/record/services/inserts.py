"""Multi-row INSERTs for the bulk appends: model rows given their new ids (`_bulk_insert`)
and plain rows (`_insert_rows`), in a number of statements bounded by the parameter limit.

On PostgreSQL each column goes as one array parameter (`INSERT … SELECT FROM unnest(…)`):
one statement of a handful of parameters for any number of rows, which neither the
driver (that splits a query at every placeholder) nor the server parses row by row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import apps
from django.db import connection

from conversations.record.models import Block, Message

PLAIN_FIELDS = {"CharField", "TextField", "PositiveIntegerField", "BooleanField"}
# Rows of one INSERT at most, whatever the batch (and even where the database sets no
# parameter limit, as PostgreSQL): the driver parses each statement's text into one part
# per parameter before it sends it, so a single statement for a 400,000-block message made
# millions of live objects at once, and ingest grew faster than the blocks.
ROWS_PER_STATEMENT = 1000


def _bulk_insert(model: type[Message] | type[Block], objs: Sequence[Message | Block]) -> None:
    """Insert `objs` and set their ids, in multi-row INSERTs of as many rows as the
    database's parameter limit allows: a bounded number of statements.

    `bulk_create` does the same, but prepares each value's placeholder through the query
    compiler, which costs more than the database does for a 10,000-message batch.
    """
    if not objs:
        return
    if not connection.features.can_return_rows_from_bulk_insert:
        model.objects.bulk_create(objs)  # type: ignore[arg-type]
        return
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    # Plain ints, strings and bools go as they are; the rest (JSON, datetimes, UUID keys)
    # through their field's conversion.
    prepared = {f.attname for f in fields if f.get_internal_type() not in PLAIN_FIELDS}
    rows = [
        [
            f.get_db_prep_save(getattr(obj, f.attname), connection)
            if f.attname in prepared
            else getattr(obj, f.attname)
            for f in fields
        ]
        for obj in objs
    ]
    # The database answers the new ids in the order of the rows, as bulk_create relies on.
    pks = _insert_rows(
        model._meta.db_table, [str(f.column) for f in fields], rows, str(model._meta.pk.column)
    )
    for obj, pk in zip(objs, pks, strict=True):
        obj.pk = pk
        obj._state.adding = False


def _insert_rows(
    table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], returning: str | None
) -> list[Any]:
    """Insert rows of prepared values in multi-row INSERTs of as many rows as the
    database's parameter limit allows, at most ROWS_PER_STATEMENT (statements of a bounded
    size); the `returning` column of each, in order, when one is named."""
    if connection.vendor == "postgresql" and rows:
        return _insert_arrays(table, columns, rows, returning)
    quote = connection.ops.quote_name
    head = f"INSERT INTO {quote(table)} ({', '.join(quote(c) for c in columns)}) VALUES "
    tail = f" RETURNING {quote(returning)}" if returning else ""
    row_sql = "(" + ", ".join(["%s"] * len(columns)) + ")"
    limit = connection.features.max_query_params
    per_statement = max(1, min(ROWS_PER_STATEMENT, limit // len(columns) if limit else len(rows)))
    answered: list[Any] = []
    with connection.cursor() as cursor:
        for start in range(0, len(rows), per_statement):
            chunk = rows[start : start + per_statement]
            params = [value for row in chunk for value in row]
            cursor.execute(head + ", ".join([row_sql] * len(chunk)) + tail, params)
            if returning:
                answered += [value for (value,) in cursor.fetchall()]
    return answered


UNNEST_ROWS = ROWS_PER_STATEMENT  # rows per statement: a bound on one statement's size


def _insert_arrays(
    table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], returning: str | None
) -> list[Any]:
    """`_insert_rows` on PostgreSQL: each column as one typed array, the rows inserted in
    their order (WITH ORDINALITY), so that the ids returned are in the rows' order."""
    quote = connection.ops.quote_name
    types = _column_types(table)
    names = ", ".join(quote(c) for c in columns)
    arrays = ", ".join(f"%s::{types[c]}[]" for c in columns)
    values = ", ".join(f"u.c{i}" for i in range(len(columns)))
    aliases = ", ".join([*(f"c{i}" for i in range(len(columns))), "n"])
    sql = (
        f"INSERT INTO {quote(table)} ({names}) SELECT {values} FROM unnest({arrays}) "
        f"WITH ORDINALITY AS u({aliases}) ORDER BY u.n"
    )
    if returning:
        sql += f" RETURNING {quote(returning)}"
    answered: list[Any] = []
    with connection.cursor() as cursor:
        for start in range(0, len(rows), UNNEST_ROWS):
            chunk = rows[start : start + UNNEST_ROWS]
            cursor.execute(sql, [list(column) for column in zip(*chunk, strict=True)])
            if returning:
                answered += [value for (value,) in cursor.fetchall()]
    return answered


def _column_types(table: str) -> dict[str, str]:
    """Column → its database type, from the model whose table it is."""
    for model in apps.get_models():
        if model._meta.db_table == table:
            return {str(f.column): str(f.db_type(connection)) for f in model._meta.concrete_fields}
    raise LookupError(f"no model has the table {table!r}")
