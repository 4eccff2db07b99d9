"""The write path's two ways of talking to PostgreSQL by hand: a transaction in one round trip, and the
columns and values an ORM INSERT would write (so that hand-written INSERTs stay the ORM's rows)."""

from contextlib import nullcontext, suppress

from django.db import connection, transaction

from .. import prepared


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
            results = prepared.send(batch if nested else [("BEGIN", None), *batch, ("COMMIT", None)])
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
