"""Pydantic AI: the deferred tool calls a run ends on become one hold.

    agent = Agent(model, output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str: ...

    agentos.serve({"files": PydanticAIAgent(agent)})

This is Pydantic AI's own "two-run pattern": the first run ends with `DeferredToolRequests`, and the
second run gets the first one's message history and a `DeferredToolResults`. The history is kept in
run state (`pydantic_ai:paused`), on the server side, so any process resumes it.

Each deferred call is an item (id = the tool call id, data = its validated arguments, schema = the
tool's JSON Schema), and every call of the step is answered in one resume (Pydantic AI refuses fewer):
- approval calls (`requires_approval=True`, `raise ApprovalRequired`): approve → `True`; edit →
  `ToolApproved(override_args=data)` (a full replacement, checked against the schema at the decision);
  reject / feedback → `ToolDenied(comment)`; expired → `ToolDenied` saying so.
- external calls (`raise CallDeferred`): approve or edit runs `run_external(tool_name, args)` here and
  its result is the call's return; a reject gives the model the comment as a retry prompt, never a result.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .. import Invocation
from . import EXPIRED_MESSAGE, call_title, decided_item, hold_actions, item_actions, jsonable, run_coroutine

STATE_KEY = "pydantic_ai:paused"
DENIED = "A reviewer rejected this call."


class PydanticAIAgent:
    """A handler that runs a `pydantic_ai.Agent` whose `output_type` includes `DeferredToolRequests`."""

    def __init__(
        self,
        agent: Any,
        *,
        prompt: Callable[[Invocation], str] | None = None,
        output: Callable[[Any], Any] | None = None,
        run_external: Callable[[str, dict[str, Any]], Any] | None = None,
        intent: str | None = None,
        actions: list[str] | None = None,
        details: str | None = None,
        expires_in: int | None = None,
    ):
        self.agent = agent
        self.prompt = prompt or (lambda inv: inv.input["prompt"])
        self.output = output or (lambda result: jsonable(result.output))
        self.run_external = run_external
        self.intent = intent
        self.actions = actions
        self.details = details
        self.expires_in = expires_in

    def __call__(self, inv: Invocation) -> Any:
        return run_coroutine(self.run(inv))

    async def run(self, inv: Invocation) -> Any:
        from pydantic_ai import DeferredToolRequests, ModelMessagesTypeAdapter

        saved = inv.state.run.get(STATE_KEY, None)
        if inv.resume is None:
            if saved is not None:
                # A repeated start after a crash: the run is paused already, ask again (the service
                # answers with the first hold) instead of calling the model and the tools twice.
                self._ask(inv, saved["calls"])
            result = await self.agent.run(self.prompt(inv))
        else:
            if saved is None:
                raise RuntimeError(f"run {inv.run_id} has no paused Pydantic AI run in run state: nothing to resume")
            history = ModelMessagesTypeAdapter.validate_python(saved["messages"])
            results = self._results(inv, saved["calls"])
            result = await self.agent.run(message_history=history, deferred_tool_results=results)
        if isinstance(result.output, DeferredToolRequests):
            calls = [pending_call(result.output, part) for part in result.output.approvals + result.output.calls]
            messages = ModelMessagesTypeAdapter.dump_python(result.all_messages(), mode="json")
            inv.state.run.put(STATE_KEY, {"messages": messages, "calls": calls})
            self._ask(inv, calls)
        return self.output(result)

    def _results(self, inv: Invocation, calls: list[dict[str, Any]]) -> Any:
        """One answer for every pending call, in Pydantic AI's own words."""
        from pydantic_ai import DeferredToolResults, ModelRetry, ToolApproved, ToolDenied

        results = DeferredToolResults()
        for call in calls:
            decided = decided_item(inv, call["id"])
            action = "reject" if decided is None or decided.action == "feedback" else decided.action
            note = EXPIRED_MESSAGE if decided is None else (decided.comment or DENIED)
            args = decided.data if action == "edit" else call["args"]
            if call["kind"] == "approval":
                if action == "reject":
                    results.approvals[call["id"]] = ToolDenied(note)
                elif action == "edit":
                    results.approvals[call["id"]] = ToolApproved(override_args=dict(args))
                else:
                    results.approvals[call["id"]] = True
            elif action == "reject":
                results.calls[call["id"]] = ModelRetry(f"Rejected by a reviewer: {note}")
            else:
                if self.run_external is None:
                    raise RuntimeError(f"{call['name']} deferred its call: pass run_external(tool_name, args)")
                results.calls[call["id"]] = self.run_external(call["name"], args)
        return results

    def _ask(self, inv: Invocation, calls: list[dict[str, Any]]) -> None:
        schemas = tool_schemas(self.agent)
        items = []
        for call in calls:
            item = {"id": call["id"], "title": call_title(call["name"], call["args"]), "data": call["args"]}
            if isinstance(schemas.get(call["name"]), dict):
                item["schema"] = jsonable(schemas[call["name"]])
            notes = []
            if call["kind"] != "approval":
                notes.append(f"`{call['name']}` runs outside the agent: approving runs it here with these arguments.")
            if call.get("metadata"):
                notes.append(f"Metadata: `{json.dumps(call['metadata'], sort_keys=True)}`")
            if notes:
                item["details"] = "\n\n".join(notes)
            item["actions"] = item_actions({"approve", "edit", "reject"}, self.actions)
            items.append(item)
        names = sorted({c["name"] for c in calls})
        intent = self.intent or f"Approve {len(items)} tool call(s): {', '.join(names)}"[:500]
        actions = hold_actions([i["actions"] for i in items])
        inv.ask(intent, items, actions=actions, details=self.details, expires_in=self.expires_in)


def pending_call(requests: Any, part: Any) -> dict[str, Any]:
    """A deferred call as kept in run state: its validated arguments (JSON form) are what it shows."""
    call_id = part.tool_call_id
    args = requests.validated_args.get(call_id, part.args_as_dict())
    return {
        "id": call_id,
        "name": part.tool_name,
        "args": jsonable(args),
        "kind": "approval" if requests.kind(call_id) == "approval" else "external",
        "metadata": jsonable(requests.metadata.get(call_id) or {}),
    }


def tool_schemas(agent: Any) -> dict[str, Any]:
    """Each function tool's argument JSON Schema, as the model is given it."""
    schemas: dict[str, Any] = {}
    for toolset in agent.toolsets:
        for name, tool in (getattr(toolset, "tools", None) or {}).items():
            definition = getattr(tool, "tool_def", None)
            if definition is not None:
                schemas[name] = definition.parameters_json_schema
    return schemas
