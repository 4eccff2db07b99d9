"""Google ADK: the tool confirmations an invocation ends on become one hold.

    session_service = DatabaseSessionService("sqlite+aiosqlite:///adk.db")   # durable: any process resumes
    agentos.serve({"time_off": ADKAgent(root_agent, session_service=session_service)})

A tool pauses with `FunctionTool(fn, require_confirmation=True | callable)` or, inside the tool,
`tool_context.request_confirmation(hint=…, payload=…)`. ADK then emits an `adk_request_confirmation`
call; each becomes an item (id = the original tool call's id). The Review Queue run id is the ADK
session id, and the confirmation call ids are kept in run state (`adk:paused`).

The decision goes back as ADK's own confirmation, all of a turn's answers in **one** message (ADK
continues as soon as one is answered, so answering them one by one would give the model a turn on an
incomplete picture): a `FunctionResponse` named `adk_request_confirmation` with the confirmation
call's id, whose response is a `ToolConfirmation`:
- approve → `confirmed: true` (with the payload as asked, when the tool sent one);
- edit → `confirmed: true` with the reviewer's payload (only for tools that sent a payload: ADK has
  no way to change a boolean confirmation's arguments);
- reject / feedback / expired → `confirmed: false`, the reason as the `hint` (the reviewer's comment,
  or EXPIRED_MESSAGE when the hold expired), and the payload as asked with `reason` and `expired`
  added when it is an object (a tool that asks with a payload reads them in
  `tool_context.tool_confirmation.payload`).

ADK's own answer to a refused `require_confirmation` tool is the fixed "This tool call is rejected.",
and a tool that asks with a payload answers whatever it likes; neither tells the model why. So the
runner gets one plugin (`ReasonPlugin`): the response of a refused call gains `reason` (the comment,
or the expiry), unless the tool already put one there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.adk.plugins.base_plugin import BasePlugin

from .. import Invocation
from ..resume import DecidedItem
from . import EXPIRED_MESSAGE, call_title, decided_item, hold_actions, item_actions, jsonable, run_coroutine

STATE_KEY = "adk:paused"
CONFIRMATION = "adk_request_confirmation"
JSON_TYPES = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)


class ADKAgent:
    """A handler that runs an ADK agent (or `App`) on a durable session service."""

    def __init__(
        self,
        agent: Any = None,
        *,
        session_service: Any,
        app: Any = None,
        app_name: str | None = None,
        user_id: str = "agentos",
        prompt: Callable[[Invocation], str] | None = None,
        output: Callable[[list[Any]], Any] | None = None,
        schema: dict[str, Any] | Callable[[str, Any], dict[str, Any] | None] | None = None,
        in_memory_ok: bool = False,
        intent: str | None = None,
        actions: list[str] | None = None,
        details: str | None = None,
        expires_in: int | None = None,
    ):
        from google.adk.sessions import InMemorySessionService

        if (agent is None) == (app is None):
            raise ValueError("pass the root agent or an App, not both")
        if isinstance(session_service, InMemorySessionService) and not in_memory_ok:
            raise ValueError(
                "the session service is in memory: a restarted agent would find no paused session. "
                "Use DatabaseSessionService (or pass in_memory_ok=True for tests)"
            )
        self.agent, self.app, self.session_service = agent, app, session_service
        self.app_name = app_name or (app.name if app is not None else agent.name)
        self.user_id = user_id
        self.prompt = prompt or (lambda inv: inv.input["prompt"])
        self.output = output or final_text
        self.schema = schema
        self.intent = intent
        self.actions = actions
        self.details = details
        self.expires_in = expires_in

    def __call__(self, inv: Invocation) -> Any:
        return run_coroutine(self.run(inv))

    def _runner(self) -> Any:
        from google.adk.apps import App
        from google.adk.runners import Runner

        if self.app is not None:
            app = self.app.model_copy(update={"plugins": [*self.app.plugins, ReasonPlugin()]})
        else:
            # As Runner(agent=…, app_name=…) wraps a bare agent: App's own validation would refuse
            # names that ADK accepts there.
            app = App.model_construct(name=self.app_name, root_agent=self.agent, plugins=[ReasonPlugin()])
        return Runner(app=app, session_service=self.session_service)

    async def run(self, inv: Invocation) -> Any:
        from google.genai import types

        saved = inv.state.run.get(STATE_KEY, None)
        session_id = inv.run_id
        session = await self.session_service.get_session(
            app_name=self.app_name, user_id=self.user_id, session_id=session_id
        )
        if inv.resume is None:
            if saved is not None:
                # A repeated start after a crash: ask again (the service answers with the first hold).
                self._ask(inv, saved["confirmations"])
            if session is None:
                await self.session_service.create_session(
                    app_name=self.app_name, user_id=self.user_id, session_id=session_id
                )
            message = types.Content(role="user", parts=[types.Part.from_text(text=self.prompt(inv))])
        else:
            if saved is None:
                raise RuntimeError(f"run {inv.run_id} has no paused ADK invocation in run state: nothing to resume")
            if session is None:
                raise RuntimeError(
                    f"run {inv.run_id}: ADK session {session_id} of app {self.app_name} is not in the session "
                    "service: nothing to resume"
                )
            parts = [confirmation_part(c, decided_item(inv, c["id"])) for c in saved["confirmations"]]
            message = types.Content(role="user", parts=parts)
        events = []
        async for event in self._runner().run_async(user_id=self.user_id, session_id=session_id, new_message=message):
            events.append(event)
        confirmations = [c for e in events for c in confirmations_in(e)]
        if confirmations:
            inv.state.run.put(STATE_KEY, {"session_id": session_id, "confirmations": confirmations})
            self._ask(inv, confirmations)
        return self.output(events)

    def _ask(self, inv: Invocation, confirmations: list[dict[str, Any]]) -> None:
        items = [self._item(c) for c in confirmations]
        names = sorted({c["name"] for c in confirmations})
        intent = self.intent or f"Approve {len(items)} tool call(s): {', '.join(names)}"[:500]
        actions = hold_actions([i["actions"] for i in items])
        inv.ask(intent, items, actions=actions, details=self.details, expires_in=self.expires_in)

    def _item(self, c: dict[str, Any]) -> dict[str, Any]:
        item: dict[str, Any] = {"id": c["id"], "title": call_title(c["name"], c["args"])}
        lines = [c["hint"]] if c.get("hint") else []
        if c["payload"] is None:
            # A boolean confirmation: the reviewer sees the call's arguments and can only say yes or no.
            item["data"] = c["args"]
            item["actions"] = item_actions({"approve", "reject"}, self.actions)
        else:
            item["data"] = c["payload"] if isinstance(c["payload"], dict) else {"value": c["payload"]}
            schema = self._schema(c["name"], item["data"])
            if schema:
                item["schema"] = schema
            lines.append(f"The call: `{call_title(c['name'], c['args'], limit=1000)}`")
            item["actions"] = item_actions({"approve", "edit", "reject"}, self.actions)
        if lines:
            item["details"] = "\n\n".join(lines)
        return item

    def _schema(self, name: str, data: dict[str, Any]) -> dict[str, Any] | None:
        if callable(self.schema):
            return self.schema(name, data)
        if isinstance(self.schema, dict) and name in self.schema:
            return self.schema[name]
        return payload_schema(data)


class ReasonPlugin(BasePlugin):
    """Tells the model why a call was refused: ADK's own response to a refused confirmation does not."""

    def __init__(self) -> None:
        super().__init__(name="agentos_review_reason")

    async def after_tool_callback(self, *, tool: Any, tool_args: Any, tool_context: Any, result: Any) -> Any:
        confirmation = tool_context.tool_confirmation
        if confirmation is None or confirmation.confirmed or not confirmation.hint:
            return None
        if not isinstance(result, dict) or "reason" in result:
            return None
        return {**result, "reason": confirmation.hint}


