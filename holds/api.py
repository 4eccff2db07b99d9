"""The agent-facing and programmatic JSON API under /v0/. Thin: parse -> service -> serialise.

Checks run in SPEC's order: 401, 413, 400, 404, 403, 409, 422. Every error is
`{"error": code, "message": ..., ...}`.
"""

import functools
import hashlib

from django.core.files.uploadedfile import TemporaryUploadedFile
from django.db.models import Count, Q
from django.http import FileResponse, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from . import experiments, ratelimit, rendering, serializers, services
from .auth import (
    Actor,
    account_for_key,
    actor_for_account,
    actor_for_invocation,
    actor_for_user,
    invocation_for_token,
    token_invocation_id,
)
from .errors import BadJson, Forbidden, Invalid, NotFound, ServiceError, TooLarge, Unauthorized
from .ids import DATASET, DATASET_ITEM, EXPERIMENT, FILE, HOLD, RUN, parse_public_id
from .models import Dataset, DatasetItem, Experiment, Hold, Run, RunFile, RunState
from .paging import decode_cursor, encode_cursor, read_page
from .policy import (
    may_fail_run,
    may_read_evals,
    may_read_file,
    may_read_hold,
    may_read_run,
    may_read_run_state,
    may_record_evals,
    may_start_run,
    may_upload_file,
    require,
)
from .schemas import (
    MAX_ASK_BYTES,
    MAX_FILE_BYTES,
    MAX_STATE_BYTES,
    parse_json,
    validate_dataset,
    validate_dataset_item,
    validate_experiment,
    validate_start,
)

MAX_DECISION_BYTES = MAX_ASK_BYTES
MAX_EXTEND_BYTES = 4096
# The lengths of their columns (RunState.key, IdempotencyKey.key).
MAX_STATE_KEY = 200
MAX_IDEMPOTENCY_KEY = 200


def endpoint(*methods: str):
    """Allowed methods, JSON errors, and CSRF only for session callers (tokens and keys have none)."""

    def wrap(view):
        @csrf_exempt
        @functools.wraps(view)
        def inner(request, *args, **kwargs):
            if request.method not in methods:
                return JsonResponse(
                    {"error": "method_not_allowed", "message": f"use {' or '.join(methods)}"}, status=405
                )
            try:
                return view(request, *args, **kwargs)
            except ServiceError as exc:
                response = JsonResponse(exc.body(), status=exc.status)
                if "retry_after" in exc.extra:
                    response["Retry-After"] = str(exc.extra["retry_after"])
                return response

        return inner

    return wrap


UNKNOWN_TOKEN = "the run token is missing, unknown, superseded or finished"


def caller(request) -> Actor:
    """The caller from its token, key or session; never from the body."""
    token = request.headers.get("x-agentos-run-token")
    if token is not None:
        invocation = invocation_for_token(token)
        if invocation is None:
            raise Unauthorized(UNKNOWN_TOKEN)
        return actor_for_invocation(invocation)
    authorization = request.headers.get("authorization")
    if authorization is not None:
        scheme, _, key = authorization.partition(" ")
        account = account_for_key(key.strip()) if scheme.lower() == "bearer" else None
        if account is None:
            raise Unauthorized("the service-account key is unknown or revoked")
        return actor_for_account(account)
    if request.user.is_authenticated:
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            refusal = CsrfViewMiddleware(lambda r: None).process_view(request, None, (), {})
            if refusal is not None:
                raise Forbidden("CSRF verification failed for this session request")
        return actor_for_user(request.user)
    raise Unauthorized("send x-agentos-run-token, Authorization: Bearer <key>, or sign in")


def read_body(request, limit: int) -> bytes:
    """The raw body, refused with 413 past `limit` bytes before anything is parsed.

    Chunked bodies have no Content-Length, so the stream itself is read up to limit + 1 bytes.
    """
    length = request.META.get("CONTENT_LENGTH")
    if length:
        try:
            if int(length) > limit:
                raise TooLarge(f"the body is over {limit} bytes")
        except ValueError:
            raise BadJson("Content-Length is not a number") from None
        return request.body
    if "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
        stream = request.META["wsgi.input"]
        raw = stream.read(limit + 1)
        if len(raw) > limit:
            raise TooLarge(f"the body is over {limit} bytes")
        return raw
    return request.body


