"""The append-only audit log: every service writes its event in its own transaction."""

from ..auth import Actor
from ..models import AuditEvent, AuditKind


def audit(kind: AuditKind, actor: Actor, *, run_id=None, hold_id=None, invocation_id="", **data) -> AuditEvent:
    return AuditEvent.objects.create(
        kind=kind,
        actor=actor.label,
        run_id_ref=run_id,
        hold_id_ref=hold_id,
        invocation_id_ref=invocation_id or "",
        data=data,
    )
