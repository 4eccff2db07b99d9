"""The agent-facing and programmatic JSON API under /v0/: holds (ask, read, decide, extend), runs
(start, read, fail, state), files and delivery retries. Thin: parse -> service -> serialise.
"""

from django.core.files.uploadedfile import TemporaryUploadedFile
from django.http import HttpResponse, JsonResponse

from .. import ratelimit, serializers, services
from ..auth import (
    Actor,
    token_invocation_id,
)
from ..errors import BadJson, Forbidden, Invalid, NotFound, TooLarge, Unauthorized
from ..ids import FILE, HOLD, RUN, parse_public_id
from ..models import Hold, Run, RunFile, RunState
from ..policy import (
    may_fail_run,
    may_read_file,
    may_read_hold,
    may_read_run,
    may_read_run_state,
    may_start_run,
    may_upload_file,
    require,
)
from ..schemas import (
    MAX_ASK_BYTES,
    MAX_FILE_BYTES,
    MAX_STATE_BYTES,
    parse_json,
    validate_start,
)
from .common import (
    MAX_DECISION_BYTES,
    MAX_EXTEND_BYTES,
    MAX_IDEMPOTENCY_KEY,
    MAX_STATE_KEY,
    UNKNOWN_TOKEN,
    caller,
    endpoint,
    read_body,
    read_json,
    serve_file,
    stream_body,
)


def get_hold(actor: Actor, hold_id: str) -> Hold:
    """The hold, or 404; another run's hold is simply not there for a run token (policy.may_read_hold)."""
    pk = parse_public_id(hold_id, HOLD)
    hold = Hold.objects.select_related("run", "capability").filter(pk=pk).first() if pk else None
    if hold is None:
        raise NotFound(f"hold {hold_id} does not exist")
    refusal = may_read_hold(actor, hold)
    if isinstance(refusal, NotFound):
        raise refusal
    return hold


# --- holds -------------------------------------------------------------------------------------


@endpoint("GET", "POST")
def holds(request):
    token = request.headers.get("x-agentos-run-token")
    if request.method == "POST" and token is not None:
        return ask(request, token)
    actor = caller(request)
    if request.method == "GET":
        return JsonResponse(serializers.hold_list(actor, request.GET))
    raise Forbidden("only an agent, with its run token, asks")


def ask(request, token: str):
    """An agent asks. The token's MAC is checked here and whether it is live by the statement that
    writes the hold (services.hold_ask_by_token): one round trip for a good ask."""
    invocation_id = token_invocation_id(token)
    if invocation_id is None:
        raise Unauthorized(UNKNOWN_TOKEN)
    ratelimit.limit("ask", ratelimit.token_identity(invocation_id))
    try:
        body = read_json(request, MAX_ASK_BYTES)
    except (TooLarge, BadJson):
        # An eval run's ask is 409 eval_run whatever its body (SPEC "Settled": Evals).
        services.eval_ask_refusal(token=token)
        raise
    hold = services.hold_ask_by_token(token=token, body=body)
    if hold is None:
        # Nothing written: the token is dead (401), or its run is an eval run (409 eval_run).
        services.eval_ask_refusal(token=token)
        raise Unauthorized(UNKNOWN_TOKEN)
    return JsonResponse({"hold_id": hold.public_id, "status": hold.status}, status=201)


@endpoint("GET")
def hold_detail(request, hold_id: str):
    actor = caller(request)
    hold = get_hold(actor, hold_id)
    require(may_read_hold(actor, hold))
    return JsonResponse(serializers.hold_full(hold))


@endpoint("POST")
def hold_decision(request, hold_id: str):
    actor = caller(request)
    ratelimit.api_limit("decision", actor)
    body = read_json(request, MAX_DECISION_BYTES)
    hold = get_hold(actor, hold_id)
    hold = services.hold_decide(hold_id=hold.pk, actor=actor, body=body)
    if hold.status == hold.Status.PENDING:
        # An approval toward a quorum that does not complete it (SPEC "Quorum": 202 with the approvals).
        return JsonResponse({"hold_id": hold.public_id, "status": hold.status, **hold.quorum_state}, status=202)
    return JsonResponse(
        {
            "hold_id": hold.public_id,
            "status": hold.status,
            "decided_by": hold.decided_by,
            "decided_at": hold.decided_at.isoformat(),
        }
    )


@endpoint("POST")
def hold_extend(request, hold_id: str):
    """A person or service account who may decide the hold gives it more time (SPEC "Expiry extension")."""
    actor = caller(request)
    ratelimit.api_limit("decision", actor)
    body = read_json(request, MAX_EXTEND_BYTES)
    hold = get_hold(actor, hold_id)
    hold = services.hold_extend(hold_id=hold.pk, actor=actor, body=body)
    return JsonResponse(serializers.hold_full(hold))


# --- runs --------------------------------------------------------------------------------------