def read_json(request, limit: int):
    raw = read_body(request, limit)
    try:
        return parse_json(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadJson(f"the body is not valid JSON: {exc}") from None


STREAM_CHUNK = 64 * 1024


def stream_body(request, limit: int, into=None) -> tuple[int, str]:
    """Reads the raw body in chunks into `into` (None: read and dropped), refused with 413 past
    `limit` bytes; returns its size and sha256. Unlike request.body, it never holds the body whole,
    so it is not bound by DATA_UPLOAD_MAX_MEMORY_SIZE."""
    length = request.META.get("CONTENT_LENGTH")
    if length:
        try:
            declared = int(length)
        except ValueError:
            raise BadJson("Content-Length is not a number") from None
        if declared > limit:
            raise TooLarge(f"the body is over {limit} bytes")
        stream = request  # Django stops reading at Content-Length
    elif "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
        stream = request.META["wsgi.input"]
    else:
        stream = request
    digest, size = hashlib.sha256(), 0
    while chunk := stream.read(min(STREAM_CHUNK, limit + 1 - size)):
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"the body is over {limit} bytes")
        digest.update(chunk)
        if into is not None:
            into.write(chunk)
    return size, digest.hexdigest()


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
            run=actor.run, name=name, content_type=content_type, content=upload, size=size, sha256=sha256, actor=actor
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


INLINE_TYPES = {"image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf"}


def serve_file(run_file: RunFile) -> FileResponse:
    """The type comes from our record; only safe images and PDFs open in the browser."""
    inline = run_file.content_type in INLINE_TYPES
    response = FileResponse(
        run_file.file.open("rb"),
        as_attachment=not inline,
        # Bidirectional controls in a saved name could disguise its type (invoice⟦U+202E⟧gpj.exe).
        filename=rendering.reveal(run_file.name),
        content_type=run_file.content_type if inline else "application/octet-stream",
    )
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "sandbox"
    return response


# --- invocations -------------------------------------------------------------------------------


@endpoint("POST")
def invocation_retry(request, invocation_id: str):
    actor = caller(request)
    # No lookup here: the service refuses non-admins before it looks, so an id's existence is told
    # only to those who may retry it.
    invocation = services.invocation_retry(invocation_id=invocation_id, actor=actor)
    return JsonResponse({"invocation_id": invocation.id, "status": invocation.status})


# --- evals: datasets and experiments (SPEC "Evals") ----------------------------------------------

# A dataset item holds a run's input, its holds and its output: as much as an ask and a run together.
MAX_DATASET_ITEM_BYTES = 4 * MAX_ASK_BYTES


def eval_reader(actor: Actor) -> Actor:
    """Datasets and experiments are visible to those who may see the capability's holds; never to a run."""
    require(may_read_evals(actor))
    return actor


def get_dataset(actor: Actor, dataset_id: str) -> Dataset:
    pk = parse_public_id(dataset_id, DATASET)
    dataset = Dataset.objects.select_related("capability").filter(pk=pk).first() if pk else None
    if dataset is None:
        raise NotFound(f"dataset {dataset_id} does not exist")
    require(may_read_evals(actor))
    return dataset


def cursor_filter(rows, params):
    if params.get("cursor"):
        last = decode_cursor(params["cursor"], 1)
        if last is None:
            raise Invalid([{"field": "cursor", "message": "not a cursor this server gave out"}])
        rows = rows.filter(pk__lt=last[0])
    return rows


def page_wire(rows, wire) -> dict:
    page, more = read_page(rows)
    return {"items": [wire(row) for row in page], "next_cursor": encode_cursor([page[-1].pk]) if more else None}


