"""OpenAI Agents SDK: the tool approvals a run stops on become one hold.

    agentos.serve({"support": OpenAIAgentsAgent(agent)})

Each interruption is an item (the tool call's arguments are its data). The paused `RunState`
JSON is kept in run state, on the server side: reviewers see the arguments, never the blob.

The SDK has no edit decision. An edit becomes a rejection whose message gives the model the
corrected arguments to call again with; that one call (same tool, exactly those arguments)
is then approved without asking again, because the reviewer already wrote it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agents import Agent, Runner, RunState

from .. import Invocation
from . import EXPIRED_MESSAGE, call_title, jsonable, offered_actions, run_coroutine

STATE_KEY = "openai_agents:run_state"
EDITS_KEY = "openai_agents:edits"


def arguments_of(item: Any) -> dict[str, Any]:
    try:
        args = json.loads(item.arguments or "{}")
    except ValueError:
        return {"arguments": item.arguments}
    return args if isinstance(args, dict) else {"arguments": args}


def edit_message(name: str, args: dict[str, Any], comment: str | None) -> str:
    message = (
        f"A reviewer did not approve this call as proposed. Call {name} again with exactly "
        f"these arguments instead: {json.dumps(args, ensure_ascii=False, sort_keys=True)}"
    )
    return f"{message}. Reviewer's note: {comment}" if comment else message


class OpenAIAgentsAgent:
    """A handler that runs an `agents.Agent`; its tools pause with `needs_approval`."""

    def __init__(
        self,
        agent: Agent,
        *,
        input: Callable[[Invocation], Any] | None = None,
        output: Callable[[Any], Any] | None = None,
        intent: str | None = None,
        actions: list[str] | None = None,
        details: str | None = None,
        expires_in: int | None = None,
        max_turns: int | None = None,
    ):
        self.agent = agent
        self.input = input or (lambda inv: inv.input["prompt"])
        self.output = output or (lambda result: jsonable(result.final_output))
        self.intent = intent
        self.actions = actions
        self.details = details
        self.expires_in = expires_in
        self.run_kwargs = {"max_turns": max_turns} if max_turns else {}

    def __call__(self, inv: Invocation) -> Any:
        return run_coroutine(self.run(inv))

    async def run(self, inv: Invocation) -> Any:
        saved = inv.state.run.get(STATE_KEY, None)
        if inv.resume is None:
            if saved is not None:
                # A repeated start after a crash: the run is paused already, ask again (the
                # service answers hold_open with the first hold) instead of re-running tools.
                state = await RunState.from_json(self.agent, saved)
                self._ask(inv, state.get_interruptions())
            result = await Runner.run(self.agent, self.input(inv), **self.run_kwargs)
        else:
            if saved is None:
                raise RuntimeError("no paused RunState in run state to resume")
            state = await RunState.from_json(self.agent, saved)
            self._apply(inv, state)
            result = await Runner.run(self.agent, state, **self.run_kwargs)
        result = await self._settle(inv, result)
        return self.output(result)

    def _apply(self, inv: Invocation, state: Any) -> None:
        """Approve or reject the restored state's own items (the old ones would be ignored)."""
        resume = inv.resume
        decisions = {d.id: d for d in resume.decided_items}
        edits = inv.state.run.get(EDITS_KEY, [])
        for item in state.get_interruptions():
            decided = decisions.get(item.call_id)
            if decided is None:
                if resume.expired:
                    state.reject(item, rejection_message=EXPIRED_MESSAGE)
                continue  # not in this hold (pre-approved), or left for the next one
            if decided.action == "approve":
                state.approve(item)
            elif decided.action == "edit":
                edits.append({"name": item.name, "args": decided.data})
                state.reject(item, rejection_message=edit_message(item.name, decided.data, decided.comment))
            else:
                state.reject(item, rejection_message=decided.comment)
        inv.state.run.put(EDITS_KEY, edits)

    async def _settle(self, inv: Invocation, result: Any) -> Any:
        """Run on while every pending call is one a reviewer already wrote; else ask."""
        while result.interruptions:
            state = result.to_state()
            edits = inv.state.run.get(EDITS_KEY, [])
            pending = []
            for item in state.get_interruptions():
                wanted = {"name": item.name, "args": arguments_of(item)}
                if wanted in edits:
                    edits.remove(wanted)
                    state.approve(item)
                else:
                    pending.append(item)
            inv.state.run.put(EDITS_KEY, edits)
            if pending:
                # Approvals made above travel inside the saved JSON.
                inv.state.run.put(STATE_KEY, state.to_json())
                self._ask(inv, pending)
            result = await Runner.run(self.agent, state, **self.run_kwargs)
        return result

    def _ask(self, inv: Invocation, interruptions: list[Any]) -> None:
        actions = offered_actions([], self.actions)
        # The tool's own argument schema: an edit the tool would not accept is refused at the decision.
        schemas = {getattr(t, "name", None): getattr(t, "params_json_schema", None) for t in self.agent.tools}
        items = []
        for it in interruptions:
            item = {"id": it.call_id, "title": call_title(it.name, arguments_of(it)), "data": arguments_of(it)}
            if isinstance(schemas.get(it.name), dict):
                item["schema"] = jsonable(schemas[it.name])
            items.append(item)
        names = sorted({it.name for it in interruptions})
        intent = self.intent or f"Approve {len(items)} tool call(s): {', '.join(names)}"[:500]
        inv.ask(intent, items, actions=actions, details=self.details, expires_in=self.expires_in)
