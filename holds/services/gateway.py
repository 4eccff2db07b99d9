"""The database gateway: the one module that talks to PostgreSQL by hand.

It owns sending statements (each PREPAREd once per connection, several to a round trip), the
transaction whose BEGIN and COMMIT travel with its statements, and reading the rows that come back
into model instances. Every hand-written statement is in services/sql.py; `connection.cursor` is
banned everywhere else (ruff's TID251, pyproject.toml), so that a statement cannot bypass this.

Prepared statements: Django binds parameters on the client, so PostgreSQL parses and plans every
statement it is sent, every time. For the joins and CTEs on the delivery path that planning cost more
than running them (docs/benchmarks-notes.md). So each statement sent here is PREPAREd once in each
connection, and is then sent as a short EXECUTE with its values; a list of them travels as one text
(one round trip).

With RQ_TRANSACTION_POOLER the next transaction may run in another server session, which never saw
the PREPARE: then each statement travels as plain text with its values bound by the client, as Django
sends its own, still several to a round trip (the cost is in docs/benchmarks.md).

Not psycopg's own prepared statements: they need its pipeline mode to send several at once, and
its pipeline waits for the answer by polling, which cost the worker more CPU than the planning saved
PostgreSQL (docs/benchmarks-notes.md).

Rows into models: the hottest statements (the run-token lookup, a delivery's claim, recording an
answer) are written out once instead of being compiled by the ORM on every call (compiling cost more
than running them). `Columns` keeps them honest: the columns come from the model, and values go back
through the same converters the ORM applies (JSON), so the instances are the ORM's own. Fields not
selected are deferred and load on first use.
"""

import datetime
import decimal
import functools
import itertools
import re
import threading
import uuid
import weakref
from contextlib import contextmanager, nullcontext, suppress

from django.conf import settings
from django.db import connection, transaction
from psycopg.pq import ExecStatus

_TUPLES_OK = ExecStatus.TUPLES_OK

# Prepared statements by connection: {sql: name}. A statement's name is never reused, so a PREPARE
# that may or may not have survived a failed round trip cannot collide with a later one.
_prepared: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()
_names = itertools.count(1)
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%s|%%")