@endpoint("GET", "POST")
def datasets(request):
    actor = caller(request)
    if request.method == "GET":
        eval_reader(actor)
        rows = Dataset.objects.select_related("capability").order_by("-pk")
        if request.GET.get("capability"):
            rows = rows.filter(capability__name=request.GET["capability"])
        rows = cursor_filter(rows, request.GET).annotate(
            live_items=Count("items", filter=Q(items__deleted_at__isnull=True))
        )
        return JsonResponse(page_wire(rows, lambda d: experiments.dataset_wire(d, d.live_items)))
    body = read_json(request, MAX_ASK_BYTES)
    require(may_record_evals(actor, None))
    start, errors = validate_dataset(body)
    if errors:
        raise Invalid(errors)
    dataset = services.dataset_create(name=start.name, capability_name=start.capability, actor=actor)
    return JsonResponse({"dataset_id": dataset.public_id}, status=201)


@endpoint("GET")
def dataset_detail(request, dataset_id: str):
    actor = caller(request)
    dataset = get_dataset(actor, dataset_id)
    count = DatasetItem.objects.filter(dataset=dataset, deleted_at__isnull=True).count()
    return JsonResponse(experiments.dataset_wire(dataset, count))


@endpoint("GET", "POST")
def dataset_items(request, dataset_id: str):
    actor = caller(request)
    if request.method == "GET":
        dataset = get_dataset(actor, dataset_id)
        rows = cursor_filter(DatasetItem.objects.filter(dataset=dataset, deleted_at__isnull=True), request.GET)
        return JsonResponse(page_wire(rows.order_by("-pk"), experiments.item_wire))
    body = read_json(request, MAX_DATASET_ITEM_BYTES)
    dataset = get_dataset(actor, dataset_id)
    require(may_record_evals(actor, dataset.capability))
    parsed, errors = validate_dataset_item(body)
    if errors:
        raise Invalid(errors)
    if hasattr(parsed, "from_run"):
        item = services.dataset_item_from_run(
            dataset=dataset, run_pk=parse_public_id(parsed.from_run, RUN), actor=actor
        )
    else:
        item = services.dataset_item_add(
            dataset=dataset,
            actor=actor,
            input=parsed.input,
            recorded_holds=[h.model_dump(exclude_none=False) for h in parsed.recorded_holds],
            expected_output=parsed.expected_output,
        )
    return JsonResponse({"item_id": item.public_id}, status=201)


@endpoint("GET", "DELETE")
def dataset_item(request, dataset_id: str, item_id: str):
    actor = caller(request)
    dataset = get_dataset(actor, dataset_id)
    pk = parse_public_id(item_id, DATASET_ITEM)
    item = DatasetItem.objects.filter(pk=pk, dataset=dataset, deleted_at__isnull=True).first() if pk else None
    if item is None:
        raise NotFound(f"dataset item {item_id} does not exist in {dataset.public_id}")
    if request.method == "GET":
        return JsonResponse(experiments.item_wire(item))
    require(may_record_evals(actor, dataset.capability))
    item.dataset = dataset
    services.dataset_item_delete(item=item, actor=actor)
    return HttpResponse(status=204)


@endpoint("GET", "POST")
def experiments_list(request):
    actor = caller(request)
    if request.method == "GET":
        eval_reader(actor)
        rows = cursor_filter(Experiment.objects.order_by("-pk"), request.GET)
        return JsonResponse(page_wire(rows, experiments.experiment_brief))
    body = read_json(request, MAX_ASK_BYTES)
    require(may_record_evals(actor, None))
    dataset_id = body.get("dataset") if isinstance(body, dict) else None
    dataset = get_dataset(actor, dataset_id) if isinstance(dataset_id, str) and dataset_id else None
    if dataset is not None:
        require(may_record_evals(actor, dataset.capability))
    _, errors = validate_experiment(body)
    if errors:
        raise Invalid(errors)
    # Counted in the service (the run-start rate once, each run against the experiment-run budget).
    experiment, runs = services.experiment_start(dataset=dataset, actor=actor)
    return JsonResponse({"experiment_id": experiment.public_id, "runs": [run.public_id for run in runs]}, status=201)


@endpoint("GET")
def experiment_detail(request, experiment_id: str):
    eval_reader(caller(request))
    pk = parse_public_id(experiment_id, EXPERIMENT)
    experiment = Experiment.objects.filter(pk=pk).first() if pk else None
    if experiment is None:
        raise NotFound(f"experiment {experiment_id} does not exist")
    return JsonResponse(experiments.experiment_wire(experiment))
