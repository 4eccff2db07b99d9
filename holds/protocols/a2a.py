"""A2A 1.0 (the official `a2a-sdk` types; JSON-RPC binding): a run sends a message and follows its task.

- The agent's card is read once per process (`{endpoint}/.well-known/agent-card.json`): it names the
  JSON-RPC URL, and it must offer push notifications.
- A start sends `SendMessage` with the run's input as a data part, and registers Review Queue's push URL
  with a token only Review Queue can make (auth.push_token_for), so that nothing waits on a stream.
  Its message id is the start invocation's and its context id is named after it (`context_for`): a start
  sent again after an earlier send (a timeout, a lost worker) first asks `ListTasks` for that context and
  adopts the task found, so the agent makes one task per run.
- `input-required`: a hold of one item (the status message's text as title, its data parts as data).
  The decision is a follow-up message on the same task: a data part `{approved, data, comment}` (and a
  text part saying the same, for agents that read text).
- `completed`: the run completes with `{"artifacts": [...]}`; `failed`, `canceled`, `rejected` fail it.
- `SendMessage` is blocking (A2A's default): the agent answers once the task needs input or has ended.
  An agent that answers `submitted` / `working` instead leaves the invocation waiting in the database; its
  push notification (or a poll backing off to RQ_A2A_POLL) brings it back to a worker, which asks `GetTask`.
"""

import json
import threading
import time

import httpx
from a2a.types import AgentCard, Message, Part, Role, SendMessageResponse, Task, TaskState
from django.conf import settings
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Struct

from .. import services
from ..auth import push_token_for
from ..errors import ServiceError
from ..models import Action, Invocation
from .common import ASKED_ACTIONS, ERROR_EXCERPT, MAX_BYTES, Attempt, ask, ask_problem, asking_answer

VERSION = "1.0"
CARD_PATH = "/.well-known/agent-card.json"
# JSON-RPC errors that another attempt may not meet: internal errors and the server being busy.
RETRYABLE_RPC = {-32603, -32000}
# An agent without ListTasks: method not found, or A2A's unsupported operation.
UNSUPPORTED_RPC = {-32601, -32004}
FAILED = {TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED}

_cards: dict[str, str] = {}
_cards_lock = threading.Lock()


class Unanswered(Exception):
    """No usable answer: `outcome` says whether to retry or fail."""

    def __init__(self, outcome: services.Outcome):
        self.outcome = outcome


def push_url(run) -> str:
    return f"{settings.RQ_PUBLIC_URL.rstrip('/')}/v0/a2a/runs/{run.public_id}/push"


def exchange(claim: services.Claim, client: httpx.Client, *, signed_headers, classify) -> services.Outcome:
    invocation = claim.invocation
    run = invocation.run
    attempt = Attempt()
    deadline = time.monotonic() + run.capability.timeout_seconds
    call = _Call(client, signed_headers, classify, attempt, deadline)
    try:
        url = _card_url(run.endpoint, call)
        before = Invocation.objects.filter(pk=invocation.id).values_list("answer", flat=True).first() or {}
        task = before.get("a2a") if before.get("status") == "working" else None
        if task:
            # A push said the task moved (or the slow poll is due): read where it is.
            result = call.rpc(url, "GetTask", {"id": task["task_id"]}, invocation.id)
            return _outcome(invocation, {"task": result}, attempt)
        if invocation.kind == Invocation.Kind.START:
            if claim.sent_before:
                # An earlier send may have reached the agent, which then made the task (a start names
                # none, and an agent does not dedupe message ids): adopt that task rather than send again.
                found = _started_task(call, url, invocation)
                if found is not None:
                    return _outcome(invocation, {"task": found}, attempt)
            message = Message(
                role=Role.ROLE_USER,
                message_id=invocation.id,
                context_id=context_for(invocation),
                parts=[_data_part(run.input)],
            )
        else:
            task = asking_answer(invocation).get("a2a") or {}
            if not task.get("task_id"):
                return attempt.fatal("the hold's A2A task is unknown: its asking answer named none")
            message = _follow_up(invocation, task)
        params = {
            "message": json_format.MessageToDict(message),
            "configuration": {"taskPushNotificationConfig": {"url": push_url(run), "token": push_token_for(run)}},
        }
        try:
            result = call.rpc(url, "SendMessage", params, invocation.id)
        except Refused:
            if invocation.kind != Invocation.Kind.RESUME:
                raise
            # A re-sent follow-up (a lost host's lease taken over, a timeout retried) that the agent took the
            # first time: its task has ended since, so A2A refuses the message. The task's history holds our
            # message id, and its state is this decision's outcome.
            current = call.rpc(url, "GetTask", {"id": task["task_id"]}, invocation.id)
            if not _took(current, invocation.id):
                raise
            result = {"task": current}
        return _outcome(invocation, result, attempt)
    except Unanswered as exc:
        return exc.outcome