def confirmations_in(event: Any) -> list[dict[str, Any]]:
    """The `adk_request_confirmation` calls of one event, as kept in run state."""
    found = []
    for call in event.get_function_calls():
        if call.name != CONFIRMATION:
            continue
        args = jsonable(call.args or {})
        original = args.get("originalFunctionCall") or {}
        confirmation = args.get("toolConfirmation") or {}
        found.append(
            {
                "id": original.get("id") or call.id,
                "confirmation_id": call.id,
                "name": original.get("name", "tool"),
                "args": original.get("args") or {},
                "hint": confirmation.get("hint"),
                "payload": confirmation.get("payload"),
            }
        )
    return found


def confirmation_part(c: dict[str, Any], decided: DecidedItem | None) -> Any:
    """The reviewer's decision as ADK's own `ToolConfirmation` function response."""
    from google.genai import types

    action = "reject" if decided is None or decided.action == "feedback" else decided.action
    response: dict[str, Any] = {"confirmed": action in ("approve", "edit")}
    reason = None
    if action == "reject":
        reason = EXPIRED_MESSAGE if decided is None else (decided.comment or "A reviewer rejected this call.")
        response["hint"] = reason
    if c["payload"] is not None:
        payload = decided.data if action == "edit" else c["payload"]
        unwrap = not isinstance(c["payload"], dict)
        response["payload"] = payload["value"] if unwrap and action == "edit" else payload
        if reason is not None and isinstance(payload, dict):
            # Room for why: the tool reads it where it reads the rest of its confirmation.
            response["payload"] = {**payload, "reason": reason, "expired": decided is None}
    return types.Part(
        function_response=types.FunctionResponse(id=c["confirmation_id"], name=CONFIRMATION, response=response)
    )


def payload_schema(data: dict[str, Any]) -> dict[str, Any] | None:
    """A payload's own shape as a JSON Schema (each key keeps its value's type), so a wrongly typed
    edit is refused at the decision. ADK declares no schema for a confirmation payload."""
    properties = {}
    for key, value in data.items():
        kind = next((name for t, name in JSON_TYPES if isinstance(value, t)), None)
        properties[key] = {"type": kind} if kind else {}
    return {"type": "object", "properties": properties, "required": list(data)} if properties else None


def final_text(events: list[Any]) -> str | None:
    """The text of the invocation's last final response (what the model said last)."""
    for event in reversed(events):
        if event.is_final_response() and event.content and event.content.parts:
            text = "".join(p.text or "" for p in event.content.parts if not getattr(p, "thought", False))
            if text:
                return text
    return None
