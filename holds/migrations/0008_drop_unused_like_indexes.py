"""Drops two varchar_pattern_ops ("_like") indexes that Django adds on its own and nothing reads.

Django makes one beside every indexed varchar column on PostgreSQL, for LIKE 'prefix%' queries.
Nothing filters invocation ids by prefix: they are looked up by equality (the primary key and
the holds' foreign key serve that). Yet each index is written on every insert (a resume per
decision or expiry) and on every non-HOT update of a hold (each decision and expiry), on a page of
its own, because the ids are random. At 1,000,000 holds they were 180 MB that the sweep dirtied at
random (docs/benchmarks-notes.md). A later AlterField
of these two fields would make Django create them again: drop them again in that migration.
"""

from django.db import migrations

COLUMNS = [("holds_invocation", "id"), ("holds_hold", "invocation_id")]


def _like_index(schema_editor, table: str, column: str) -> str:
    return schema_editor._create_index_name(table, [column], suffix="_like")


def forward(apps, schema_editor):
    for table, column in COLUMNS:
        schema_editor.execute(
            f"DROP INDEX IF EXISTS {schema_editor.quote_name(_like_index(schema_editor, table, column))}"
        )


def backward(apps, schema_editor):
    for table, column in COLUMNS:
        name = schema_editor.quote_name(_like_index(schema_editor, table, column))
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON {schema_editor.quote_name(table)} "
            f"({schema_editor.quote_name(column)} varchar_pattern_ops)"
        )


class Migration(migrations.Migration):
    dependencies = [("holds", "0007_pending_counts")]

    operations = [migrations.RunPython(forward, backward)]
