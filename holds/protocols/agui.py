"""AG-UI (the official `ag-ui-protocol` package): a run posts RunAgentInput and reads the event stream.

- `RUN_FINISHED` with an interrupt outcome: one hold, one item per interrupt (`message` → title,
  `responseSchema` → schema, `expiresAt` → the hold's expiry, `toolCallId` and `reason` → details).
- The decision: a new run on the same thread (the Review Queue run's id) whose `resume` covers every open
  interrupt, with the conversation so far (AG-UI agents keep no history between runs; the client does).
- `RUN_FINISHED` success: the run completes with the final state snapshot; `RUN_ERROR` fails it.
The mapping of decisions onto resume entries is in docs/decisions.md ("AG-UI: a decision as a resume").
"""

import json
import time
from datetime import datetime

import httpx
from ag_ui.core import RunAgentInput
from ag_ui.core.events import Event, EventType
from django.conf import settings
from pydantic import TypeAdapter, ValidationError

from .. import services
from ..errors import ServiceError
from ..models import Action, HoldItem, Invocation
from .common import ASKED_ACTIONS, ERROR_EXCERPT, MAX_BYTES, Attempt, ask, ask_problem, asking_answer, expires_in

EVENT = TypeAdapter(Event)


class StreamProblem(Exception):
    """The answer is not an AG-UI event stream, or it stopped before the run finished: worth a retry."""


class NotProtocol(Exception):
    """The agent sent an event that AG-UI does not allow (an interrupt without an id…): no retry helps."""


def exchange(claim: services.Claim, client: httpx.Client, *, signed_headers, classify) -> services.Outcome:
    invocation = claim.invocation
    run = invocation.run
    timeout = run.capability.timeout_seconds
    conversation = _conversation(invocation)
    run_input = RunAgentInput(
        thread_id=run.public_id,
        run_id=invocation.id,
        # The consumer says which protocol it speaks: interrupts and resume are AG-UI 1.0's.
        protocol_version="1.0",
        messages=conversation["messages"],
        state=conversation["state"],
        tools=[],
        context=[],
        forwarded_props={"reviewQueue": {"runId": run.public_id, "apiUrl": settings.RQ_PUBLIC_URL}},
        resume=_resume(invocation) if invocation.kind == Invocation.Kind.RESUME else None,
    )
    body = run_input.model_dump_json(by_alias=True, exclude_none=True).encode()
    headers = {**signed_headers(body), "accept": "text/event-stream"}
    attempt = Attempt()
    try:
        with client.stream("POST", run.endpoint, content=body, headers=headers, timeout=timeout) as response:
            attempt.status_code = response.status_code
            if not 200 <= response.status_code < 300:
                return _refused(response, attempt, classify)
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                return attempt.retry(
                    f"not an AG-UI event stream: content-type {response.headers.get('content-type')!r}"
                )
            stream = Stream(conversation)
            finished = stream.read(_events(response, time.monotonic() + timeout))
    except httpx.TimeoutException:
        outcome = attempt.retry(f"the event stream did not finish within {timeout:g}s")
        return services.Outcome(**{**outcome.__dict__, "timed_out": True})
    except httpx.HTTPError as exc:
        return attempt.retry(f"{type(exc).__name__}: {exc}"[:ERROR_EXCERPT])
    except StreamProblem as exc:
        return attempt.retry(str(exc))
    except NotProtocol as exc:
        return attempt.fatal(f"the agent broke the AG-UI protocol: {exc}")
    return _outcome(invocation, stream, finished, attempt)


def _refused(response: httpx.Response, attempt: Attempt, classify) -> services.Outcome:
    content = response.read()[:MAX_BYTES]
    whole = httpx.Response(response.status_code, headers=response.headers, content=content, request=response.request)
    return classify(whole, "", int((time.monotonic() - attempt.start) * 1000), attempt.started_at)


