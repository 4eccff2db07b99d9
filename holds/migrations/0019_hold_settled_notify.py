"""A hold leaving `pending` (or written already decided) NOTIFYs rq_hold_settled with its id: the MCP
calls waiting for it in the ASGI process wake at once (holds/mcp/waiter.py). A trigger, so that every
path that settles a hold (a decision, the expiry sweep, a run finishing, rules at the ask) is covered
without each having to remember it."""

from django.db import migrations

FORWARD = """
CREATE FUNCTION holds_hold_settled_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('rq_hold_settled', NEW.id::text);
    RETURN NULL;
END $$;
CREATE TRIGGER holds_hold_settled AFTER UPDATE OF status ON holds_hold FOR EACH ROW
    WHEN (OLD.status = 'pending' AND NEW.status <> 'pending') EXECUTE FUNCTION holds_hold_settled_notify();
CREATE TRIGGER holds_hold_settled_at_ask AFTER INSERT ON holds_hold FOR EACH ROW
    WHEN (NEW.status <> 'pending') EXECUTE FUNCTION holds_hold_settled_notify();
"""
BACKWARD = """
DROP TRIGGER IF EXISTS holds_hold_settled_at_ask ON holds_hold;
DROP TRIGGER IF EXISTS holds_hold_settled ON holds_hold;
DROP FUNCTION IF EXISTS holds_hold_settled_notify();
"""


class Migration(migrations.Migration):
    dependencies = [("holds", "0018_evals_datasets_experiments")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
