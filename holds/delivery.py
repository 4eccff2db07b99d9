"""The HTTP call to an agent: the body, Standard Webhooks signing, the timeout, the answer.

Nothing here changes state: it claims through services, sends, classifies what came back into
an Outcome, and hands that to services to record.
"""

import base64
import hashlib
import hmac
import http.cookiejar
import json
import threading
import time

import httpx
from django.conf import settings
from django.utils import timezone

from . import services
from .auth import run_token_for
from .models import Invocation, Protocol
from .protocols import exchange
from .words import DeliveryResult, OutcomeKind

ERROR_EXCERPT = 300


def invocation_body(invocation: Invocation) -> dict:
    run = invocation.run
    return {
        "invocation": {
            "id": invocation.id,
            "kind": invocation.kind,
            "seq": invocation.seq,
            "run_id": run.public_id,
            "capability": run.capability.name,
            "version": run.version,
            "api_url": settings.RQ_PUBLIC_URL,
            "run_token": run_token_for(invocation.id),
            "input": run.input,
            "eval": services.eval_field(run),
        },
        "resume": _resume(invocation),
    }


def _resume(invocation: Invocation) -> dict | None:
    if invocation.kind != Invocation.Kind.RESUME:
        return None
    run = invocation.run
    return services.resume_as_sent(
        invocation.resume, hold_id=invocation.hold_id, run_id=run.public_id, capability=run.capability.name
    )


def signing_key(secret: str) -> bytes:
    """The HMAC key is the base64-decoded text after `whsec_`."""
    return base64.b64decode(secret.removeprefix("whsec_"))


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(signing_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def classify(
    response: httpx.Response | None, error: str, latency_ms: int, started_at, *, timed_out: bool = False
) -> services.Outcome:
    common = {"latency_ms": latency_ms, "started_at": started_at, "timed_out": timed_out}
    if response is None:
        return services.Outcome(kind=OutcomeKind.RETRY, error=error, **common)
    code = response.status_code
    excerpt = response.text[:ERROR_EXCERPT]
    if 200 <= code < 300:
        answer, problem = parse_answer(response.content)
        if answer is not None:
            return services.Outcome(kind=OutcomeKind.ANSWER, answer=answer, status_code=code, **common)
        return services.Outcome(kind=OutcomeKind.RETRY, status_code=code, error=f"invalid answer: {problem}", **common)
    if code == 410:
        return services.Outcome(kind=OutcomeKind.GONE, status_code=code, error=f"410 Gone: {excerpt}", **common)
    if code in (408, 429) or code >= 500:
        return services.Outcome(
            kind=OutcomeKind.RETRY,
            status_code=code,
            error=f"HTTP {code}: {excerpt}",
            retry_after=retry_after(response.headers.get("retry-after")),
            **common,
        )
    return services.Outcome(
        kind=OutcomeKind.FATAL, status_code=code, error=f"the agent refused with HTTP {code}: {excerpt}", **common
    )


def retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            return max(0.0, (parsedate_to_datetime(value) - timezone.now()).total_seconds())
        except (TypeError, ValueError):
            return None


def parse_answer(content: bytes) -> tuple[dict | None, str]:
    try:
        answer = json.loads(content)
    except ValueError:
        return None, "the body is not JSON"
    if not isinstance(answer, dict):
        return None, "the body is not a JSON object"
    status = answer.get("status")
    if status == "completed" and "output" in answer:
        return {"status": "completed", "output": answer["output"]}, ""
    if status == "failed" and isinstance(answer.get("error"), str):
        return {"status": "failed", "error": answer["error"]}, ""
    if status == "suspended" and isinstance(answer.get("hold_id"), str):
        return {"status": "suspended", "hold_id": answer["hold_id"]}, ""
    return None, "expected status completed+output, failed+error or suspended+hold_id"


MAX_ANSWER_BYTES = 1024 * 1024


def post_within(client: httpx.Client | None, url: str, body: bytes, headers: dict, seconds: float) -> httpx.Response:
    """POST and read the answer within `seconds` in all: httpx's timeouts are per read, so an
    agent that drips bytes could otherwise hold a worker forever."""
    deadline = time.monotonic() + seconds
    client = client or shared_client()
    with client.stream("POST", url, content=body, headers=headers, timeout=seconds) as response:
        chunks, size = [], 0
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout("the answer took too long", request=response.request)
            if size > MAX_ANSWER_BYTES:
                raise httpx.RemoteProtocolError("the answer is over 1 MiB", request=response.request)
        return httpx.Response(
            response.status_code, headers=response.headers, content=b"".join(chunks), request=response.request
        )


def _keeps_none() -> http.cookiejar.CookieJar:
    """A cookie jar that keeps no cookie: the one client serves every agent, and a cookie one agent set
    would go back to it on every later call and to every other agent on its host (a cookie does not
    name a port). An agent knows its run by the invocation, not by a session."""
    return http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))