def _events(response: httpx.Response, deadline: float):
    """The stream's events (server-sent events' `data:` lines), within the deadline and the size limit."""
    size, data = 0, []
    for line in response.iter_lines():
        size += len(line) + 1
        if time.monotonic() > deadline:
            raise httpx.ReadTimeout("the event stream took too long", request=response.request)
        if size > MAX_BYTES:
            raise StreamProblem(f"the event stream is over {MAX_BYTES // 1024 // 1024} MiB")
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            yield "\n".join(data)
            data = []
    if data:
        yield "\n".join(data)


class Stream:
    """The conversation as a client keeps it (AG-UI's messages), and how the run finished."""

    def __init__(self, conversation: dict):
        self.messages: list[dict] = list(conversation["messages"])
        self.state = conversation["state"]
        self.tool_args: dict[str, str] = {}

    def read(self, events) -> object:
        for text in events:
            try:
                event = EVENT.validate_json(text)
            except ValidationError as exc:
                kind = _kind(text)
                if kind in (EventType.RUN_FINISHED, EventType.RUN_ERROR):
                    raise NotProtocol(f"{kind} is not valid: {_problems(exc)}") from None
                if kind is None:
                    raise StreamProblem(f"an event is not AG-UI JSON: {text[:100]!r}") from None
                continue  # an event this version does not know, or a malformed side event: not ours to judge
            if event.type in (EventType.RUN_FINISHED, EventType.RUN_ERROR):
                return event
            self._apply(event)
        raise StreamProblem("the event stream ended before RUN_FINISHED or RUN_ERROR")

    def _apply(self, event) -> None:
        kind = event.type
        if kind == EventType.MESSAGES_SNAPSHOT:
            self.messages = [m.model_dump(by_alias=True, exclude_none=True, mode="json") for m in event.messages]
        elif kind == EventType.STATE_SNAPSHOT:
            self.state = event.snapshot
        elif kind == EventType.TEXT_MESSAGE_START:
            self._message(event.message_id, getattr(event, "role", None) or "assistant")
        elif kind == EventType.TEXT_MESSAGE_CONTENT:
            message = self._message(event.message_id, "assistant")
            message["content"] = message.get("content", "") + event.delta
        elif kind == EventType.TOOL_CALL_START:
            message = self._message(event.parent_message_id or event.tool_call_id, "assistant")
            message.setdefault("toolCalls", []).append(
                {"id": event.tool_call_id, "type": "function", "function": {"name": event.tool_call_name}}
            )
            self.tool_args[event.tool_call_id] = ""
        elif kind == EventType.TOOL_CALL_ARGS:
            self.tool_args[event.tool_call_id] = self.tool_args.get(event.tool_call_id, "") + event.delta
        elif kind == EventType.TOOL_CALL_END:
            for message in self.messages:
                for call in message.get("toolCalls", []):
                    if call["id"] == event.tool_call_id:
                        call["function"]["arguments"] = self.tool_args.get(event.tool_call_id, "")
        elif kind == EventType.TOOL_CALL_RESULT:
            self.messages.append(
                {"id": event.message_id, "role": "tool", "toolCallId": event.tool_call_id, "content": event.content}
            )

    def _message(self, message_id: str, role: str) -> dict:
        for message in self.messages:
            if message.get("id") == message_id:
                return message
        message = {"id": message_id, "role": role}
        self.messages.append(message)
        return message

    def args(self, tool_call_id: str | None) -> dict | None:
        try:
            args = json.loads(self.tool_args.get(tool_call_id or "", "") or "null")
        except ValueError:
            return None
        return args if isinstance(args, dict) else None


def _kind(text: str) -> str | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value.get("type") if isinstance(value, dict) else None


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'event'}: {e['msg']}" for e in exc.errors(include_url=False)
    )


