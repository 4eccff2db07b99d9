"""How holds, runs and files read on the wire (SPEC "Shapes")."""

import base64
import json

from .auth import Actor
from .errors import Invalid
from .models import Hold, HoldItem, Invocation, Run, RunFile

PAGE_SIZE = 50


def parse_public_id(text: str, prefix: str) -> int | None:
    head, _, tail = (text or "").partition("_")
    if head != prefix or not tail.isdigit() or len(tail) > 18:
        return None
    return int(tail)


def iso(value):
    return value.isoformat() if value else None


def hold_full(hold: Hold) -> dict:
    items = list(
        HoldItem.objects.filter(hold=hold).order_by("position").values("item_id", "title", "data", "confidence")
    )
    resume = Invocation.objects.filter(hold=hold, kind=Invocation.Kind.RESUME).values_list("resume", flat=True).first()
    return {
        "hold_id": hold.public_id,
        "run_id": f"r_{hold.run_id}",
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
        "resume": resume,
    }


def item_wire(values: dict) -> dict:
    out = {"id": values["item_id"], "title": values["title"], "data": values["data"]}
    if values["confidence"]:
        out["confidence"] = values["confidence"]
    return out


def encode_cursor(value) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode()


def decode_cursor(text: str):
    try:
        return json.loads(base64.urlsafe_b64decode(text.encode()))
    except (ValueError, UnicodeDecodeError):
        raise Invalid([{"field": "cursor", "message": "not a cursor this server gave out"}]) from None


def hold_list(actor: Actor, params) -> dict:
    """Newest first, keyset-paginated by id; a run token sees only its own run's holds."""
    holds = Hold.objects.select_related("capability").order_by("-pk")
    if actor.kind == "run":
        holds = holds.filter(run=actor.run)
    errors = []
    status = params.get("status")
    if status:
        if status not in Hold.Status.values:
            errors.append({"field": "status", "message": f"one of {', '.join(Hold.Status.values)}"})
        holds = holds.filter(status=status)
    if params.get("capability"):
        holds = holds.filter(capability__name=params["capability"])
    if params.get("cursor"):
        last = decode_cursor(params["cursor"])
        if not isinstance(last, int):
            errors.append({"field": "cursor", "message": "not a cursor this server gave out"})
        else:
            holds = holds.filter(pk__lt=last)
    if errors:
        raise Invalid(errors)
    page = list(holds[: PAGE_SIZE + 1])
    more = len(page) > PAGE_SIZE
    page = page[:PAGE_SIZE]
    return {
        "items": [
            {
                "hold_id": h.public_id,
                "run_id": f"r_{h.run_id}",
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
        "next_cursor": encode_cursor(page[-1].pk) if more else None,
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
        "parent": f"r_{run.parent_id}" if run.parent_id else None,
        "children": [f"r_{pk}" for pk in run.children.order_by("pk").values_list("pk", flat=True)],
        "holds": [
            {"hold_id": f"h_{pk}", "status": status}
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
