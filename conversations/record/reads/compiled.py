"""Reads whose SQL Django builds once and runs again with new values: the live frames' and
the pages' hottest reads, where building the query (the ORM's clone, resolve and compile)
cost ten times what running it did.

A read is an ordinary queryset, built by a function of its variable values. The first call
for a shape (how many values each list holds) on a database builds it with marker values,
compiles it, and notes where each marker's value lands in the statement's parameters;
later calls, in any thread, put their own values there and run the same SQL on their own
connection, and the rows go through the compiler's converters (dates, JSON, booleans) for
that connection, as the ORM hands them out. Statements are kept per database alias and
shape, never per connection: a thread's connection (one per request thread under ASGI)
is neither kept alive nor compiled for again.
A shape whose markers do not each land exactly once (a Django that changes how it binds
values) is never cached: the queryset runs as built, every time.

Only ints and UUIDs vary (ids, seqs); everything else in the query is part of its SQL, so a
value the build function computes from an argument (`start + 100`) must be an argument of
its own (a shape where a marker's value comes out changed is refused, as above). The
compiler's internals used here are guarded by tests/live/test_internals.py.
"""

from __future__ import annotations

import copy
import itertools
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from django.core.exceptions import EmptyResultSet
from django.db import connections, router
from django.db.models import Model, QuerySet, UUIDField
from django.db.models.sql.compiler import SQLCompiler

Value = int | uuid.UUID
Args = tuple[Value | Sequence[Value], ...]
M = TypeVar("M", bound=Model)

SHAPES = 64  # statements kept per read (the rest are built each time)
# Markers: values no real argument takes, within every integer column's range (Django
# leaves a lookup with an out-of-range value out of the SQL).
_MARKER_INT = 1_900_000_000
_MARKER_NEAR = 1_000_000  # a fixed parameter this close to the markers came from one
_MARKER_UUID = 0xF00D_0000_0000_4000_8000_0000_0000_0000


class _Statement(Generic[M]):
    def __init__(
        self,
        sql: str,
        compiler: SQLCompiler,
        slots: list[int | None],
        fixed: list[Any],
        casts: list[type | None],
    ) -> None:
        self.sql = sql
        self.compiler = compiler
        self.slots = slots  # per parameter: the index of the value it takes, or None (fixed)
        self.fixed = fixed  # per parameter: its value, where it is fixed
        # Per parameter that takes a value: the type the driver was handed the marker as
        # (psycopg's Int4 where Django wraps an int), to hand it new values as the same.
        self.casts = casts

    def params(self, values: list[Any]) -> list[Any]:
        return [
            fixed if slot is None else values[slot] if cast is None else cast(values[slot])
            for slot, fixed, cast in zip(self.slots, self.fixed, self.casts, strict=True)
        ]


