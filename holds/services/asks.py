"""Asks: an agent puts a question to a person (a pending hold with its items)."""

import hashlib
import json
from contextlib import nullcontext
from datetime import timedelta

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from .. import markup
from ..auth import sha256_hex, token_invocation_id
from ..errors import Conflict, Invalid
from ..ids import FILE, HOLD, RUN, parse_public_id, public_id
from ..models import AuditEvent, AuditKind, Hold, HoldItem, Invocation, Run, RunFile
from ..schemas import canonical_json, item_schema_compile_problems, validate_ask
from . import gateway, sql
from .evals import eval_ask_refusal_for_invocation
from .gateway import insert_values
from .rules import decide_at_ask
from .tokens import invocation_for_token


def hold_fingerprint(*, intent: str, actions, details: str, files, rows: str) -> str:
    """What the browser's form carries: a decision on a page that no longer shows the hold is refused.

    The hash of the ask's own parts (canonical JSON) and of its items as they are written (item_rows, the
    text the ask's statement reads): each item whole, with its own actions, details and schema. Made
    from that text rather than a second, sorted encoding of every item: for a large item that encoding
    was a fifth of the ask's time, all of it holding the web process's GIL (docs/benchmarks-notes.md)."""
    envelope = canonical_json({"intent": intent, "actions": actions, "details": details, "files": files})
    return hashlib.sha256((envelope + rows).encode()).hexdigest()


def hold_ask(*, invocation: Invocation, body) -> Hold:
    """The agent asks a question: one pending hold for the run, written with its items.

    Order of refusals is SPEC's: an open hold (409) before an invalid body (422). The partial
    unique index on pending holds per run makes a concurrent second ask fail, not double.
    """
    # Evals (SPEC "Settled"): an eval run's ask is refused right after the 401 check, whatever its body.
    eval_ask_refusal_for_invocation(invocation)
    return _ask(invocation, *read_ask(body, invocation.run))


def _ask(invocation: Invocation, ask, items: list[dict], errors: list[dict]) -> Hold:
    """hold_ask once its body is read (read_ask): refused, or written."""
    run = invocation.run
    if errors:
        # An open hold answers 409 even for a bad body (SPEC's order); looked up only on this path
        # so that a good ask costs no extra query: the partial unique index refuses a second one.
        _refuse_second_ask(run, invocation.id)
        raise Invalid(errors)
    hold, event, rows = new_hold(ask, items, invocation_id=invocation.id)
    try:
        _insert_ask(hold, items, rows, event, run=run)
    except IntegrityError:
        _refuse_second_ask(run, invocation.id)
        raise
    # Reviewers hear about it once the run is held on it (delivery), not here: publishing a task is
    # a quarter of an ask's time, and the agent's suspended answer follows within moments.
    return hold


def hold_ask_by_token(*, token: str, body) -> Hold | None:
    """hold_ask for a request that brings only its run token; None when the token is not live.

    A good ask is one statement with no lookup before it: the statement finds the token's invocation
    and run and writes the hold only if they are live. Anything else (a bad body, an open hold, files
    to check against the run) looks the token up first, as every other endpoint does, so 401, 409 and
    422 keep SPEC's order.
    """
    # What costs (compiling item schemas, markdown in a child process) runs only once the token is
    # known live: such asks take the lookup path.
    ask, items, errors = read_ask(body, None, compile_schemas=False)
    invocation_id = token_invocation_id(token)
    costly = not errors and (
        any(item["schema"] is not None for item in items)
        or not markup.in_process([ask.details] + [item["details"] or "" for item in items])
    )
    if errors or ask.files or invocation_id is None or costly:
        invocation = invocation_for_token(token)
        if invocation is None:
            return None
        eval_ask_refusal_for_invocation(invocation)
        # The body is read once: what the first read left for a live token is compiling its item
        # schemas (a 256 KiB ask read twice cost 100 ms of the web process) and checking its files.
        errors = errors + item_schema_compile_problems(body, errors)
        return _ask(invocation, *_with_files(body, invocation.run, ask, errors))
    hold, event, rows = new_hold(ask, items, invocation_id=invocation_id)
    try:
        written = _insert_ask(hold, items, rows, event, token_hash=sha256_hex(token))
    except IntegrityError:
        # The run has an open hold or this invocation asked already (409), unless the token died since
        # the statement ran (401).
        invocation = invocation_for_token(token)
        if invocation is None:
            return None
        _refuse_second_ask(invocation.run, invocation.id)
        raise
    return hold if written else None


