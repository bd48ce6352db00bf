"""Bulk inserts for the appends: model rows made cheaply (`new_row`), stored and given
their new ids (`bulk_insert`), and plain rows (`insert_rows`).

On PostgreSQL every row of a table goes in one COPY (ids taken from the table's sequence
first): no statement text to build, quote or parse, and the driver writes the rows in C.
Elsewhere multi-row INSERTs, in a number of statements bounded by the parameter limit.

`quoted_column` and `stored_value` write the append path's other few statements in SQL of their own
(one message's append runs each of them: the ORM's query building cost more than the
database's answer).
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, ForeignKey, Model

from conversations.record.models.conversation import Block, Message

M = TypeVar("M", bound=Model)

PLAIN_FIELDS = {
    "CharField",
    "TextField",
    "PositiveIntegerField",
    "BigIntegerField",
    "BooleanField",
    "BigAutoField",
}
# Rows of one INSERT at most, whatever the batch (and even where the database sets no
# parameter limit, as PostgreSQL): the driver parses each statement's text into one part
# per parameter before it sends it, so a single statement for a 400,000-block message made
# millions of live objects at once, and ingest grew faster than the blocks.
ROWS_PER_STATEMENT = 1000


@functools.cache
def _maker(model: type[M]) -> Callable[..., M]:
    """A function that makes an unsaved `model` row from its columns' values by attname,
    the rest at their defaults: the model's positional constructor, which costs a fraction
    of its keyword one (a 1,000-message batch makes thousands of rows)."""
    fields = model._meta.concrete_fields
    fixed = {f.attname: None if callable(f.default) else f.get_default() for f in fields}
    fresh = [f for f in fields if callable(f.default)]  # `dict`: a new one for each row

    def make(**values: Any) -> M:
        row = fixed | {f.attname: f.get_default() for f in fresh if f.attname not in values}
        row.update(values)
        if len(row) != len(fixed):
            raise TypeError(f"{model.__name__} has no {', '.join(set(row) - set(fixed))}")
        return model(*row.values())

    return make


def new_row(model: type[M], parent: str, of: Model, **values: Any) -> M:
    """An unsaved `model` row whose foreign key `parent` is `of` (cached on the row, as
    the keyword constructor would; its id is set when `of` is stored)."""
    row: M = _maker(model)(**{f"{parent}_id": of.pk}, **values)
    model._meta.get_field(parent).set_cached_value(row, of)  # type: ignore[union-attr]
    return row


def write_db() -> BaseDatabaseWrapper:
    """This thread's connection, looked up once: `connection` looks it up again at each
    attribute, and the append path's statements read several."""
    return connections[DEFAULT_DB_ALIAS]


def param_limit(db: BaseDatabaseWrapper) -> int | None:
    """How many parameters one statement may hold (None: no limit). On SQLite the library's
    own limit, as `sqlite3` reports it for this connection (Django 5.2 assumes the old
    default of 999, and a long message would take many statements)."""
    if db.vendor == "sqlite":
        db.ensure_connection()
        limit: int = db.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        return limit
    found: int | None = db.features.max_query_params
    return found


def quoted_column(model: type[Model], name: str) -> str:
    """The column of `model`'s field `name`, quoted for SQL (SQLite and PostgreSQL quote
    alike). Statements that use it are built once per database vendor and kept."""
    column = _field(model, name).column
    assert column
    return str(write_db().ops.quote_name(column))


def stored_value(model: type[Model], name: str, value: Any) -> Any:
    """`value` as `model`'s field `name` is stored (a foreign key as its target's, a UUID or
    a datetime as this database takes it)."""
    return _field(model, name).get_db_prep_save(value, write_db())


@functools.cache
def _field(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, Field)
    return field


