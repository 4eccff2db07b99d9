"""Framework adapters: each turns a framework's own pause into one Review Queue hold.

Import the one you need (`agentos.adapters.langgraph`, `.openai_agents`, `.claude`,
`.bedrock`, `.agno`, `.pydantic_ai`, `.adk`); each imports its framework, which the `agentos` package
does not depend on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import Coroutine
from typing import Any

ORDER = ("approve", "edit", "reject", "feedback")
EXPIRED_MESSAGE = "The approval request expired without a decision. Do not run this call."


def run_coroutine(coro: Coroutine) -> Any:
    """Runs an async framework from a sync handler. In a thread that already runs an event loop
    (a notebook, a test runner, an async web server), asyncio.run() refuses, so the coroutine gets
    a thread and a loop of its own there."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def decided_item(inv: Any, item_id: str) -> Any:
    """The reviewer's decision on one item, or None when the hold expired (or the item was not in it):
    the adapter then rejects the call with EXPIRED_MESSAGE."""
    if inv.resume.expired:
        return None
    try:
        return inv.resume.item(item_id)
    except KeyError:
        return None


def jsonable(value: Any) -> Any:
    """A JSON-safe copy of a framework value (pydantic models, messages, dataclasses…)."""
    return json.loads(json.dumps(value, default=_fallback))


def _fallback(obj: Any) -> Any:
    for method in ("model_dump", "dict", "to_dict"):
        fn = getattr(obj, method, None)
        if callable(fn):
            try:
                return fn()
            except TypeError:
                continue
    if hasattr(obj, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(obj)
    return str(obj)


def call_title(name: str, args: Any, limit: int = 200) -> str:
    """`name(key=value, …)`, cut to `limit` characters; the item's data shows it all."""
    if isinstance(args, dict):
        inner = ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in args.items())
    else:
        inner = json.dumps(args, default=str)
    title = f"{name}({inner})"
    return title if len(title) <= limit else title[: limit - 1] + "…"


def offered_actions(allowed: list[set[str]], wanted: list[str] | None) -> list[str]:
    """The intersection of every pause's allowed decisions, in a stable order (for adapters whose
    pauses all allow the same decisions; the others give each item its own, `item_actions`).

    `feedback` is offered only where a rejection is possible, since that is what it becomes.
    """
    common = set(ORDER[:3]) if not allowed else set.intersection(*allowed)
    return item_actions(common, wanted)


def item_actions(allowed: set[str], wanted: list[str] | None) -> list[str]:
    """One pause's own decisions (SPEC: never the intersection across pauses), limited to `wanted`."""
    allowed = set(allowed)
    if "reject" in allowed:
        allowed.add("feedback")
    chosen = wanted if wanted is not None else ["approve", "edit", "reject"]
    actions = [a for a in ORDER if a in allowed and a in chosen]
    if not actions:
        raise ValueError(f"a pause allows none of {chosen} (it allows {sorted(allowed)})")
    return actions


def hold_actions(per_item: list[list[str]]) -> list[str]:
    """The hold's own `actions`: every action some item offers (each item carries its own)."""
    return [a for a in ORDER if any(a in actions for actions in per_item)]
