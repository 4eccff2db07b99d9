"""Claude Agent SDK: a tool call waits for a person through the defer path (SPEC: Adapters).

    agentos.serve({"ops": ClaudeAgent(ClaudeAgentOptions(allowed_tools=[...]), matcher="Bash")})

On the start, a PreToolUse hook asks a hold for the tool call and answers `defer`; the turn ends
(`stop_reason == "tool_deferred"`), the session id goes to run state, and the invocation answers
`suspended`. On the resume the session is resumed with no prompt of its own: the CLI fires the hook
again for the deferred call, the hook answers `allow` (with `updatedInput` for an edit) or `deny` with
the comment, and the CLI carries on by itself, so the run's output is the model's real final answer.

The developer's own PreToolUse hooks are kept and composed: a hook of theirs that answers `defer`
(as the SDK's deferred-tool example does) asks a hold for that call, and on the resume its `defer`
gives way to the reviewer's decision; any other answer of theirs stands. There is no `can_use_tool`
mode: an invocation never waits for a person.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, HookMatcher, ResultMessage
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


class ClaudeAgent:
    """A handler that runs `claude_agent_sdk.query` and holds the tool calls `matcher` names (and those
    that the developer's own PreToolUse hooks defer)."""

    def __init__(
        self,
        options: ClaudeAgentOptions | None = None,
        *,
        matcher: str | None = None,
        prompt: Callable[[Invocation], str] | None = None,
        output: Callable[[ResultMessage | None], Any] | None = None,
        intent: str | None = None,
        actions: list[str] | None = None,
        details: str | None = None,
        expires_in: int | None = None,
        hold_matching: bool = True,
        query: Callable[..., AsyncIterator[Any]] = sdk_query,
    ):
        self.options = options or ClaudeAgentOptions()
        self.matcher = matcher
        self.hold_matching = hold_matching
        self.prompt = prompt or (lambda inv: inv.input["prompt"])
        self.output = output or (lambda result: result.result if result else None)
        self.intent = intent
        self.actions = actions
        self.details = details
        self.expires_in = expires_in
        self.query = query

    def __call__(self, inv: Invocation) -> Any:
        return run_coroutine(self.run(inv))

    def options_for(self, inv: Invocation, gate: Gate) -> ClaudeAgentOptions:
        hooks = {event: list(matchers) for event, matchers in (self.options.hooks or {}).items()}
        theirs = [
            dataclasses.replace(m, hooks=[gate.compose(fn) for fn in m.hooks]) for m in hooks.get("PreToolUse", [])
        ]
        ours = [HookMatcher(matcher=self.matcher, hooks=[gate.pre_tool_use])] if self.hold_matching else []
        hooks["PreToolUse"] = [*theirs, *ours]
        options = dataclasses.replace(self.options, hooks=hooks)
        if inv.resume is not None:
            session_id = inv.state.run.get(SESSION_KEY, None)
            if not session_id:
                raise RuntimeError(f"run {inv.run_id} has no Claude session id in run state: nothing to resume")
            options = dataclasses.replace(options, resume=session_id)
        return options

    async def run(self, inv: Invocation) -> Any:
        gate = Gate(self, inv)
        options = self.options_for(inv, gate)
        finished = asyncio.Event()
        if inv.resume is None:
            prompt: Any = self.prompt(inv)
        else:
            # No prompt of our own: resumed, the CLI answers the deferred call through the hook and goes
            # on by itself. The input stays open until the result, so the hook can still be answered.
            prompt = _held_open(finished)
        result: ResultMessage | None = None
        async for message in self.query(prompt=prompt, options=options):
            if isinstance(message, ResultMessage):
                result = message
                finished.set()
        finished.set()
        if inv.hold_id is not None:
            if result is not None and result.session_id:
                await asyncio.to_thread(inv.state.run.put, SESSION_KEY, result.session_id)
            raise Suspend(inv.hold_id)
        if inv.resume is not None and result is not None and result.stop_reason == "tool_deferred_unavailable":
            raise RuntimeError(f"the deferred tool of run {inv.run_id} is no longer available in its session")
        if inv.resume is not None and not gate.answers:
            raise RuntimeError(
                f"the resumed Claude session of run {inv.run_id} never asked about the deferred call again,"
                " so the decision was not applied (was the session file removed?)"
            )
        return self.output(result)


async def _held_open(finished: asyncio.Event) -> AsyncIterator[dict[str, Any]]:
    await finished.wait()
    return
    yield  # an async generator that sends nothing


class Gate:
    """The hooks of one invocation: they ask for a call on the start and answer it on the resume."""

    def __init__(self, adapter: ClaudeAgent, inv: Invocation):
        self.adapter = adapter
        self.inv = inv
        self.answers: dict[str, dict[str, Any] | None] = {}  # call id -> the hook output decided for it
        self.used: set[str] = set()  # a decision answers one call, not every later identical one
        self.asked_call: str | None = None

    async def decision(self, call_id: str, name: str, tool_input: dict[str, Any]) -> dict[str, Any] | None:
        """The hook output for this call from the reviewer's decision, or None when nobody decided it."""
        if call_id in self.answers:
            return self.answers[call_id]
        resume = self.inv.resume
        if resume is None:
            return None
        asked = await asyncio.to_thread(self.inv.state.run.get, ASKED_KEY, {})
        item_id = call_id if call_id in asked else None
        if item_id is None:
            for candidate, call in asked.items():
                if call == {"name": name, "input": tool_input} and candidate not in self.used:
                    item_id = candidate
                    break
        if item_id is None or item_id in self.used or asked[item_id]["name"] != name:
            return None
        self.used.add(item_id)
        if resume.expired:
            out = _hook("deny", EXPIRED_MESSAGE)
        else:
            try:
                decided = resume.item(item_id)
            except KeyError:
                return None
            if decided.action == "approve":
                out = _hook("allow", None)
            elif decided.action == "edit":
                out = _hook("allow", None, updated_input=decided.data)
            else:
                out = _hook("deny", decided.comment or "A reviewer rejected this tool call.")
        self.answers[call_id] = out
        return out

    async def ask(self, call_id: str, name: str, tool_input: dict[str, Any], session_id: str | None) -> dict:
        if self.asked_call == call_id:
            return _hook("defer", f"Waiting for a reviewer (hold {self.inv.hold_id}).")
        if self.inv.hold_id is not None:
            # One hold per invocation, and the CLI defers only a turn's single call: never run this one.
            return _hook("deny", ONE_AT_A_TIME)
        a = self.adapter
        if session_id:
            await asyncio.to_thread(self.inv.state.run.put, SESSION_KEY, session_id)
        asked = await asyncio.to_thread(self.inv.state.run.get, ASKED_KEY, {})
        asked[call_id] = {"name": name, "input": tool_input}
        await asyncio.to_thread(self.inv.state.run.put, ASKED_KEY, asked)
        item = {"id": call_id, "title": call_title(name, tool_input), "data": tool_input}
        hold_id = await asyncio.to_thread(
            self.inv.ask,
            a.intent or f"Approve tool call: {name}"[:500],
            [item],
            actions=offered_actions([], a.actions),
            details=a.details,
            expires_in=a.expires_in,
            suspend=False,
        )
        self.asked_call = call_id
        return _hook("defer", f"Waiting for a reviewer (hold {hold_id}).")

    async def pre_tool_use(self, input: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        name, tool_input = input["tool_name"], input.get("tool_input") or {}
        call_id = tool_use_id or input.get("tool_use_id") or ""
        found = await self.decision(call_id, name, tool_input)
        if found is not None:
            return found
        return await self.ask(call_id, name, tool_input, input.get("session_id"))

    def compose(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        """The developer's hook, kept: its `defer` asks a hold (start) or gives way to the decision (resume)."""

        async def composed(input: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
            theirs = await hook(input, tool_use_id, context) or {}
            specific = theirs.get("hookSpecificOutput") or {}
            if specific.get("permissionDecision") != "defer":
                return theirs
            mine = await self.pre_tool_use(input, tool_use_id, context)
            return {**theirs, "hookSpecificOutput": {**specific, **mine["hookSpecificOutput"]}}

        return composed


def _hook(decision: str, reason: str | None, *, updated_input: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"hookEventName": "PreToolUse", "permissionDecision": decision}
    if reason is not None:
        out["permissionDecisionReason"] = reason
    if updated_input is not None:
        out["updatedInput"] = updated_input
    return {"hookSpecificOutput": out}
