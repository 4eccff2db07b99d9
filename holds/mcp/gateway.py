"""The MCP gateway: an MCP server in front of upstream MCP servers, for any MCP client.

- `tools/list` passes through (each upstream's tools, renamed `<upstream>__<tool>` only when there are
  several upstreams).
- Every `tools/call` is asked as a hold of one item under the gateway's capability (the arguments as
  data, the tool's name as title, its input schema as the item's schema when it is one a hold
  accepts; `run.input` is {tool, arguments, annotations}, the annotations being the upstream's hints).
  The capability's rules and grants decide at the ask what they match (services.rules, the one place
  rules are evaluated): approve calls the upstream at once, reject answers at once. Anything else waits
  for a person: approve calls the upstream with the arguments, edit with the edited ones, reject and
  expiry answer a tool error saying so without calling it.
- An upstream's form-mode elicitation (either protocol: the SDK's client answers a push and MRTR alike)
  becomes a hold whose item schema is its `requestedSchema`: accept with the data on approve or edit,
  decline on reject, cancel on expiry. A schema that is not a flat object of primitives is declined
  with a message. A URL-mode elicitation goes to the client exactly as sent, and its answer back, when
  the client declared URL mode; otherwise the upstream gets the spec's -32602. The upstream is spoken to
  in the client's protocol generation: a 2026-07-28 upstream sends no elicitationId, which the
  2025-11-25 wire requires (forwarding one such failed validation: the -32602 seen before). On
  2026-07-28 the gateway cannot push to its client, so the upstream gets an error there.
- Exactly once: a retry (retry_identity) finds the same hold, and only the first call acts on the
  decision (mcp_call_claim): the others answer the upstream's result it recorded.
"""

import asyncio
import functools
import logging
from datetime import timedelta

import httpx2
from django.conf import settings
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp.types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    CallToolResult,
    ElicitResult,
    ErrorData,
    ListToolsResult,
    TextContent,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..item_schemas import item_schema_problems
from ..services.mcp_calls import mcp_call_claim, mcp_call_output
from ..words import Action
from . import calls
from .auth import BearerKey, actor_of
from .calls import GOES_ON
from .gateway_config import GatewayConfig, Upstream

log = logging.getLogger(__name__)
IDEMPOTENCY_META = "io.reviewqueue/idempotencyKey"
PRIMITIVES = {"string", "number", "integer", "boolean"}
claim = calls._db(lambda run_id: mcp_call_claim(run_id=run_id))
output_of = calls._db(lambda run_id: mcp_call_output(run_id=run_id))