@endpoint("POST")
def runs(request):
    actor = caller(request)
    body = read_json(request, MAX_ASK_BYTES)
    require(may_start_run(actor))
    ratelimit.api_limit("run_start", actor)
    start, errors = validate_start(body)
    idempotency_key = request.headers.get("idempotency-key") or None
    if idempotency_key and len(idempotency_key) > MAX_IDEMPOTENCY_KEY:
        errors.append({"field": "Idempotency-Key", "message": f"at most {MAX_IDEMPOTENCY_KEY} characters"})
    if errors:
        raise Invalid(errors)
    run, created = services.run_start(
        capability_name=start.capability,
        input=start.input,
        actor=actor,
        idempotency_key=idempotency_key,
    )
    return JsonResponse({"run_id": run.public_id, "status": run.status}, status=201 if created else 200)


def get_run(actor: Actor, run_id: str) -> Run:
    pk = parse_public_id(run_id, RUN)
    run = Run.objects.select_related("capability").filter(pk=pk).first() if pk else None
    if run is None:
        raise NotFound(f"run {run_id} does not exist")
    require(may_read_run(actor, run))
    return run


@endpoint("GET")
def run_detail(request, run_id: str):
    actor = caller(request)
    return JsonResponse(serializers.run_full(get_run(actor, run_id)))


@endpoint("POST")
def run_fail(request, run_id: str):
    actor = caller(request)
    body = read_json(request, MAX_ASK_BYTES) if request.META.get("CONTENT_LENGTH") not in (None, "", "0") else {}
    require(may_fail_run(actor))
    run = get_run(actor, run_id)
    reason = body.get("reason", "") if isinstance(body, dict) else ""
    run = services.run_fail(run_id=run.pk, actor=actor, reason=str(reason) or f"failed by {actor.label}")
    return JsonResponse(serializers.run_full(run))


@endpoint("GET", "PUT", "DELETE")
def run_state(request, run_id: str, key: str):
    actor = caller(request)
    if request.method == "PUT":
        raw = read_body(request, MAX_STATE_BYTES)
    run = get_run(actor, run_id)
    # State may hold what the agent keeps from people (a session, a draft): its token and admins read it.
    require(may_read_run_state(actor, writing=request.method != "GET"))
    if len(key) > MAX_STATE_KEY:
        raise Invalid([{"field": "key", "message": f"at most {MAX_STATE_KEY} characters"}])
    if request.method == "GET":
        entry = RunState.objects.filter(run=run, key=key).first()
        if entry is None:
            raise NotFound(f"run {run.public_id} has no state '{key}'")
        return JsonResponse(entry.value, safe=False)
    if request.method == "PUT":
        try:
            value = parse_json(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadJson(f"the body is not valid JSON: {exc}") from None
        services.run_state_put(run=run, key=key, value=value, actor=actor)
        return HttpResponse(status=204)
    if not services.run_state_delete(run=run, key=key, actor=actor):
        raise NotFound(f"run {run.public_id} has no state '{key}'")
    return HttpResponse(status=204)


# --- files -------------------------------------------------------------------------------------


@endpoint("POST")
def files(request):
    """An upload streams to a temporary file (never whole into memory), measured and hashed on the way."""
    actor = caller(request)
    refusal = may_upload_file(actor)
    if refusal is not None:
        stream_body(request, MAX_FILE_BYTES)  # a body over the limit is 413 before this 403 (SPEC's order)
        raise refusal
    name = (request.headers.get("x-filename") or "").strip()
    content_type = (request.headers.get("content-type") or "application/octet-stream").split(";")[0].strip()
    errors = []
    if not name or len(name) > 255 or "/" in name or "\\" in name or "\x00" in name:
        errors.append({"field": "x-filename", "message": "a file name of 1-255 characters without slashes"})
    idempotency_key = request.headers.get("idempotency-key") or ""
    if len(idempotency_key) > MAX_IDEMPOTENCY_KEY:
        errors.append({"field": "Idempotency-Key", "message": f"at most {MAX_IDEMPOTENCY_KEY} characters"})
    upload = TemporaryUploadedFile(name="upload", content_type=content_type, size=0, charset=None)
    try:
        size, sha256 = stream_body(request, MAX_FILE_BYTES, into=None if errors else upload)
        if not size:
            errors.append({"field": "body", "message": "the file is empty"})
        if errors:
            raise Invalid(errors)
        upload.size = size
        upload.seek(0)
        run_file = services.run_file_add(
            run=actor.run,
            name=name,
            content_type=content_type,
            content=upload,
            size=size,
            sha256=sha256,
            actor=actor,
            idempotency_key=idempotency_key,
        )
    finally:
        upload.close()  # deletes the temporary file unless storage moved it into place
    return JsonResponse(serializers.file_brief(run_file), status=201)


@endpoint("GET")
def file_download(request, file_id: str):
    actor = caller(request)
    pk = parse_public_id(file_id, FILE)
    run_file = RunFile.objects.filter(pk=pk).first() if pk else None
    # One answer for "no such file" and "not yours", so file ids tell nothing to those who may not see them.
    if run_file is None:
        raise NotFound(f"file {file_id} does not exist")
    require(may_read_file(actor, run_file))
    return serve_file(run_file)


# --- invocations -------------------------------------------------------------------------------


@endpoint("POST")
def invocation_retry(request, invocation_id: str):
    actor = caller(request)
    # No lookup here: the service refuses non-admins before it looks, so an id's existence is told
    # only to those who may retry it.
    invocation = services.invocation_retry(invocation_id=invocation_id, actor=actor)
    return JsonResponse({"invocation_id": invocation.id, "status": invocation.status})