class Refused(Unanswered):
    """The agent answered with a JSON-RPC error (`code`)."""

    def __init__(self, outcome: services.Outcome, code=None):
        super().__init__(outcome)
        self.code = code


def context_for(invocation: Invocation) -> str:
    """The A2A context of a run: named by Review Queue, after the run's start invocation, so that every
    send of the start names the same context and a re-send can find the task an earlier send made."""
    return f"rq-{invocation.id}"


def _started_task(call: "_Call", url: str, invocation: Invocation) -> dict | None:
    """The task that an earlier send of this start made (GetTask's answer), or None when there is none
    (or the agent cannot list tasks: then the start is sent again, as before)."""
    context = context_for(invocation)
    try:
        listed = call.rpc(url, "ListTasks", {"contextId": context, "includeArtifacts": True}, invocation.id)
    except Refused as exc:
        if exc.code in UNSUPPORTED_RPC:
            return None
        raise
    # The context is this run's alone (an agent that ignores the filter lists others' tasks too, and one
    # that names its own contexts lists none of ours); the task whose history holds the start made it.
    tasks = [
        t for t in listed.get("tasks") or [] if isinstance(t, dict) and t.get("id") and t.get("contextId") == context
    ]
    if not tasks:
        return None
    task = next((t for t in tasks if _took(t, invocation.id)), tasks[0])
    return call.rpc(url, "GetTask", {"id": task["id"]}, invocation.id)


class _Call:
    """JSON-RPC over one bounded POST (or GET for the card) with the A2A version header."""

    def __init__(self, client, signed_headers, classify, attempt: Attempt, deadline: float):
        self.client, self.signed_headers, self.classify = client, signed_headers, classify
        self.attempt, self.deadline = attempt, deadline

    def _send(self, method: str, url: str, body: bytes | None) -> dict:
        headers = {**(self.signed_headers(body) if body is not None else {}), "a2a-version": VERSION}
        headers["accept"] = "application/json"
        attempt = self.attempt
        timeout = max(0.1, self.deadline - time.monotonic())
        try:
            with self.client.stream(method, url, content=body, headers=headers, timeout=timeout) as response:
                attempt.status_code = response.status_code
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if time.monotonic() > self.deadline:
                        raise httpx.ReadTimeout("the answer took too long", request=response.request)
                    if size > MAX_BYTES:
                        raise Unanswered(attempt.retry(f"the answer is over {MAX_BYTES // 1024 // 1024} MiB"))
                whole = httpx.Response(
                    response.status_code, headers=response.headers, content=b"".join(chunks), request=response.request
                )
        except httpx.TimeoutException:
            outcome = attempt.retry("no answer within the capability's timeout")
            raise Unanswered(services.Outcome(**{**outcome.__dict__, "timed_out": True})) from None
        except httpx.HTTPError as exc:
            raise Unanswered(attempt.retry(f"{type(exc).__name__}: {exc}"[:ERROR_EXCERPT])) from None
        if not 200 <= whole.status_code < 300:
            common = (int((time.monotonic() - attempt.start) * 1000), attempt.started_at)
            raise Unanswered(self.classify(whole, "", *common))
        try:
            value = json.loads(whole.content)
        except ValueError:
            raise Unanswered(attempt.retry(f"not A2A: the answer is not JSON: {whole.text[:100]!r}")) from None
        if not isinstance(value, dict):
            raise Unanswered(attempt.retry("not A2A: the answer is not a JSON object"))
        return value

    def card(self, url: str) -> dict:
        return self._send("GET", url, None)

    def rpc(self, url: str, method: str, params: dict, request_id: str) -> dict:
        body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()
        answer = self._send("POST", url, body)
        if isinstance(answer.get("error"), dict):
            error = answer["error"]
            text = f"the agent answered {method} with JSON-RPC error {error.get('code')}: {error.get('message')}"
            retry = error.get("code") in RETRYABLE_RPC
            raise Refused(self.attempt.retry(text) if retry else self.attempt.fatal(text), error.get("code"))
        if not isinstance(answer.get("result"), dict):
            raise Unanswered(self.attempt.retry(f"not A2A: {method}'s answer has no result object"))
        return answer["result"]


