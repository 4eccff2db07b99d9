"""The audit log is append-only in the database too: UPDATE and DELETE of a row raise.

TRUNCATE is left alone: it
needs the table owner's rights, and the test runner empties tables with it between tests.
"""

from django.db import migrations

FORWARD = [
    """
CREATE OR REPLACE FUNCTION holds_auditevent_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'holds_auditevent is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql
""",
    """
CREATE TRIGGER holds_auditevent_append_only
    BEFORE UPDATE OR DELETE ON holds_auditevent
    FOR EACH ROW EXECUTE FUNCTION holds_auditevent_append_only()
""",
]

BACKWARD = [
    "DROP TRIGGER IF EXISTS holds_auditevent_append_only ON holds_auditevent",
    "DROP FUNCTION IF EXISTS holds_auditevent_append_only()",
]


def forward(apps, schema_editor):
    for statement in FORWARD:
        schema_editor.execute(statement, params=None)


def backward(apps, schema_editor):
    for statement in BACKWARD:
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [("holds", "0002_ops_counters_notifications")]

    operations = [migrations.RunPython(forward, backward)]
