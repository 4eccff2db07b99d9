"""What the JSON API under /v0/ shares: the endpoint decorator (methods, JSON errors, CSRF for
sessions), the caller from its token, key or session, bounded body reading, files served safely, and
newest-first paging. Checks run in SPEC's order: 401, 413, 400, 404, 403, 409, 422. Every error is
`{"error": code, "message": ..., ...}`.
"""

import functools
import hashlib

from django.http import FileResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from .. import rendering, services
from ..auth import (
    Actor,
    account_for_key,
    actor_for_account,
    actor_for_invocation,
    actor_for_user,
)
from ..errors import BadJson, Forbidden, ServiceError, TooLarge, Unauthorized
from ..models import RunFile
from ..schemas import (
    MAX_ASK_BYTES,
    parse_json,
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
        invocation = services.invocation_for_token(token)
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
