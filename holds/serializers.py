"""How holds, runs and files read on the wire (SPEC "Shapes")."""

from .auth import Actor
from .errors import Invalid
from .ids import HOLD, RUN, public_id
from .models import Hold, HoldItem, Invocation, Run, RunFile
from .paging import decode_cursor, encode_cursor, read_page
from .policy import readable_holds
from .queries import hold_quorum
from .services import resume_as_sent


def iso(value):
    return value.isoformat() if value else None


def hold_full(hold: Hold) -> dict:
    items = list(
        HoldItem.objects.filter(hold=hold)
        .order_by("position")
        .values("item_id", "title", "data", "confidence", "actions", "details", "schema", "decided_by")
    )
    resume = Invocation.objects.filter(hold=hold, kind=Invocation.Kind.RESUME).values_list("resume", flat=True).first()
    return {
        "hold_id": hold.public_id,
        "run_id": public_id(RUN, hold.run_id),
        "capability": hold.capability.name,
        "status": hold.status,
        "intent": hold.intent,
        "actions": hold.actions,
        "items": [item_wire(i) for i in items],
        "details": hold.details,
        "files": hold.files,
        "expires_at": iso(hold.expires_at),
        "created_at": iso(hold.created_at),
        "decided_by": hold.decided_by or None,
        "decided_at": iso(hold.decided_at),
        "resume": resume_as_sent(
            resume, hold_id=hold.pk, run_id=public_id(RUN, hold.run_id), capability=hold.capability.name
        ),
        **({"quorum": quorum} if (quorum := hold_quorum(hold)) else {}),
    }


def item_wire(values: dict) -> dict:
    out = {"id": values["item_id"], "title": values["title"], "data": values["data"]}
    if values["confidence"]:
        out["confidence"] = values["confidence"]
    # The item's own parts as it was asked with them (absent when it was not).
    if values.get("actions"):
        out["actions"] = values["actions"]
    if values.get("details"):
        out["details"] = values["details"]
    if values.get("schema") is not None:
        out["schema"] = values["schema"]
    if values.get("decided_by"):
        out["decided_by"] = values["decided_by"]
    return out


def hold_list(actor: Actor, params) -> dict:
    """Newest first, keyset-paginated by id; a run token sees only its own run's holds."""
    holds = readable_holds(actor, Hold.objects.select_related("capability").order_by("-pk"))
    errors = []
    status = params.get("status")
    if status:
        if status not in Hold.Status.values:
            errors.append({"field": "status", "message": f"one of {', '.join(Hold.Status.values)}"})
        holds = holds.filter(status=status)
    if params.get("capability"):
        holds = holds.filter(capability__name=params["capability"])
    if params.get("cursor"):
        last = decode_cursor(params["cursor"], 1)
        if last is None:
            errors.append({"field": "cursor", "message": "not a cursor this server gave out"})
        else:
            holds = holds.filter(pk__lt=last[0])
    if errors:
        raise Invalid(errors)
    page, more = read_page(holds)
    return {
        "items": [
            {
                "hold_id": h.public_id,
                "run_id": public_id(RUN, h.run_id),
                "capability": h.capability.name,
                "status": h.status,
                "intent": h.intent,
                "created_at": iso(h.created_at),
                "expires_at": iso(h.expires_at),
                "decided_by": h.decided_by or None,
                "decided_at": iso(h.decided_at),
            }
            for h in page
        ],
        "next_cursor": encode_cursor([page[-1].pk]) if more else None,
    }


def run_full(run: Run) -> dict:
    return {
        "run_id": run.public_id,
        "capability": run.capability.name,
        "version": run.version,
        "status": run.status,
        "seq": run.seq,
        "input": run.input,
        "output": run.output,
        "error": run.error or None,
        "parent": public_id(RUN, run.parent_id) if run.parent_id else None,
        "children": [public_id(RUN, pk) for pk in run.children.order_by("pk").values_list("pk", flat=True)],
        "holds": [
            {"hold_id": public_id(HOLD, pk), "status": status}
            for pk, status in run.holds.order_by("pk").values_list("pk", "status")
        ],
        "created_at": iso(run.created_at),
    }


def file_brief(run_file: RunFile) -> dict:
    return {
        "file_id": run_file.public_id,
        "name": run_file.name,
        "size": run_file.size,
        "content_type": run_file.content_type,
        "sha256": run_file.sha256,
    }
