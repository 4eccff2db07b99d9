"""/mcp: the `request_approval` tool, Claude Code's permission prompt tool backed by a hold.

Claude Code calls it with `{tool_name, input, tool_use_id}` and expects one text block holding JSON:
`{"behavior": "allow", "updatedInput": {...}}` or `{"behavior": "deny", "message": "..."}`
(ADAPTERS-round3.md §5). Each call is a run of one hold of one item under RQ_MCP_CAPABILITY: the
tool's name as the item's title, its input as the item's data. The call waits for the hold to settle.
"""

import json
from typing import Any

from django.conf import settings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS

from ..words import Action
from . import calls
from .auth import BearerKey, actor_of
from .calls import GOES_ON


class ApprovalServer(MCPServer):
    """The SDK's MCPServer answers an unknown tool with a tool result (isError); the spec's answer is
    the protocol's error, -32602 (Invalid params), as the gateway gives."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None):
        if name not in {tool.name for tool in await self.list_tools()}:
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {name}")
        return await super().call_tool(name, arguments, context)


mcp = ApprovalServer(
    "review-queue",
    instructions="Ask a person before a tool runs: request_approval waits for a reviewer's decision.",
)


def approval_ask(tool_name: str, tool_input: dict, tool_use_id: str | None) -> dict:
    return {
        "intent": f"Allow {tool_name}?"[:500],
        "actions": [*GOES_ON, Action.REJECT],
        "expires_in": settings.RQ_MCP_EXPIRES_IN,
        "items": [{"id": (tool_use_id or "call")[:200], "title": tool_name[:1000], "data": tool_input}],
    }


def permission_answer(outcome: calls.Outcome) -> dict:
    """What Claude Code is told: allow (with the input as decided) or deny with the reason."""
    if outcome.status == "decided" and outcome.action in GOES_ON:
        return {"behavior": "allow", "updatedInput": outcome.data}
    if outcome.status == "decided":
        reason = outcome.comment or "no reason given"
        return {"behavior": "deny", "message": f"Rejected by {outcome.decided_by}: {reason}"}
    if outcome.status == "expired":
        return {"behavior": "deny", "message": "The request for approval expired before anyone decided."}
    return {"behavior": "deny", "message": "The request for approval was cancelled."}


# structured_output=False: Claude Code accepts one text block only (ADAPTERS-round3.md §5's pitfall).
@mcp.tool(structured_output=False)
async def request_approval(tool_name: str, input: dict[str, Any], ctx: Context, tool_use_id: str | None = None) -> str:
    """Ask a person whether the tool may run with this input; waits for the decision.

    Answers JSON: {"behavior": "allow", "updatedInput": {...}} (approved, or edited by the reviewer) or
    {"behavior": "deny", "message": "..."} (rejected, expired or cancelled).
    """
    actor = actor_of(ctx.request_context.request)
    # Claude Code sends the same tool_use_id when it asks again about one tool use: the same hold.
    key = calls.call_key("request_approval", tool_use_id) if tool_use_id else None
    held, outcome = await calls.hold_and_wait(
        actor=actor,
        capability=settings.RQ_MCP_CAPABILITY,
        input={"tool_name": tool_name, "input": input},
        ask_body=approval_ask(tool_name, input, tool_use_id),
        key=key,
        heartbeat=lambda: ctx.report_progress(0, message="waiting for a reviewer"),
    )
    answer = permission_answer(outcome)
    await calls.finish(held.run_id, answer)
    return json.dumps(answer)


def app():
    """The streamable-HTTP app for /mcp behind the bearer key. Stateless, so that any ASGI worker
    answers any request: the tool needs no session, and what it waits for is in the database."""
    starlette_app = mcp.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        # The bearer key is the guard; the Host header is Django's (ALLOWED_HOSTS) to judge, not the SDK's
        # localhost-only default, which would refuse every production host name.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return starlette_app, BearerKey(starlette_app)