def _sql_type(value) -> str:
    """The parameter's type for PREPARE; "unknown" lets PostgreSQL infer it from where it is used.
    Taken from the values of the first use: a later NULL or value of the same kind fits it."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint"
    if isinstance(value, float):
        return "double precision"
    if isinstance(value, decimal.Decimal):
        return "numeric"
    if isinstance(value, datetime.datetime):
        return "timestamptz" if value.tzinfo else "timestamp"
    if isinstance(value, str | uuid.UUID):
        return "text"
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return "text[]"
    if isinstance(value, list | tuple) and value and all(isinstance(v, int) for v in value):
        return "bigint[]"
    return "unknown"  # None, JSON (inferred from the column or cast), empty lists


@functools.cache
def _numbered(sql: str) -> tuple[str, tuple[str, ...] | int]:
    """The statement with $1, $2 … for its placeholders, and what fills them: the names of %(name)s
    placeholders in order, or the number of %s ones."""
    names: dict[str, int] = {}
    count = 0

    def number(match: re.Match) -> str:
        nonlocal count
        if match.group(0) == "%%":
            return "%"
        if match.group(1) is None:
            count += 1
            return f"${count}"
        return f"${names.setdefault(match.group(1), len(names) + 1)}"

    numbered = _PLACEHOLDER.sub(number, sql)
    return numbered, (tuple(names) if names else count)


def _execute_text(sql: str, params, made: dict, new: list) -> tuple[list[str], list]:
    """The texts that run one statement (its PREPARE on first use, then its EXECUTE) and their values."""
    if params is None:
        return [sql.replace("%", "%%")], []
    numbered, fill = _numbered(sql)
    values = [params[name] for name in fill] if isinstance(fill, tuple) else list(params)
    texts = []
    if sql not in made:
        made[sql] = f"rq_{next(_names)}"
        new.append(sql)
        types = ", ".join(_sql_type(value) for value in values)
        texts.append(f"PREPARE {made[sql]} ({types}) AS {numbered.replace('%', '%%')}")
    texts.append(f"EXECUTE {made[sql]}({', '.join(['%s'] * len(values))})" if values else f"EXECUTE {made[sql]}")
    return texts, values


@functools.cache
def _plain(sql: str) -> tuple[str, tuple[str, ...] | None]:
    """The statement with %s for each %(name)s placeholder and the names in order (None: it has none)."""
    names = tuple(re.findall(r"%\((\w+)\)s", sql))
    return (re.sub(r"%\(\w+\)s", "%s", sql), names) if names else (sql, None)


def _plain_text(sql: str, params) -> tuple[list[str], list]:
    """The text that runs one statement with nothing kept in the session, and its values."""
    if params is None:
        return [sql.replace("%", "%%")], []
    text, names = _plain(sql)
    return [text], ([params[name] for name in names] if names is not None else list(params))


def send(statements: list[tuple[str, object]]) -> list[list[tuple]]:
    """Runs each (sql, params) in order, in one round trip, and returns each one's rows ([] for a
    statement that returns none). Transactions are the caller's: inside an atomic block they join
    it, otherwise they run as one implicit transaction unless the list spells out BEGIN and COMMIT
    (statements without parameters are sent as they are)."""
    connection.ensure_connection()
    pooled = settings.RQ_TRANSACTION_POOLER
    made = {} if pooled else _prepared.setdefault(connection.connection, {})
    texts, values, runs, new = [], [], [], []
    for sql, params in statements:
        parts, part_values = _plain_text(sql, params) if pooled else _execute_text(sql, params, made, new)
        texts.extend(parts)
        values.extend(part_values)
        runs.append(len(texts) - 1)  # the index of the text whose rows are this statement's
    try:
        with connection.cursor() as cursor:
            cursor.execute("; ".join(texts), values)
            # psycopg's own cursor: Django's wrapper and `description` build objects for every
            # column of every result, and only whether there are rows matters here.
            raw, results = cursor.cursor, []
            while True:
                results.append(raw.fetchall() if raw.pgresult.status == _TUPLES_OK else [])
                if not raw.nextset():
                    break
    except BaseException:
        for sql in new:  # whether they were prepared is not known; their names are not used again
            made.pop(sql, None)
        raise
    return [results[at] for at in runs]


_local = threading.local()


def write(*statements: tuple[str, object]) -> None:
    """Sends statements whose rows nobody reads: at once in one round trip, or, inside `deferred`,
    with whatever else that block writes, at its end."""
    kept = getattr(_local, "kept", None)
    if kept is None:
        send(list(statements))
    else:
        kept.extend(statements)


@contextmanager
def deferred():
    """Keeps what `write` is given in this block and sends it all in one round trip as the block
    ends, with the COMMIT when the block is the last thing in the outermost atomic block (then
    Django's own commit finds nothing left to do and only runs the on-commit hooks). Any other
    query in the block first sends what was kept, so statements still run in the order they were
    written. Nothing kept is sent if the block raises: the atomic block rolls back."""
    kept = []

    def send_kept():
        batch = kept[:]
        kept.clear()
        send(batch)

    def in_order(execute, sql, params, many, context):
        if kept:
            send_kept()
        return execute(sql, params, many, context)

    _local.kept = kept
    try:
        with connection.execute_wrapper(in_order):
            yield
            _local.kept = None
            outermost = len(connection.atomic_blocks) == 1 and not connection.needs_rollback
            if kept and outermost:
                kept.append(("COMMIT", None))
            if kept:
                send_kept()
    finally:
        _local.kept = None


def fetch(sql: str, params=None) -> list[tuple]:
    """The rows of one statement, sent as Django sends its own (client-side binding, no PREPARE): for
    statements run too seldom to be worth preparing in every connection."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description is not None else []


# --- the transaction in one round trip -----------------------------------------------------------


def one_round_trip(statements: list[str], params, *, savepoint: bool = True) -> list[list[tuple]]:
    """Runs `statements` as one transaction in one round trip and returns each one's rows ([] for a
    statement without any).

    Alone, BEGIN and COMMIT travel in the same text (docs/decisions.md says why not Django's atomic).
    Inside a caller's transaction the statements join it, through a savepoint unless the caller would
    roll back anyway on a failure. Each statement takes its own snapshot (READ COMMITTED): a later one
    sees what an earlier one waited for.
    """
    batch = [(statement, params if "%(" in statement else None) for statement in statements]
    nested = connection.in_atomic_block
    try:
        with transaction.atomic(savepoint=savepoint) if nested else nullcontext():
            results = send(batch if nested else [("BEGIN", None), *batch, ("COMMIT", None)])
    except BaseException:
        if not nested and connection.connection is not None:
            # A failed statement leaves the spelled-out transaction open and aborted.
            with suppress(Exception):
                connection.connection.execute("ROLLBACK")
        raise
    return results if nested else results[1:-1]


def insert_values(obj, skip=()) -> tuple[tuple[str, ...], list]:
    """The quoted columns and prepared values the ORM would INSERT for an unsaved instance."""
    columns, values = [], []
    for field in obj._meta.concrete_fields:
        if field.attname in skip or (field.primary_key and getattr(obj, field.attname) is None):
            continue
        columns.append(connection.ops.quote_name(field.column))
        values.append(field.get_db_prep_save(field.pre_save(obj, True), connection))
    return tuple(columns), values


# --- rows into models ----------------------------------------------------------------------------


class Columns:
    """Some or all of one model's columns, selected under a table alias."""

    def __init__(self, model, alias: str, names=None):
        self.model, self.alias = model, alias
        self.fields = [f for f in model._meta.concrete_fields if names is None or f.attname in names]
        self.attnames = [f.attname for f in self.fields]
        # Converters depend on the backend and the field only, so they are looked up once.
        self.converters = []
        for i, field in enumerate(self.fields):
            column = field.get_col(model._meta.db_table)
            for convert in connection.ops.get_db_converters(column) + field.get_db_converters(connection):
                self.converters.append((i, convert, column))

    def select(self, named: bool = False) -> str:
        """`alias.column, …`; `named` adds `AS alias_attname` (for reading them back from a CTE)."""
        quote = connection.ops.quote_name
        return ", ".join(
            f"{self.alias}.{quote(f.column)}" + (f" AS {self.alias}_{f.attname}" if named else "") for f in self.fields
        )

    def build(self, values):
        values = list(values)
        for i, convert, column in self.converters:
            values[i] = convert(values[i], column, connection)
        return self.model.from_db(connection.alias, self.attnames, values)


def build(columns, row) -> list:
    """One instance per Columns, from consecutive parts of `row`."""
    objects, at = [], 0
    for part in columns:
        objects.append(part.build(row[at : at + len(part.fields)]))
        at += len(part.fields)
    return objects


class Query:
    """A hand-written SELECT of some Columns, put together on first use (the models' metadata and
    the connection's quoting are ready by then) and run with one round trip."""

    def __init__(self, make):
        self._make, self._made = make, None

    def parts(self) -> tuple:
        """(sql, columns): the statement and the Columns its result rows hold, in order."""
        if self._made is None:
            self._made = self._make()
        return self._made

    def row(self, params) -> tuple | None:
        """The first row as it came back (build makes the instances), or None."""
        found = fetch(self.parts()[0], params)
        return found[0] if found else None


def with_run(invocation, run, capability):
    """Links an invocation to its run and the run to its capability, as select_related would."""
    invocation.run, run.capability = run, capability
    return invocation, run