def _card_url(endpoint: str, call: _Call) -> str:
    """The agent's JSON-RPC URL from its card, read once per process (a card that cannot be used is read
    again on the next attempt)."""
    with _cards_lock:
        if endpoint in _cards:
            return _cards[endpoint]
    raw = call.card(endpoint + CARD_PATH)
    card = AgentCard()
    try:
        json_format.ParseDict(raw, card, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise Unanswered(call.attempt.retry(f"not A2A: the agent card does not parse: {exc}"[:500])) from None
    urls = [i.url for i in card.supported_interfaces if i.protocol_binding == "JSONRPC" and i.url]
    if not urls:
        raise Unanswered(call.attempt.fatal("the agent card offers no JSONRPC interface"))
    if not card.capabilities.push_notifications:
        raise Unanswered(call.attempt.fatal("the agent card does not offer push notifications"))
    with _cards_lock:
        _cards[endpoint] = urls[0]
    return urls[0]


def _data_part(value) -> Part:
    data = Struct()
    data.update(value if isinstance(value, dict) else {"value": value})
    part = Part()
    part.data.struct_value.CopyFrom(data)
    return part


def _took(task: dict, message_id: str) -> bool:
    """Whether the task's history (GetTask's, as JSON) holds the message."""
    history = task.get("history")
    return isinstance(history, list) and any(isinstance(m, dict) and m.get("messageId") == message_id for m in history)


def _follow_up(invocation: Invocation, task: dict) -> Message:
    """The decision on the task's one question: `{approved, data, comment}` (expired: not approved)."""
    resume = invocation.resume or {}
    items = resume.get("items") or []
    item = items[0] if items else None
    approved = item is not None and item["action"] in (Action.APPROVE, Action.EDIT)
    comment = (item or {}).get("comment") or resume.get("comment")
    if item is None:
        comment = "expired: nobody decided in time"
    decision = {"approved": approved, "data": item["data"] if item else None, "comment": comment}
    # The text part says it in the action's own word, for agents that read text only.
    words = (Action.APPROVE.value if approved else Action.REJECT.value) + (f": {comment}" if comment else "")
    return Message(
        role=Role.ROLE_USER,
        message_id=invocation.id,
        task_id=task["task_id"],
        context_id=task.get("context_id", ""),
        parts=[_data_part(decision), Part(text=words)],
    )


def _outcome(invocation: Invocation, result: dict, attempt: Attempt) -> services.Outcome:
    response = SendMessageResponse()
    try:
        json_format.ParseDict(result, response, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        return attempt.fatal(f"the agent broke the A2A protocol: {exc}"[:500])
    if response.WhichOneof("payload") == "message":
        # A direct answer without a task: the run is done.
        return attempt.answer({"status": "completed", "output": {"message": _parts(response.message.parts)}})
    if response.WhichOneof("payload") != "task":
        return attempt.retry("not A2A: the answer holds neither a task nor a message")
    task = response.task
    memory = {"task_id": task.id, "context_id": task.context_id}
    state = task.status.state
    if state == TaskState.TASK_STATE_INPUT_REQUIRED:
        try:
            hold_id = ask(invocation, _ask(task))
        except ServiceError as exc:
            return attempt.fatal(f"the agent's question cannot be asked: {ask_problem(exc)}")
        return attempt.answer({"status": "suspended", "hold_id": hold_id, "a2a": memory})
    if state == TaskState.TASK_STATE_COMPLETED:
        artifacts = [{"name": a.name, "parts": _parts(a.parts)} for a in task.artifacts]  # the artifacts are the output
        return attempt.answer({"status": "completed", "output": {"artifacts": artifacts}, "a2a": memory})
    if state in FAILED:
        text = _text(task.status.message.parts) if task.status.HasField("message") else ""
        name = TaskState.Name(state).removeprefix("TASK_STATE_").lower()
        return attempt.answer({"status": "failed", "error": f"the A2A task was {name}" + (f": {text}" if text else "")})
    if state == TaskState.TASK_STATE_AUTH_REQUIRED:
        return attempt.answer({"status": "failed", "error": "the A2A task requires authentication (auth-required)"})
    return attempt.answer({"status": "working", "a2a": memory})


def _parts(parts) -> list:
    return [json_format.MessageToDict(p) for p in parts]


def _text(parts) -> str:
    return "\n".join(p.text for p in parts if p.WhichOneof("content") == "text").strip()


def _ask(task: Task) -> dict:
    """The task's question as one item: the status message's text as title, its data parts as data."""
    parts = task.status.message.parts if task.status.HasField("message") else []
    text = _text(parts) or "The agent needs input to continue"
    data = {}
    for part in parts:
        if part.WhichOneof("content") == "data":
            value = json_format.MessageToDict(part.data)
            data.update(value if isinstance(value, dict) else {"value": value})
    details = f"A2A task `{task.id}` asks for input"
    item = {"id": "input", "title": text[:1000], "data": data, "details": details}
    return {"intent": text[:500], "items": [item], "actions": ASKED_ACTIONS}