def bulk_insert(model: type[Message] | type[Block], objs: Sequence[Message | Block]) -> None:
    """Insert `objs` and set their ids (`insert_rows`: one COPY on PostgreSQL, else
    multi-row INSERTs in a bounded number of statements).

    `bulk_create` does the same, but prepares each value's placeholder through the query
    compiler, which costs more than the database does for a 10,000-message batch.
    """
    if not objs:
        return
    db = write_db()
    if not db.features.can_return_rows_from_bulk_insert:
        model.objects.bulk_create(objs)  # type: ignore[arg-type]
        return
    columns, steps = _steps(model)
    rows = [
        [
            getattr(obj, name) if f is None else f.get_db_prep_save(getattr(obj, name), db)
            for name, f in steps
        ]
        for obj in objs
    ]
    # The database answers the new ids in the order of the rows, as bulk_create relies on.
    pks = insert_rows(model._meta.db_table, columns, rows, str(model._meta.pk.column))
    for obj, pk in zip(objs, pks, strict=True):
        obj.pk = pk
        obj._state.adding = False


@functools.cache
def _steps(model: type[Model]) -> tuple[tuple[str, ...], list[tuple[str, Field[Any, Any] | None]]]:
    """`model`'s columns but its key, and how each value is read from a row: plain ints,
    strings and bools as they are (a foreign key as its target's value); the rest (JSON,
    datetimes, UUID keys) through their field's conversion."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    kinds = [
        (f.target_field if isinstance(f, ForeignKey) else f).get_internal_type() for f in fields
    ]
    steps = [
        (f.attname, None if kind in PLAIN_FIELDS else f)
        for f, kind in zip(fields, kinds, strict=True)
    ]
    return tuple(str(f.column) for f in fields), steps


def insert_rows(
    table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], returning: str | None
) -> list[Any]:
    """Insert rows of prepared values (one COPY on PostgreSQL; elsewhere multi-row INSERTs
    of as many rows as the parameter limit allows, at most ROWS_PER_STATEMENT: statements
    of a bounded size); the `returning` column of each, in order, when one is named."""
    db = write_db()
    if db.vendor == "postgresql" and rows:
        return _copy_rows(table, columns, rows, returning)
    head, tail, row_sql = _insert_sql(db.vendor, table, tuple(columns), returning)
    limit = param_limit(db)
    per_statement = max(1, min(ROWS_PER_STATEMENT, limit // len(columns) if limit else len(rows)))
    answered: list[Any] = []
    with db.cursor() as cursor:
        for start in range(0, len(rows), per_statement):
            chunk = rows[start : start + per_statement]
            params = [value for row in chunk for value in row]
            cursor.execute(head + ", ".join([row_sql] * len(chunk)) + tail, params)
            if returning:
                answered += [value for (value,) in cursor.fetchall()]
    return answered


@functools.cache
def _insert_sql(
    vendor: str, table: str, columns: tuple[str, ...], returning: str | None
) -> tuple[str, str, str]:
    """An INSERT's text but its rows, its RETURNING clause, and one row's placeholders."""
    quote = write_db().ops.quote_name
    head = f"INSERT INTO {quote(table)} ({', '.join(quote(c) for c in columns)}) VALUES "
    tail = f" RETURNING {quote(returning)}" if returning else ""
    return head, tail, "(" + ", ".join(["%s"] * len(columns)) + ")"


def _copy_rows(
    table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], returning: str | None
) -> list[Any]:
    """`insert_rows` on PostgreSQL: one COPY of every row (streamed, no statement text to
    build or parse). With `returning`, that column's new values are taken from its
    sequence first, one per row in the rows' order, and copied with them."""
    db = write_db()
    quote = db.ops.quote_name
    answered: list[Any] = []
    with db.cursor() as cursor:
        if returning:
            cursor.execute(
                "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
                [table, returning, len(rows)],
            )
            answered = sorted(value for (value,) in cursor.fetchall())
            columns = [returning, *columns]
        names = ", ".join(quote(c) for c in columns)
        # The driver's errors as Django's (an IntegrityError is one), as a query's are.
        copying = cursor.cursor.copy(f"COPY {quote(table)} ({names}) FROM STDIN")
        with db.wrap_database_errors, copying as copy:
            if returning:
                for key, row in zip(answered, rows, strict=True):
                    copy.write_row((key, *row))
            else:
                for row in rows:
                    copy.write_row(row)
    return answered