class Read(Generic[M]):
    """`build(*args)` → a queryset of `values_list` rows (or model rows with `models`),
    compiled once per database and shape."""

    def __init__(
        self, model: type[M], build: Callable[..., QuerySet[M, Any]], kinds: Sequence[type]
    ) -> None:
        self.model = model
        self.build = build
        self.kinds = tuple(kinds)  # per argument: int, uuid.UUID or list (of ints)
        self.lock = threading.Lock()
        self.statements: dict[tuple[str, tuple[int, ...]], _Statement[M]] = {}

    def values(self, *args: Value | Sequence[Value]) -> list[tuple[Any, ...]]:
        """The rows of `build(*args)`'s values_list, as tuples."""
        connection, statement = self._prepared(args)
        if statement is None:
            return [tuple(row) for row in self.build(*args)]
        with connection.cursor() as cursor:
            cursor.execute(statement.sql, statement.params(_flat(connection, args)))
            rows = cursor.fetchall()
        compiler = statement.compiler
        if compiler.connection is not connection:  # converters for this thread's connection
            compiler = copy.copy(compiler)
            compiler.connection = connection
        return [tuple(row) for row in compiler.results_iter(results=[rows])]

    def models(self, *args: Value | Sequence[Value]) -> list[M]:
        """The model rows of `build(*args)` (with its annotations), read as `raw` reads them."""
        connection, statement = self._prepared(args)
        if statement is None:
            return list(self.build(*args))
        params = statement.params(_flat(connection, args))
        rows = self.model._default_manager.db_manager(connection.alias).raw(statement.sql, params)
        return list(rows)

    def _prepared(self, args: Args) -> tuple[Any, _Statement[M] | None]:
        """The connection the read runs on, and its statement for these arguments' shape
        (None: run the queryset as built)."""
        connection = connections[router.db_for_read(self.model)]
        return connection, self._statement(connection, args)

    def _statement(self, connection: Any, args: Args) -> _Statement[M] | None:
        shape = tuple(len(a) if isinstance(a, Sequence) else -1 for a in args)
        key = (connection.alias, shape)
        with self.lock:
            found = self.statements.get(key)
        if found is not None:
            return found
        statement = self._compile(connection, shape)
        if statement is not None:
            with self.lock:
                if len(self.statements) < SHAPES:
                    self.statements[key] = statement
        return statement

    def _compile(self, connection: Any, shape: tuple[int, ...]) -> _Statement[M] | None:
        counter = itertools.count(1)
        markers: list[Value] = []

        def marker(kind: type) -> Value:
            n = next(counter)
            value: Value = uuid.UUID(int=_MARKER_UUID + n) if kind is uuid.UUID else _MARKER_INT + n
            markers.append(value)
            return value

        args: list[Value | list[Value]] = []
        for kind, size in zip(self.kinds, shape, strict=True):
            args.append(marker(kind) if size < 0 else [marker(int) for _ in range(size)])
        query = self.build(*args)
        compiler = query.query.get_compiler(connection=connection)
        try:
            sql, params = compiler.as_sql()
        except EmptyResultSet:  # an empty list: nothing to read, and nothing to keep
            return None
        prepared = [_prep(connection, m) for m in markers]
        slots: list[int | None] = []
        for param in params:
            hits = [i for i, m in enumerate(prepared) if isinstance(param, type(m)) and m == param]
            slots.append(hits[0] if hits else None)
        if sorted(s for s in slots if s is not None) != list(range(len(markers))):
            return None  # a marker bound twice or not at all: not this read's shape
        fixed = [None if slot is not None else p for slot, p in zip(slots, params, strict=True)]
        if any(_derived(value) for value in fixed):
            return None  # a value computed from an argument: it would be frozen
        casts: list[type | None] = [
            type(p) if slot is not None and isinstance(p, int) and type(p) is not int else None
            for slot, p in zip(slots, params, strict=True)
        ]
        return _Statement(sql, compiler, slots, fixed, casts)


def read(model: type[M], *kinds: type) -> Callable[[Callable[..., QuerySet[M, Any]]], Read[M]]:
    """`@read(Message, uuid.UUID, list, int)` over a function building a queryset of `model`
    from arguments of those kinds, in order (a list holds ints): a `Read` of it."""

    def wrap(build: Callable[..., QuerySet[M, Any]]) -> Read[M]:
        return Read(model, build, kinds)

    return wrap


def _derived(value: Any) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value - _MARKER_INT) < _MARKER_NEAR
    if isinstance(value, uuid.UUID):
        return value.int >> 64 == _MARKER_UUID >> 64
    if isinstance(value, str):
        return value.startswith(f"{_MARKER_UUID >> 64:016x}")
    return False


_UUID_FIELD = UUIDField()


def _prep(connection: Any, value: Value) -> Any:
    """A value as the database driver is handed it (a UUID as Django's UUIDField hands it:
    hex where the database has no UUID type)."""
    if isinstance(value, uuid.UUID):
        return _UUID_FIELD.get_db_prep_value(value, connection)
    return value


def _flat(connection: Any, args: Args) -> list[Any]:
    return [_prep(connection, v) for v in _values(args)]


def _values(args: Args) -> Iterator[Value]:
    for arg in args:
        if isinstance(arg, Sequence):
            yield from arg
        else:
            yield arg
