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
from contextlib import contextmanager

import psycopg
from django.conf import settings
from django.db import connection, connections
from django.db import transaction as django_transaction
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


# The writes kept by the innermost `transaction` (None outside one), and whether the outermost one's
# BEGIN is still to be sent (with the next text that goes out).
_local = threading.local()


def _sent_with_begin(statements: list[tuple[str, object]]) -> list[list[tuple]]:
    if not getattr(_local, "begin", False):
        return send(statements)
    _local.begin = False
    return send([("BEGIN", None), *statements])[1:]


def write(*statements: tuple[str, object]) -> None:
    """Sends statements whose rows nobody reads: at once in one round trip, or, inside `transaction`,
    with whatever else that block writes, at its end (with its COMMIT)."""
    kept = getattr(_local, "kept", None)
    if kept is None:
        send(list(statements))
    else:
        kept.extend(statements)


def read(statements: list[tuple[str, object]], *, commit: bool = False) -> list[list[tuple]]:
    """Inside `transaction`: sends what was kept, then these statements, in one round trip (with the
    transaction's BEGIN when nothing has gone out yet), and returns their rows. `commit`: the COMMIT of
    the outermost `transaction` goes with them; the block writes nothing after it."""
    assert not commit or len(connection.atomic_blocks) == 1, "only the outermost transaction commits"
    kept = getattr(_local, "kept", None) or []
    batch = [*kept, *statements]
    kept.clear()
    rows = _sent_with_begin([*batch, ("COMMIT", None)] if commit else batch)
    return rows[len(batch) - len(statements) : len(batch)]


@contextmanager
def transaction(*, savepoint: bool = True):
    """THE way to write in a transaction: its BEGIN travels with the first text sent in it (`read`, or
    whatever query comes first), and its COMMIT with the writes kept until its end (`write`).

    It is Django's atomic block (on-commit hooks wait for the commit, an exception rolls it back, the ORM
    may run in it), with one difference: with Django's autocommit off, psycopg would send a BEGIN of its
    own, a round trip by itself, before the first statement. With autocommit back on in the driver
    alone, psycopg sends none, and the block's first text starts with BEGIN instead. At the end the kept
    writes and the COMMIT go out in one text; Django's commit then finds the transaction closed and only
    runs the on-commit hooks, and on an exception its rollback sends ROLLBACK whenever PostgreSQL has a
    transaction open. Any other query in the block first sends what was kept (and the BEGIN), so
    statements run in the order they were written; nothing kept is sent if the block raises. Inside a
    caller's transaction it joins it, through a savepoint unless the caller would roll back anyway on a
    failure (docs/decisions.md, "BEGIN and COMMIT travel in the statement text").
    """
    nested = connection.in_atomic_block
    outer, kept = getattr(_local, "kept", None), []

    def in_order(execute, sql, params, many, context):
        if kept or getattr(_local, "begin", False):
            batch = kept[:]
            kept.clear()
            _sent_with_begin(batch)
        return execute(sql, params, many, context)

    with django_transaction.atomic(savepoint=savepoint):
        if not nested:
            connection.connection.autocommit = True
            _local.begin = True
        _local.kept = kept
        try:
            with connection.execute_wrapper(in_order):
                yield
                _local.kept = outer
                if kept and not nested and not connection.needs_rollback:
                    kept.append(("COMMIT", None))
                if kept:
                    batch = kept[:]
                    kept.clear()
                    _sent_with_begin(batch)
        finally:
            _local.kept = outer
            if not nested:
                _local.begin = False


def one_round_trip(statements: list[str], params, *, savepoint: bool = True) -> list[list[tuple]]:
    """Runs `statements` as one transaction in one round trip, and returns each one's rows ([] for a
    statement without any): alone, BEGIN and COMMIT in the same text (`_alone`); inside a caller's
    transaction, joining it (`transaction`, through a savepoint unless `savepoint=False`). Each
    statement takes its own snapshot (READ COMMITTED): a later one sees what an earlier one waited for.
    """
    batch = with_params(statements, params)
    if not connection.in_atomic_block:
        return _alone(batch)
    with transaction(savepoint=savepoint):
        return read(batch)


def _alone(batch: list[tuple[str, object]]) -> list[list[tuple]]:
    """one_round_trip outside any transaction: BEGIN, the statements and COMMIT sent as one text, without
    an atomic block around them. Nothing can register an on-commit hook or a savepoint in between, and
    the block's entry and exit were a fifth of the CPU of a delivery's claim (0.33 -> 0.27 ms) and of its
    recording (0.30 -> 0.25 ms), interleaved in one process (docs/benchmarks-notes.md). A statement that
    fails leaves the transaction aborted: it is rolled back here, as the block's exit did."""
    try:
        return send([("BEGIN", None), *batch, ("COMMIT", None)])[1:-1]
    except BaseException:
        raw = connection.connection
        if raw is not None and not raw.closed and raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            try:
                raw.rollback()
            except psycopg.Error:
                pass  # a broken connection: Django closes it (errors_occurred) before its next use
        raise


def with_params(statements: list[str], params) -> list[tuple[str, object]]:
    """(sql, params) for each statement, the params only for those that have placeholders."""
    return [(statement, params if "%(" in statement else None) for statement in statements]


def fetch(sql: str, params=None) -> list[tuple]:
    """The rows of one statement, sent as Django sends its own (client-side binding, no PREPARE): for
    statements run too seldom to be worth preparing in every connection."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description is not None else []


@contextmanager
def driver_cursor():
    """Django's cursor on the connection, for what must talk to the driver itself: the benchmarks' bulk
    seeder (COPY, executemany) and their bare baselines (a bare INSERT, the floor of exactly once),
    which measure the product against the driver. The product sends its statements through the
    functions above; tests/test_layers.py keeps this one out of the product."""
    with connection.cursor() as cursor:
        yield cursor


def insert_values(obj, skip=()) -> tuple[tuple[str, ...], list]:
    """The quoted columns and prepared values the ORM would INSERT for an unsaved instance."""
    # The connection is looked up once: each use of Django's proxy is a thread-local lookup, and a
    # decision's two rows cost a tenth of its CPU in them (docs/benchmarks-notes.md).
    db = connections[connection.alias]
    columns, values = [], []
    for field, column in _insert_fields(type(obj), tuple(skip)):
        if field.primary_key and getattr(obj, field.attname) is None:
            continue
        columns.append(column)
        values.append(field.get_db_prep_save(field.pre_save(obj, True), db))
    return tuple(columns), values


@functools.cache
def _insert_fields(model, skip: tuple[str, ...]) -> list:
    """A model's fields that insert_values writes, with their quoted columns."""
    return [(f, connection.ops.quote_name(f.column)) for f in model._meta.concrete_fields if f.attname not in skip]


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

    def rows(self, params) -> list[tuple]:
        """The rows as they came back (build makes the instances). Prepared, as everything `send`s: the
        decision's read of a hold with its run, capability and items planned in PostgreSQL 0.43 of its
        0.76 ms (docs/benchmarks-notes.md)."""
        return send([(self.parts()[0], params)])[0]

    def row(self, params) -> tuple | None:
        """The first row, or None."""
        found = self.rows(params)
        return found[0] if found else None


def with_run(invocation, run, capability):
    """Links an invocation to its run and the run to its capability, as select_related would."""
    invocation.run, run.capability = run, capability
    return invocation, run