_client: httpx.Client | None = None
_client_lock = threading.Lock()


def shared_client() -> httpx.Client:
    """One client per process: building one loads the CA bundle (tens of ms), and a shared one keeps
    connections to agents alive. httpx clients are safe to share between threads. Built under a
    lock: a worker's threads all start at once, and each would otherwise build its own."""
    global _client
    if _client is None:
        with _client_lock:
            if _client is None:
                _client = httpx.Client(
                    limits=httpx.Limits(max_connections=100, max_keepalive_connections=20), cookies=_keeps_none()
                )
    return _client


class _Endpoint:
    """What this process knows of one endpoint URL: its calls in flight ({call: when it started}), and
    how its last call ended: None before any did, True answered (any answer, error or not, within the
    timeout), False timed out."""

    __slots__ = ("answered", "calls")

    def __init__(self):
        self.calls: dict[object, float] = {}
        self.answered: bool | None = None


# An agent that hangs is only known as stalled after its first timeout; until then every delivery to it
# holds a worker thread, and a burst to it would take them all. So a process sends an endpoint that has
# not answered it yet, or whose last call timed out, at most RQ_UNANSWERED_IN_FLIGHT calls at once. A
# further delivery to a new endpoint waits for its first answer while the oldest call is not yet slow (a
# worker that has just started takes 0.1-0.2 s to its first answer, and a fast agent's burst should not
# be deferred); otherwise it is handed back to wait RQ_BUSY_WAIT in the database. Once an endpoint has
# answered, the cap is RQ_ENDPOINT_MAX_IN_FLIGHT, and only while one of its calls has waited over
# RQ_SLOW_CALL (young calls count too: they are as stuck as the slow one). A busy worker's fast calls are
# many at once and none is slow, so they have no cap (docs/decisions.md, "A slow endpoint, a share of a
# worker's threads"). Kept in the process's memory: it protects that process's threads, and costs no
# query. One entry per endpoint URL the process has called (a run keeps its capability's endpoint of the
# time), kept after its calls end: what an endpoint's last call did is the point.
_endpoints: dict[str, _Endpoint] = {}
_endpoints_changed = threading.Condition()


def _take_slot(url: str) -> tuple[object | None, str]:
    """A slot for one call to `url`, or None and why the delivery waits instead."""
    with _endpoints_changed:
        endpoint = _endpoints.setdefault(url, _Endpoint())
        while True:
            now, calls = time.monotonic(), endpoint.calls
            if not endpoint.answered and len(calls) >= settings.RQ_UNANSWERED_IN_FLIGHT:
                first_answer_due = min(calls.values()) + settings.RQ_SLOW_CALL
                if endpoint.answered is None and now < first_answer_due:
                    _endpoints_changed.wait(first_answer_due - now)
                    continue
                return None, f"deferred: {len(calls)} calls to this endpoint were in flight, and it has not answered"
            if (
                endpoint.answered
                and len(calls) >= settings.RQ_ENDPOINT_MAX_IN_FLIGHT
                and any(now - started > settings.RQ_SLOW_CALL for started in calls.values())
            ):
                return None, (
                    f"deferred: {settings.RQ_ENDPOINT_MAX_IN_FLIGHT} calls to this endpoint were in flight,"
                    " one of them slow"
                )
            call = object()
            calls[call] = now
            return call, ""


