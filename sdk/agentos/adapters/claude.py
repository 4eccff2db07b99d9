"""Claude Agent SDK: a tool call waits for a person through the defer path (SPEC: Adapters).

    agentos.serve({"ops": ClaudeAgent(ClaudeAgentOptions(allowed_tools=[...]), matcher="Bash")})

On the start, a PreToolUse hook asks a hold for the tool call and answers `defer`; the turn
ends (`stop_reason == "tool_deferred"`), the session id goes to run state, and the invocation
answers `suspended`. On the resume the session is resumed, the hook fires again for the same
call and answers `allow` (with `updatedInput` for an edit) or `deny` with the comment.

`mode="can_use_tool"` uses the permission callback instead: it asks with `suspend=False` and
denies with `interrupt=True` to end the run (an invocation never waits for a decision); on the
resume the model is told to make the call again, and the callback answers it from the decision,
matching the call by tool name and its exact asked input.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

from claude_agent_sdk import (
    ClaudeAgentOptions,
    HookMatcher,
    PermissionResultAllow,
    PermissionResultDeny,
    ResultMessage,
    ToolPermissionContext,
)
from claude_agent_sdk import query as sdk_query

from .. import Invocation
from ..errors import Suspend
from . import EXPIRED_MESSAGE, call_title, offered_actions, run_coroutine

SESSION_KEY = "claude:session_id"
ASKED_KEY = "claude:asked"
ONE_AT_A_TIME = (
    "Another tool call is waiting for a reviewer. Make one tool call at a time and try this "
    "one again after that decision."
)
RESUME_PROMPTS = {
    # Not verified against a real CLI and model: see docs/sdk.md.
    "defer": "A reviewer has decided on the deferred tool call. Continue.",
    "can_use_tool": (
        "A reviewer has now decided on the tool call that was held for approval. Make that "
        "same tool call again, with the same input."
    ),
}


class ClaudeAgent:
    """A handler that runs `claude_agent_sdk.query` and holds the tool calls `matcher` names."""

    def __init__(
        self,
        options: ClaudeAgentOptions | None = None,
        *,
        mode: str = "defer",
        matcher: str | None = None,
        prompt: Callable[[Invocation], str] | None = None,
        resume_prompt: str | None = None,
        output: Callable[[ResultMessage | None], Any] | None = None,
        intent: str | None = None,
        actions: list[str] | None = None,
        details: str | None = None,
        expires_in: int | None = None,
        query: Callable[..., AsyncIterator[Any]] = sdk_query,
    ):
        if mode not in RESUME_PROMPTS:
            raise ValueError("mode is 'defer' or 'can_use_tool'")
        self.options = options or ClaudeAgentOptions()
        self.mode = mode
        self.matcher = matcher
        self.prompt = prompt or (lambda inv: inv.input["prompt"])
        self.resume_prompt = resume_prompt or RESUME_PROMPTS[mode]
        self.output = output or (lambda result: result.result if result else None)
        self.intent = intent
        self.actions = actions
        self.details = details
        self.expires_in = expires_in
        self.query = query

    def __call__(self, inv: Invocation) -> Any:
        return run_coroutine(self.run(inv))

    def options_for(self, inv: Invocation) -> ClaudeAgentOptions:
        gate = Gate(self, inv)
        if self.mode == "can_use_tool":
            options = dataclasses.replace(self.options, can_use_tool=gate.can_use_tool)
        else:
            hooks = dict(self.options.hooks or {})
            hooks["PreToolUse"] = [
                *hooks.get("PreToolUse", []),
                HookMatcher(matcher=self.matcher, hooks=[gate.pre_tool_use]),
            ]
            options = dataclasses.replace(self.options, hooks=hooks)
        if inv.resume is not None:
            options = dataclasses.replace(options, resume=inv.state.run.get(SESSION_KEY))
        return options

    async def run(self, inv: Invocation) -> Any:
        options = self.options_for(inv)
        prompt = self.prompt(inv) if inv.resume is None else self.resume_prompt
        result: ResultMessage | None = None
        async for message in self.query(prompt=prompt, options=options):
            if isinstance(message, ResultMessage):
                result = message
        if inv.hold_id is not None:
            if result is not None and result.session_id:
                await asyncio.to_thread(inv.state.run.put, SESSION_KEY, result.session_id)
            raise Suspend(inv.hold_id)
        return self.output(result)


class Gate:
    """The hook and the callback of one invocation; both decide from the same place."""

    def __init__(self, adapter: ClaudeAgent, inv: Invocation):
        self.adapter = adapter
        self.inv = inv
        self.used: set[str] = set()  # a decision answers one call, not every later one

    async def decision(self, tool_use_id: str | None, name: str, tool_input: dict[str, Any]) -> tuple[str, Any] | None:
        """("allow", updated_input | None), ("deny", message), or None when nobody decided."""
        resume = self.inv.resume
        if resume is None:
            return None
        asked = await asyncio.to_thread(self.inv.state.run.get, ASKED_KEY, {})
        item_id = tool_use_id if tool_use_id in asked else None
        if item_id is None:
            for candidate, call in asked.items():
                if call == {"name": name, "input": tool_input} and candidate not in self.used:
                    item_id = candidate
                    break
        if item_id is None or item_id in self.used or asked[item_id]["name"] != name:
            return None
        self.used.add(item_id)
        if resume.expired:
            return ("deny", EXPIRED_MESSAGE)
        try:
            decided = resume.item(item_id)
        except KeyError:
            return None
        if decided.action == "approve":
            return ("allow", None)
        if decided.action == "edit":
            return ("allow", decided.data)
        return ("deny", decided.comment or "A reviewer rejected this tool call.")

    async def ask(self, tool_use_id: str, name: str, tool_input: dict[str, Any]) -> str:
        a = self.adapter
        asked = await asyncio.to_thread(self.inv.state.run.get, ASKED_KEY, {})
        asked[tool_use_id] = {"name": name, "input": tool_input}
        await asyncio.to_thread(self.inv.state.run.put, ASKED_KEY, asked)
        item = {"id": tool_use_id, "title": call_title(name, tool_input), "data": tool_input}
        return await asyncio.to_thread(
            self.inv.ask,
            a.intent or f"Approve tool call: {name}"[:500],
            [item],
            actions=offered_actions([], a.actions),
            details=a.details,
            expires_in=a.expires_in,
            suspend=False,
        )

    async def pre_tool_use(self, input: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        name, tool_input = input["tool_name"], input.get("tool_input") or {}
        call_id = tool_use_id or input.get("tool_use_id") or ""
        found = await self.decision(call_id, name, tool_input)
        if found is not None:
            verdict, value = found
            out: dict[str, Any] = {"hookEventName": "PreToolUse", "permissionDecision": verdict}
            if verdict == "allow" and value is not None:
                out["updatedInput"] = value
            if verdict == "deny":
                out["permissionDecisionReason"] = value
            return {"hookSpecificOutput": out}
        if self.inv.hold_id is not None:
            return _hook("deny", ONE_AT_A_TIME)
        if input.get("session_id"):
            await asyncio.to_thread(self.inv.state.run.put, SESSION_KEY, input["session_id"])
        hold_id = await self.ask(call_id, name, tool_input)
        return _hook("defer", f"Waiting for a reviewer (hold {hold_id}).")

    async def can_use_tool(
        self, tool_name: str, input_data: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResultAllow | PermissionResultDeny:
        found = await self.decision(context.tool_use_id, tool_name, input_data)
        if found is not None:
            verdict, value = found
            if verdict == "allow":
                return PermissionResultAllow(updated_input=value)
            return PermissionResultDeny(message=value)
        if self.inv.hold_id is not None:
            return PermissionResultDeny(message=ONE_AT_A_TIME)
        hold_id = await self.ask(context.tool_use_id or "", tool_name, input_data)
        # The invocation must answer, not wait: end the run; the resume replays the call.
        return PermissionResultDeny(message=f"Waiting for a reviewer (hold {hold_id}). Stop here.", interrupt=True)


def _hook(decision: str, reason: str) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        }
    }