def read_ask(body, run: Run | None, *, compile_schemas: bool = True) -> tuple:
    """(ask, items, errors): the body validated; its files checked against `run` when given."""
    ask, errors = validate_ask(body, compile_schemas=compile_schemas)
    return _with_files(body, run, ask, errors)


def _with_files(body, run: Run | None, ask, errors: list[dict]) -> tuple:
    """read_ask's end: the body's files checked against `run` when given, and the items as dicts."""
    file_ids = body.get("files") if isinstance(body, dict) and isinstance(body.get("files"), list) else []
    if file_ids and run is not None:
        errors += _file_errors(run, file_ids)
    if errors:
        return ask, [], errors
    items = [item.model_dump(exclude_none=False, by_alias=True) for item in ask.items]
    for item in items:
        item["confidence"] = item["confidence"] or {}
    return ask, items, errors


def new_hold(ask, items: list[dict], *, invocation_id: str) -> tuple[Hold, AuditEvent, str]:
    """The hold, its audit event and its items' rows (item_rows), without what comes from the run
    (filled in as they are written)."""
    confidences = [v for item in items for v in item["confidence"].values()]
    # The hold's details and every item's, under one time and size budget for the whole ask.
    rendered = markup.render_all([ask.details] + [item["details"] or "" for item in items])
    for n, item in enumerate(items, start=1):
        item["details_html"] = rendered[n] if rendered and item["details"] else None
    rows = item_rows(items)
    hold = Hold(
        details_html=rendered[0] if rendered else None,
        invocation_id=invocation_id,
        intent=ask.intent,
        actions=list(ask.actions),
        details=ask.details,
        files=list(ask.files),
        expires_at=(timezone.now() + timedelta(seconds=ask.expires_in)) if ask.expires_in else None,
        item_count=len(items),
        min_confidence=min(confidences) if confidences else None,
        fingerprint=hold_fingerprint(
            intent=ask.intent, actions=list(ask.actions), details=ask.details, files=list(ask.files), rows=rows
        ),
    )
    event = AuditEvent(
        kind=AuditKind.HOLD_ASKED,
        invocation_id_ref=invocation_id,
        data={"intent": ask.intent, "items": len(items), "expires_in": ask.expires_in},
    )
    return hold, event, rows


def item_rows(items: list[dict]) -> str:
    """The items as one JSON text that the ask's statement reads as rows (sql.ask). Data and schema are
    spliced in as the exact text their columns keep (ExactJSONField), not encoded a second time as
    strings inside it: the statement reads them as json, whose text PostgreSQL keeps as written. Each
    item keeps its data's text as `data_text`, for the rules at the ask (rules.item_flags reads it)."""
    exact = HoldItem._meta.get_field("data").get_prep_value
    rows = []
    for n, item in enumerate(items):
        item["data_text"] = exact(item["data"])
        head = json.dumps(
            {
                "position": n,
                "item_id": item["id"],
                "title": item["title"],
                "confidence": item.get("confidence") or {},
                # Optional parts not sent read as if sent empty: one item, one text.
                "actions": item.get("actions") or None,
                "details": item.get("details") or "",
                "details_html": item.get("details_html"),
            },
            ensure_ascii=False,
        )
        rows.append(f'{head[:-1]},"data":{item["data_text"]},"schema":{exact(item.get("schema")) or "null"}}}')
    return "[" + ",".join(rows) + "]"


def search_parts(hold: Hold, items: list[dict]) -> tuple[str, str]:
    """The hold's search text is its intent, its run's public id, its item ids and titles, lowercased:
    the parts before and after the run's id (which the statement may only learn as it runs)."""
    rest = [i["id"] for i in items] + [i["title"] for i in items]
    return (hold.intent + " ").lower(), (" " + " ".join(rest)).lower() if rest else ""