def _free_slot(url: str, call: object, outcome: services.Outcome | None) -> None:
    with _endpoints_changed:
        endpoint = _endpoints[url]
        del endpoint.calls[call]
        if outcome is not None:
            endpoint.answered = not outcome.timed_out
        _endpoints_changed.notify_all()


def calls_in_flight() -> int:
    """For tests: every slot taken was given back."""
    with _endpoints_changed:
        return sum(len(endpoint.calls) for endpoint in _endpoints.values())


def forget_endpoints() -> None:
    """For tests: a fresh process's memory (an agent double's port may be one an earlier test used)."""
    with _endpoints_changed:
        _endpoints.clear()


def deliver(invocation_id: str, *, client: httpx.Client | None = None) -> str:
    """One delivery attempt of one invocation. Safe to call twice: only the claim holder sends."""
    claim = services.invocation_claim(invocation_id=invocation_id)
    if claim is None:
        return DeliveryResult.NOT_DUE
    invocation = claim.invocation
    url = invocation.run.endpoint.rstrip("/") + "/invoke"
    # Waiting in the database costs nothing; waiting here would hold a worker thread.
    call, busy = _take_slot(url)
    if call is None:
        return services.invocation_defer(
            invocation_id=invocation.id, attempt=claim.attempt, wait=settings.RQ_BUSY_WAIT, reason=busy
        )
    outcome = None
    try:
        # The slot covers the call alone, the agent's time: recording the answer is ours.
        outcome = _call(claim, url, client)
    finally:
        _free_slot(url, call, outcome)
    if outcome is None:
        return DeliveryResult.DEFERRED
    return services.invocation_record(invocation_id=invocation.id, attempt=claim.attempt, outcome=outcome, claim=claim)


def signed_headers(invocation: Invocation, body: bytes) -> dict:
    """Standard Webhooks headers: every attempt is signed afresh; only webhook-id and the body repeat."""
    timestamp = int(time.time())
    return {
        "content-type": "application/json",
        "webhook-id": invocation.id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(invocation.run.capability.secret, invocation.id, timestamp, body),
        "user-agent": "ReviewQueue/0",
    }


def _call(claim: services.Claim, url: str, client: httpx.Client | None) -> services.Outcome | None:
    """Sends the claimed invocation and classifies what came back (None: not sent, it waits)."""
    invocation = claim.invocation
    capability = invocation.run.capability
    if capability.endpoint_stalled_at is not None and not services.endpoint_take_probe(capability=capability):
        # The endpoint let an attempt time out and another delivery is trying it.
        services.invocation_defer(
            invocation_id=invocation.id,
            attempt=claim.attempt,
            wait=settings.RQ_STALLED_WAIT,
            reason="deferred: the endpoint gave no answer within its timeout; another delivery is trying it",
        )
        return None
    if capability.protocol != Protocol.AGENTOS:
        # AG-UI and A2A (holds/protocols/): their own wire, this claim, lease and retries.
        return exchange(
            claim, client or shared_client(), signed_headers=lambda b: signed_headers(invocation, b), classify=classify
        )
    body = json.dumps(invocation_body(invocation), separators=(",", ":")).encode()
    headers = signed_headers(invocation, body)
    started_at = timezone.now()
    start = time.monotonic()
    response, error, timed_out = None, "", False
    try:
        response = post_within(client, url, body, headers, capability.timeout_seconds)
    except httpx.TimeoutException:
        error, timed_out = f"no answer within {capability.timeout_seconds:g}s", True
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"[:ERROR_EXCERPT]
    latency_ms = int((time.monotonic() - start) * 1000)
    return classify(response, error, latency_ms, started_at, timed_out=timed_out)
