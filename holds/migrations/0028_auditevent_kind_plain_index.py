"""The audit log's kind keeps its plain index and loses the varchar_pattern_ops one (models.AuditEvent)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("holds", "0027_quorum_escalation_delegation")]

    operations = [
        migrations.SeparateDatabaseAndState(
            # The plain index already exists under this name (db_index=True made it); only its LIKE twin goes.
            database_operations=[
                migrations.RunSQL(
                    "DROP INDEX IF EXISTS holds_auditevent_kind_e414edad_like",
                    "CREATE INDEX holds_auditevent_kind_e414edad_like ON holds_auditevent (kind varchar_pattern_ops)",
                )
            ],
            state_operations=[
                migrations.AlterField(model_name="auditevent", name="kind", field=models.CharField(max_length=50)),
                migrations.AddIndex(
                    model_name="auditevent",
                    index=models.Index(fields=["kind"], name="holds_auditevent_kind_e414edad"),
                ),
            ],
        )
    ]