def _outcome(invocation: Invocation, stream: Stream, finished, attempt: Attempt) -> services.Outcome:
    memory = {"messages": stream.messages, "state": stream.state}
    if finished.type == EventType.RUN_ERROR:
        code = f" ({finished.code})" if finished.code else ""
        return attempt.answer({"status": "failed", "error": f"RUN_ERROR{code}: {finished.message}"})
    outcome = finished.outcome
    kind = getattr(outcome, "type", "success")
    if kind == "interrupt":
        if not outcome.interrupts:
            return attempt.fatal("the agent broke the AG-UI protocol: an interrupt outcome without interrupts")
        try:
            hold_id = ask(invocation, _ask(invocation, stream, outcome.interrupts))
        except ServiceError as exc:
            return attempt.fatal(f"the agent's interrupts cannot be asked: {ask_problem(exc)}")
        return attempt.answer({"status": "suspended", "hold_id": hold_id, "agui": memory})
    if kind == "cancelled":
        return attempt.answer({"status": "failed", "error": "the agent finished the run as cancelled"})
    pending = getattr(outcome, "pending_tool_call_ids", None)
    if pending:
        return attempt.answer(
            {"status": "failed", "error": f"the agent left client tool calls {pending}: Review Queue runs none"}
        )
    output = stream.state if stream.state is not None else finished.result
    return attempt.answer({"status": "completed", "output": output, "agui": memory})


def _ask(invocation: Invocation, stream: Stream, interrupts) -> dict:
    items, expiries = [], []
    for interrupt in interrupts:
        details = [f"AG-UI interrupt, reason `{interrupt.reason}`"]
        if interrupt.tool_call_id:
            details.append(f"tool call `{interrupt.tool_call_id}`")
        data = {"approved": True}
        args = stream.args(interrupt.tool_call_id)
        if args is not None:
            # The proposed arguments, for a reviewer to read and edit (AG-UI's approve-with-edits shape).
            data["editedArgs"] = args
        item = {
            "id": interrupt.id,
            "title": (interrupt.message or interrupt.reason)[:1000],
            "data": data,
            "details": " · ".join(details),
        }
        if interrupt.response_schema is not None:
            item["schema"] = interrupt.response_schema
        items.append(item)
        if interrupt.expires_at:
            expiries.append(datetime.fromisoformat(interrupt.expires_at.replace("Z", "+00:00")))
    first = items[0]["title"]
    intent = first if len(items) == 1 else f"{len(items)} interrupts: {first}"
    body = {"intent": intent[:500], "items": items, "actions": ASKED_ACTIONS}
    if (seconds := expires_in(expiries)) is not None:
        body["expires_in"] = seconds
    return body


def _conversation(invocation: Invocation) -> dict:
    """The messages and state a run sends: the run's input as the first user message; a resume sends
    what the interrupted run left (as an AG-UI client keeps it)."""
    if invocation.kind == Invocation.Kind.RESUME:
        memory = asking_answer(invocation).get("agui")
        if isinstance(memory, dict):
            return {"messages": memory.get("messages") or [], "state": memory.get("state")}
    run = invocation.run
    text = json.dumps(run.input, separators=(",", ":"), ensure_ascii=False)
    return {"messages": [{"id": f"{run.public_id}-input", "role": "user", "content": text}], "state": None}


def _resume(invocation: Invocation) -> list[dict]:
    """One entry per interrupt of the hold, in asking order: the decision on it, or cancelled when the
    hold expired (every open interrupt is covered: AG-UI refuses a partial resume)."""
    decided = {item["id"]: item for item in (invocation.resume or {}).get("items", [])}
    entries = []
    for interrupt_id in HoldItem.objects.filter(hold_id=invocation.hold_id).values_list("item_id", flat=True):
        item = decided.get(interrupt_id)
        if item is None:
            entries.append({"interruptId": interrupt_id, "status": "cancelled"})
        elif item["action"] in (Action.APPROVE, Action.EDIT):
            entries.append({"interruptId": interrupt_id, "status": "resolved", "payload": item["data"]})
        else:
            denial = {"approved": False}
            if item.get("comment"):
                denial["reason"] = item["comment"]
            # A rejection abandons the interrupt (the rule); feedback answers it with a denial.
            status = "cancelled" if item["action"] == Action.REJECT else "resolved"
            entries.append({"interruptId": interrupt_id, "status": status, "payload": denial})
    return entries
