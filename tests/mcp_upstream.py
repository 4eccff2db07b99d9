"""An upstream MCP server written with the official SDK, for the gateway's tests:
`python tests/mcp_upstream.py PORT LOG` serves /mcp on 127.0.0.1:PORT and appends each call it runs
to LOG (one JSON line), so a test can tell what ran and with which arguments.

- delete_file: annotated destructiveHint (the gateway holds it);
- read_file: read-only (passes through);
- book_table: elicits a booking through the SDK's portable `Resolve`/`Elicit` (MRTR on 2026-07-28);
- order: elicits a confirmation whose every field has a default (so a reviewer may approve it as asked);
- ship: asks by hand (MRTR) with a nested requestedSchema, which the gateway must decline;
- connect_calendar: pushes a URL-mode elicitation (an OAuth-style sign-in), which the gateway passes
  to its client untouched, and records the answer or the error it got.
"""

import json
import sys
from typing import Annotated

from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from mcp.shared.exceptions import MCPError
from mcp.types import (
    ElicitRequest,
    ElicitRequestFormParams,
    InputRequiredResult,
    ToolAnnotations,
)
from pydantic import BaseModel

PORT, LOG = int(sys.argv[1]), sys.argv[2]
mcp = MCPServer("upstream-files")


def ran(tool: str, **arguments) -> None:
    with open(LOG, "a") as log:
        log.write(json.dumps({"tool": tool, **arguments}) + "\n")


@mcp.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_file(path: str) -> str:
    """Delete a file."""
    ran("delete_file", path=path)
    return f"deleted {path}"


@mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
def read_file(path: str) -> str:
    """Read a file."""
    ran("read_file", path=path)
    return f"contents of {path}"


class Booking(BaseModel):
    guests: int
    date: str
    terrace: bool = False


def ask_booking(restaurant: str) -> Elicit[Booking]:
    return Elicit(f"Book a table at {restaurant}?", Booking)


@mcp.tool()
def book_table(restaurant: str, booking: Annotated[ElicitationResult[Booking], Resolve(ask_booking)]) -> str:
    """Book a table; asks for the details."""
    if isinstance(booking, AcceptedElicitation):
        ran("book_table", restaurant=restaurant, **booking.data.model_dump())
        return f"booked {restaurant} for {booking.data.guests} on {booking.data.date}"
    ran("book_table", restaurant=restaurant, action=booking.action)
    return f"not booked: {booking.action}"


class Confirmation(BaseModel):
    quantity: int = 1
    gift_wrap: bool = False


def ask_confirmation(item: str) -> Elicit[Confirmation]:
    return Elicit(f"Order {item}?", Confirmation)


@mcp.tool()
def order(item: str, confirmation: Annotated[ElicitationResult[Confirmation], Resolve(ask_confirmation)]) -> str:
    """Order an item; asks to confirm the quantity."""
    if isinstance(confirmation, AcceptedElicitation):
        ran("order", item=item, **confirmation.data.model_dump())
        return f"ordered {confirmation.data.quantity} {item}"
    ran("order", item=item, action=confirmation.action)
    return f"not ordered: {confirmation.action}"


NESTED = {
    "type": "object",
    "properties": {"address": {"type": "object", "properties": {"street": {"type": "string"}}}},
    "required": ["address"],
}


@mcp.tool()
def ship(item: str, ctx: Context) -> str | InputRequiredResult:
    """Ship an item; asks for an address in a nested form."""
    responses = ctx.input_responses
    if not responses:
        params = ElicitRequestFormParams(message=f"Where to ship {item}?", requested_schema=NESTED)
        return InputRequiredResult(input_requests={"address": ElicitRequest(params=params)}, request_state="ship")
    answer = responses["address"]
    ran("ship", item=item, action=answer.action, meta=answer.meta)
    return f"not shipped: {answer.action}"


@mcp.tool()
async def connect_calendar(account: str, ctx: Context) -> str:
    """Connect a calendar; sends the user to sign in (URL mode, pushed: protocol 2025-11-25)."""
    try:
        answer = await ctx.elicit_url(
            "Sign in to your calendar provider to let me read your events.",
            "https://calendar.example/oauth/authorize?client_id=upstream&state=st-42",
            "calendar-sign-in-42",
        )
    except MCPError as exc:
        ran("connect_calendar", account=account, error={"code": exc.error.code, "message": exc.error.message})
        return f"calendar {account}: not connected ({exc.error.code})"
    ran("connect_calendar", account=account, action=answer.action)
    return f"calendar {account}: {answer.action}"


if __name__ == "__main__":
    mcp.run(transport="streamable-http", host="127.0.0.1", port=PORT)