def flat_schema_problem(schema) -> str | None:
    """Why a requestedSchema is not a flat object of primitive properties (None: it is)."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "the requested schema is not an object"
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return "the requested schema has no properties"
    for name, prop in properties.items():
        if not isinstance(prop, dict) or prop.get("type") not in PRIMITIVES:
            return f"property '{name}' is not a string, number, integer or boolean"
    problems = item_schema_problems(schema)
    return f"the requested schema is not one a reviewer can fill in: {problems[0]}" if problems else None


def text_error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


def refusal_message(outcome: calls.Outcome) -> str:
    if outcome.status == "decided":
        return f"Rejected by {outcome.decided_by}: {outcome.comment or 'no reason given'}"
    if outcome.status == "expired":
        return "The request for approval expired before anyone decided; the tool was not called."
    return "The request for approval was cancelled; the tool was not called."


async def forward_url(ctx, params) -> ElicitResult | ErrorData:
    """A URL-mode elicitation goes to the gateway's client as the upstream sent it, and its answer back.

    Only to a client that declared URL mode (the spec: a mode not declared in the client's capabilities
    is -32602 Invalid params), and only over a connection that can carry a server-initiated request.
    """
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities else None
    if elicitation is None or elicitation.url is None:
        return ErrorData(code=INVALID_PARAMS, message="the gateway's client did not declare URL-mode elicitation")
    try:
        return await ctx.session.elicit_url(
            params.message, params.url, params.elicitation_id, related_request_id=ctx.request_id
        )
    except NoBackChannelError:
        return ErrorData(code=INVALID_REQUEST, message="the gateway's client cannot be sent a URL elicitation")
    except MCPError as exc:  # the client's own refusal goes back to the upstream as it came
        return exc.error


def retry_identity(params, input: dict) -> tuple[str, timedelta | None]:
    """(key, window): what makes a tools/call the retry of an earlier one (docs/decisions.md, "MCP").

    MCP gives a tools/call no identity beyond its JSON-RPC id, which is only unique within a session
    and which a client's retry need not reuse. So: the client's own key, when it sends one in
    `_meta["io.reviewqueue/idempotencyKey"]`, names the call for good; otherwise the same tool,
    arguments and hints from the same service account are the same call while it is open and for
    RQ_MCP_RETRY_WINDOW seconds after its hold settled (an answer lost on the way back)."""
    client_key = (params.meta or {}).get(IDEMPOTENCY_META)
    if client_key is None:
        return calls.call_key("gateway", input), timedelta(seconds=settings.RQ_MCP_RETRY_WINDOW)
    if not isinstance(client_key, str) or not 1 <= len(client_key) <= 200:
        raise MCPError(code=INVALID_PARAMS, message=f"_meta.{IDEMPOTENCY_META}: a string of 1 to 200 characters")
    return calls.call_key("gateway-key", client_key), None


@functools.cache
def _tls():
    """One TLS context for every upstream client: httpx2 builds a new one (the whole CA bundle) for each
    client, 36 ms of CPU on every tool call. The same default context, so the same trust."""
    return httpx2.create_ssl_context()


class Gateway:
    def __init__(self, config: GatewayConfig):
        self.config = config
        self.tools: dict[str, tuple[Upstream, object]] = {}  # the name clients see -> (upstream, its Tool)
        self.server = Server("review-queue-gateway", on_list_tools=self.list_tools, on_call_tool=self.call_tool)

    def exposed(self, upstream: Upstream, name: str) -> str:
        return name if len(self.config.upstreams) == 1 else f"{upstream.name}__{name}"

    def client(self, upstream: Upstream, elicitation_callback=None, mode="auto") -> tuple[httpx2.AsyncClient, Client]:
        http = httpx2.AsyncClient(headers=upstream.headers, timeout=httpx2.Timeout(30, read=None), verify=_tls())
        transport = streamable_http_client(upstream.url, http_client=http)
        return http, Client(transport, mode=mode, elicitation_callback=elicitation_callback)

    async def refresh(self) -> list:
        tools, found = [], {}
        for upstream in self.config.upstreams:
            http, client = self.client(upstream)
            async with http, client:
                cursor = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    for tool in page.tools:
                        name = self.exposed(upstream, tool.name)
                        found[name] = (upstream, tool)
                        tools.append(tool.model_copy(update={"name": name}))
                    cursor = page.next_cursor
                    if not cursor:
                        break
        self.tools = found
        return tools

    async def list_tools(self, ctx, params) -> ListToolsResult:
        return ListToolsResult(tools=await self.refresh())

    async def call_tool(self, ctx, params) -> CallToolResult:
        actor = actor_of(ctx.request)
        name, arguments = params.name, dict(params.arguments or {})
        if name not in self.tools:
            await self.refresh()
        if name not in self.tools:
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {name}")
        upstream, tool = self.tools[name]
        hints = tool.annotations
        annotations = hints.model_dump(mode="json", by_alias=True, exclude_none=True) if hints else {}
        input = {"tool": name, "arguments": arguments, "annotations": annotations}
        key, window = retry_identity(params, input)
        schema = tool.input_schema if not item_schema_problems(tool.input_schema or {}) else None
        ask_body = {
            "intent": f"Call {name}?"[:500],
            "details": tool.description or "",
            "actions": [*GOES_ON, Action.REJECT],
            "items": [{"id": "call", "title": name[:1000], "data": arguments, "schema": schema}],
        }
        # Every call is asked: the capability's rules (and grants) answer at once what they decide,
        # and the rest waits for a person (docs/rules.md; the one place rules are evaluated).
        held, outcome = await calls.hold_and_wait(
            actor=actor,
            capability=self.config.capability,
            input=input,
            ask_body=ask_body,
            key=key,
            window=window,
        )
        if outcome.status != "decided" or outcome.action not in GOES_ON:
            result = text_error(refusal_message(outcome))
            await calls.finish(held.run_id, result.model_dump(mode="json", by_alias=True, exclude_none=True))
            return result
        if not await claim(held.run_id):
            # A retry of a call whose first attempt is calling (or has called) the upstream: its result.
            while True:
                finished, output = await output_of(held.run_id)
                if finished:
                    return CallToolResult.model_validate(output)
                await asyncio.sleep(1)
        # The upstream is spoken to in the client's protocol generation, so that a URL elicitation
        # reaches the client as sent: 2025-11-25 pushes it with its elicitationId (required on that
        # wire), 2026-07-28 has no id and no push.
        mode = "auto" if ctx.session.protocol_version in MODERN_PROTOCOL_VERSIONS else "legacy"
        elicit = self.elicitation(ctx, actor, held.run_id)
        result = await self.upstream_call(upstream, tool.name, outcome.data, elicit, mode)
        await calls.finish(held.run_id, result.model_dump(mode="json", by_alias=True, exclude_none=True))
        return result

    async def upstream_call(self, upstream: Upstream, tool_name: str, arguments: dict, elicit, mode) -> CallToolResult:
        http, client = self.client(upstream, elicit, mode)
        async with http, client:
            try:
                return await client.call_tool(tool_name, arguments)
            except MCPError as exc:  # the upstream's protocol error is the client's
                raise MCPError(code=exc.error.code, message=exc.error.message, data=exc.error.data) from None

    def elicitation(self, ctx, actor, call_run_id: int):
        """The upstream client's elicitation callback for one gateway call (its run): each round is a
        hold of its own, keyed by the call and the round, so that it is asked once."""
        rounds = iter(range(1_000_000))

        async def on_elicit(context, params) -> ElicitResult | ErrorData:
            if params.mode == "url":
                return await forward_url(ctx, params)
            schema = params.requested_schema
            problem = flat_schema_problem(schema)
            if problem is not None:
                log.info("mcp gateway: declined an elicitation: %s", problem)
                return ElicitResult(action="decline", meta={"io.reviewqueue/message": f"Declined: {problem}"})
            properties, required = schema["properties"], set(schema.get("required") or [])
            data = {k: p["default"] for k, p in properties.items() if "default" in p}
            # Approve answers with the data as asked, so it is offered only when that data is complete.
            complete = required <= set(data)
            ask_body = {
                "intent": params.message[:500] or "An upstream tool asks for input",
                "details": params.message,
                "actions": [*GOES_ON, Action.REJECT] if complete else [Action.EDIT, Action.REJECT],
                "items": [
                    {"id": "elicitation", "title": params.message[:1000] or "input", "data": data, "schema": schema}
                ],
            }
            held, outcome = await calls.hold_and_wait(
                actor=actor,
                capability=self.config.capability,
                input={"elicitation": {"message": params.message, "requestedSchema": schema}},
                ask_body=ask_body,
                key=calls.call_key("elicitation", call_run_id, next(rounds)),
            )
            if outcome.status == "decided" and outcome.action in GOES_ON:
                result = ElicitResult(action="accept", content=outcome.data)
            elif outcome.status == "decided":
                result = ElicitResult(action="decline")
            else:
                result = ElicitResult(action="cancel")
            await calls.finish(held.run_id, result.model_dump(mode="json", by_alias=True, exclude_none=True))
            return result

        return on_elicit

    def app(self):
        starlette_app = self.server.streamable_http_app(
            streamable_http_path="/mcp",
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        return starlette_app, BearerKey(starlette_app)
