"""Model instances from hand-written SQL.

The hottest statements (the run-token lookup, a delivery's claim, recording an answer) are written
out once instead of being compiled by the ORM on every call (compiling cost more than running them;
docs/benchmarks-notes.md). `Columns` keeps them honest: the columns come from the model, and values
go back through the same converters the ORM applies (JSON), so the instances are the ORM's own.
Fields not selected are deferred and load on first use.
"""

from django.db import connection


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
        """The first row as it came back (rows.build makes the instances), or None."""
        sql, _ = self.parts()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone()


def with_run(invocation, run, capability):
    """Links an invocation to its run and the run to its capability, as select_related would."""
    invocation.run, run.capability = run, capability
    return invocation, run