# The run-dependent columns of an ask, filled in by the statement itself.
_ASK_RUN_COLUMNS = ("run_id", "capability_id", "search_text")


def ask_statement(hold: Hold, items: list[dict], rows: str, event: AuditEvent, *, run: Run | None, token_hash) -> tuple:
    """sql.ask and its parameters for this hold: for `run`, or for the run whose live token hashes to
    `token_hash`. The hold and audit row are written from their model instances as the ORM would, the
    items from their rows (item_rows)."""
    head, tail = search_parts(hold, items)
    if run is not None:
        params = [run.pk, run.capability_id]
    else:
        params = [hold.invocation_id, token_hash]
    hold_columns, values = insert_values(hold, skip=_ASK_RUN_COLUMNS)
    params += [head, tail, *values, rows]
    event_columns, values = insert_values(event, skip=("hold_id_ref", "run_id_ref", "actor"))
    params += values
    return sql.ask(hold_columns, event_columns, by_token=run is None), params


def _insert_ask(
    hold: Hold, items: list[dict], rows: str, event: AuditEvent, *, run: Run | None = None, token_hash=None
) -> bool:
    """Writes a hold with everything that goes with it, all or nothing, in one statement (sql.ask).
    False: no live token hashes to `token_hash`, and nothing was written."""
    statement, params = ask_statement(hold, items, rows, event, run=run, token_hash=token_hash)
    # Alone it needs no transaction. Inside a caller's, a savepoint keeps a refused ask (the unique
    # index on pending holds) from aborting that transaction.
    with transaction.atomic() if connection.in_atomic_block else nullcontext():
        (found,) = gateway.send([(statement, params)])
    if not found:
        return False
    hold.pk, hold.run_id, hold.capability_id, rules_version, grants_version, capability_name, run_input = found[0]
    head, tail = search_parts(hold, items)
    hold.search_text = head + public_id(RUN, hold.run_id) + tail
    hold._state.adding = False
    event.hold_id_ref, event.run_id_ref, event.actor = hold.pk, hold.run_id, f"run {public_id(RUN, hold.run_id)}"
    if rules_version or grants_version:
        # Written pending and decided by rule in the next moment, before the agent hears of it: whoever
        # could see it in between (a person on the queue) is refused by the conditional writes there.
        decide_at_ask(
            hold,
            items,
            versions=(rules_version, grants_version),
            capability_name=capability_name,
            run_input=Run._meta.get_field("input").from_db_value(run_input, None, connection),
        )
    return True


def _refuse_second_ask(run: Run, invocation_id: str) -> None:
    """409 hold_open when this invocation asked already (whatever that hold's status now: a second hold
    would share the first one's resume seq) or the run has an open hold (SPEC: one at a time)."""
    asked = Hold.objects.filter(invocation_id=invocation_id).values_list("pk", flat=True).first()
    if asked is not None:
        raise Conflict("this invocation already asked a hold", code="hold_open", hold_id=public_id(HOLD, asked))
    open_hold = Hold.objects.filter(run=run, status=Hold.Status.PENDING).values_list("pk", flat=True).first()
    if open_hold is not None:
        raise Conflict("this run already has an open hold", code="hold_open", hold_id=public_id(HOLD, open_hold))


def _file_errors(run: Run, file_ids: list) -> list[dict]:
    wanted = {}
    for i, file_id in enumerate(file_ids):
        pk = parse_public_id(file_id, FILE)
        if pk is not None:
            wanted[pk] = i
        elif isinstance(file_id, str) and file_id:
            wanted[-1 - i] = i
    found = set(RunFile.objects.filter(run=run, pk__in=[k for k in wanted if k > 0]).values_list("pk", flat=True))
    return [
        {"field": f"files[{i}]", "message": f"'{file_ids[i]}' is not a file of this run"}
        for pk, i in wanted.items()
        if pk not in found
    ]
