"""LangGraph: `interrupt()`s (plain or LangChain's HumanInTheLoopMiddleware) become one hold.

    graph = builder.compile(checkpointer=SqliteSaver(conn))   # durable: holds outlive the process
    agentos.serve({"triage": LangGraphAgent(graph)})

The run id is the graph's `thread_id`. When the graph stops, every pending interrupt becomes an
item of one hold, each with its own allowed decisions; the resume answers them all in one
`Command(resume={interrupt_id: …})`, after checking that the thread still has them (a thread with
nothing pending answers `failed` naming it: a decision is never reported as done when nobody ran it).

Middleware requests get LangChain's own decisions (approve, edit as `edited_action`, reject with the
comment as its message); the middleware's description is the item's `details` and the tool's
argument schema its `schema`. `respond` is never used to say no.

A plain `interrupt(value)` gets back what the docs' nodes read (`answer=`, inferred when not given):
- "action": the value was a dict with an "action" key (the docs' "interrupts in tools"): approve and
  edit send the (edited) dict with `"action": "approve"`, a reject `{"action": "reject", "comment"}`.
- "schema": the interrupt has a `response_schema`: the item's schema is it; approve and edit send the
  (edited) data, a reject sends `approved: false` when the schema has that boolean (else no reject).
- "truth" (otherwise): approve sends True, reject False, and an edit the edited value itself.
- "decision": `{"action", "data", "comment"}` (this adapter's earlier shape), or a callable
  `(interrupt_value, decided_item | None) -> resume value`.
`schema=` (a JSON Schema of the item's data, or a function of the interrupt value) makes the service
refuse an edit that the node would not accept, while the reviewer can still correct it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langgraph.types import Command, Interrupt

from .. import Invocation
from ..resume import DecidedItem
from . import EXPIRED_MESSAGE, call_title, hold_actions, item_actions, jsonable

ANSWERS = ("action", "schema", "truth", "decision")

_FROM_LANGCHAIN = {"approve": "approve", "edit": "edit", "reject": "reject"}


@dataclass
class _Pause:
    item_id: str
    interrupt_id: str
    kind: str  # "batched" | "call" | "plain"
    name: str
    data: dict[str, Any]
    title: str
    allowed: set[str]
    position: int = 0
    details: str | None = None
    schema: dict[str, Any] | None = None
    value: Any = None  # a plain interrupt's value as the node gave it
    answer: str = ""  # a plain interrupt's answer shape (ANSWERS)


def _allowed_from_schema(schema: Any) -> set[str]:
    mapping = (schema or {}).get("discriminator", {}).get("mapping", {})
    return {_FROM_LANGCHAIN[k] for k in mapping if k in _FROM_LANGCHAIN}


def response_schema_of(intr: Interrupt) -> dict[str, Any] | None:
    """An interrupt's `response_schema` as JSON Schema (LangGraph keeps a dict; a type is converted)."""
    schema = getattr(intr, "response_schema", None)
    if schema is None or isinstance(schema, dict):
        return schema
    from pydantic import TypeAdapter

    return TypeAdapter(schema).json_schema()


def tool_schemas(graph: Any) -> dict[str, dict[str, Any]]:
    """Each tool's argument schema, from the graph's ToolNode (create_agent's "tools" node)."""
    found: dict[str, dict[str, Any]] = {}
    for node in getattr(graph, "nodes", {}).values():
        for name, tool in (getattr(getattr(node, "bound", None), "tools_by_name", None) or {}).items():
            try:
                found[name] = jsonable(tool.tool_call_schema.model_json_schema())
            except Exception:  # a tool without a pydantic schema: the type rule checks edits
                continue
    return found


def _plain_answer(value: Any, schema: dict[str, Any] | None, answer: Any) -> str:
    if callable(answer) or answer in ANSWERS:
        return "custom" if callable(answer) else answer
    if schema is not None:
        return "schema"
    if isinstance(value, dict) and "action" in value:
        return "action"
    return "truth"


def pauses_of(
    interrupts: list[Interrupt] | tuple[Interrupt, ...],
    *,
    schemas: dict[str, dict[str, Any]] | None = None,
    answer: Any = None,
) -> list[_Pause]:
    """One reviewable thing per pending tool call or plain interrupt, in interrupt order."""
    schemas = schemas or {}
    pauses: list[_Pause] = []
    for intr in interrupts:
        value = intr.value
        if isinstance(value, dict) and "action_requests" in value and "review_configs" in value:
            configs = {c["action_name"]: c for c in value["review_configs"]}
            for n, req in enumerate(value["action_requests"]):
                allowed = configs.get(req["name"], {}).get("allowed_decisions", [])
                pauses.append(
                    _Pause(
                        item_id=f"{intr.id}.{n}",
                        interrupt_id=intr.id,
                        kind="batched",
                        name=req["name"],
                        data=jsonable(req.get("args") or {}),
                        title=call_title(req["name"], req.get("args") or {}),
                        allowed={_FROM_LANGCHAIN[d] for d in allowed if d in _FROM_LANGCHAIN},
                        position=n,
                        details=req.get("description") or None,
                        schema=schemas.get(req["name"]),
                    )
                )
        elif isinstance(value, dict) and value.get("type") == "tool_approval":
            allowed = _allowed_from_schema(response_schema_of(intr))
            pauses.append(
                _Pause(
                    item_id=intr.id,
                    interrupt_id=intr.id,
                    kind="call",
                    name=value["name"],
                    data=jsonable(value.get("args") or {}),
                    title=call_title(value["name"], value.get("args") or {}),
                    allowed=allowed or {"approve", "reject"},
                    details=value.get("description") or None,
                    schema=schemas.get(value["name"]),
                )
            )
        else:
            pauses.append(_plain_pause(intr, answer))
    return pauses


def _plain_pause(intr: Interrupt, answer: Any) -> _Pause:
    value = intr.value
    schema = response_schema_of(intr)
    shape = _plain_answer(value, schema, answer)
    data = jsonable(value) if isinstance(value, dict) else {"value": jsonable(value)}
    allowed = {"approve", "edit", "reject"}
    details = None
    if shape == "schema" and schema is not None:
        # The reviewer answers in the schema's fields; the question itself is the details.
        props = schema.get("properties") or {}
        asked = value if isinstance(value, dict) else {}
        data = {key: jsonable(asked.get(key)) for key in props} or data
        details = value if isinstance(value, str) else None
        if any(v is None for v in data.values()):
            allowed.discard("approve")  # nothing valid to approve until a person fills it in
        if not _has_approved_flag(schema):
            allowed.discard("reject")
    if isinstance(value, dict) and isinstance(value.get("title"), str):
        title = value["title"]
    elif isinstance(value, dict) and isinstance(value.get("message"), str):
        title = value["message"]
    elif isinstance(value, str):
        title = value[:200]
    else:
        title = call_title("interrupt", data)
    return _Pause(
        item_id=intr.id,
        interrupt_id=intr.id,
        kind="plain",
        name="interrupt",
        data=data,
        title=(title or "Approve this step")[:1000],
        allowed=allowed,
        details=details,
        schema=schema if shape == "schema" else None,
        value=value,
        answer=shape,
    )


def _has_approved_flag(schema: dict[str, Any]) -> bool:
    return (schema.get("properties") or {}).get("approved", {}).get("type") == "boolean"


def _langchain_decision(pause: _Pause, decided: DecidedItem | None) -> dict[str, Any]:
    if decided is not None and decided.action == "approve":
        return {"type": "approve"}
    if decided is not None and decided.action == "edit":
        return {"type": "edit", "edited_action": {"name": pause.name, "args": decided.data}}
    message = decided.comment if decided is not None else EXPIRED_MESSAGE
    return {"type": "reject", "message": message} if message else {"type": "reject"}


def _unwrapped(pause: _Pause, data: Any) -> Any:
    # A value that was not a dict was asked as {"value": …}; the node gets the value itself back.
    return data["value"] if not isinstance(pause.value, dict) and isinstance(data, dict) and "value" in data else data


def _plain_decision(pause: _Pause, decided: DecidedItem | None, answer: Any) -> Any:
    action = "reject" if decided is None or decided.action == "feedback" else decided.action
    comment = EXPIRED_MESSAGE if decided is None else decided.comment
    if pause.answer == "custom":
        return answer(pause.value, decided)
    if pause.answer == "decision":
        return {"action": action, "data": pause.data if decided is None else decided.data, "comment": comment}
    if pause.answer == "action":
        if action == "reject":
            return {"action": "reject", "comment": comment}
        return {**(decided.data if isinstance(decided.data, dict) else pause.data), "action": "approve"}
    if pause.answer == "schema":
        if action == "reject":
            props = (pause.schema or {}).get("properties") or {}
            out: dict[str, Any] = {"approved": False}
            for key in ("reason", "comment", "message", "feedback"):
                if props.get(key, {}).get("type") == "string":
                    out[key] = comment or ""
                    break
            return out
        return decided.data
    # "truth": the docs' `if interrupt(...)` and `edited = interrupt(...)`.
    if action == "approve":
        return True
    if action == "edit":
        return _unwrapped(pause, decided.data)
    return False


def resume_map(
    interrupts: Any, decisions: dict[str, DecidedItem], expired: bool, *, answer: Any = None, schemas=None
) -> dict:
    """`{interrupt_id: answer}` for every pending interrupt the decision covers.

    An expired hold rejects everything. An interrupt without a decision stays pending (the
    graph pauses again), so a partial answer never sends a wrong number of decisions.
    """
    answers: dict[str, Any] = {}
    batched: dict[str, list[tuple[_Pause, DecidedItem | None]]] = {}
    incomplete: set[str] = set()
    for pause in pauses_of(interrupts, schemas=schemas, answer=answer):
        decided = decisions.get(pause.item_id)
        if decided is None and not expired:
            incomplete.add(pause.interrupt_id)
        elif pause.kind == "batched":
            batched.setdefault(pause.interrupt_id, []).append((pause, decided))
        elif pause.kind == "call":
            answers[pause.interrupt_id] = _langchain_decision(pause, decided)
        else:
            answers[pause.interrupt_id] = _plain_decision(pause, decided, answer)
    for iid, pairs in batched.items():
        # A batched request needs one decision per call, in order: a short list would
        # poison the thread (LangChain saves the bad answer and replays it forever).
        if iid not in incomplete:
            answers[iid] = {"decisions": [_langchain_decision(p, d) for p, d in pairs]}
    return answers


class NothingToResume(RuntimeError):
    """The thread has no pending interrupt: the decision cannot be applied (the handler answers failed)."""


class LangGraphAgent:
    """A handler that runs a compiled graph; `graph` must have a durable checkpointer (an in-memory one
    only with `in_memory_ok=True`: it forgets every paused run when the agent restarts)."""

    def __init__(
        self,
        graph: Any,
        *,
        input: Callable[[Invocation], Any] | None = None,
        output: Callable[[Any], Any] | None = None,
        intent: str | Callable[[list[_Pause]], str] | None = None,
        actions: list[str] | None = None,
        details: str | None = None,
        expires_in: int | None = None,
        config: dict[str, Any] | None = None,
        answer: str | Callable[[Any, DecidedItem | None], Any] | None = None,
        schema: dict[str, Any] | Callable[[Any], dict[str, Any] | None] | None = None,
        in_memory_ok: bool = False,
    ):
        checkpointer = getattr(graph, "checkpointer", None)
        if checkpointer in (None, False):
            raise ValueError("compile the graph with a checkpointer: the run resumes from it")
        if not in_memory_ok and type(checkpointer).__name__ in ("InMemorySaver", "MemorySaver"):
            raise ValueError(
                "an in-memory checkpointer loses every paused run when the agent restarts; use SqliteSaver or"
                " PostgresSaver, or pass in_memory_ok=True (tests and demos)"
            )
        if answer is not None and not callable(answer) and answer not in ANSWERS:
            raise ValueError(f"answer is one of {ANSWERS} or a callable")
        self.graph = graph
        self.input = input or (lambda inv: inv.input)
        self.output = output or jsonable
        self.intent = intent
        self.actions = actions
        self.details = details
        self.expires_in = expires_in
        self.config = config or {}
        self.answer = answer
        # A plain interrupt's item schema (of its data, e.g. {"value": ...}): what an edit must hold.
        self.schema = schema
        self.schemas = tool_schemas(graph)

    def config_for(self, inv: Invocation) -> dict[str, Any]:
        cfg = dict(self.config)
        cfg["configurable"] = {**cfg.get("configurable", {}), "thread_id": inv.run_id}
        return cfg

    def __call__(self, inv: Invocation) -> Any:
        cfg = self.config_for(inv)
        snapshot = self.graph.get_state(cfg)
        if inv.resume is None:
            if snapshot.interrupts:
                # A repeated start after a crash: the graph is already paused, ask again
                # (the service answers hold_open with the hold we asked the first time).
                self._ask(inv, snapshot.interrupts)
            if snapshot.created_at is not None and not snapshot.next:
                return self.output(snapshot.values)
            self.graph.invoke(self.input(inv), cfg, version="v2")
        elif snapshot.interrupts:
            decisions = {d.id: d for d in inv.resume.decided_items}
            answers = resume_map(
                snapshot.interrupts, decisions, inv.resume.expired, answer=self.answer, schemas=self.schemas
            )
            self.graph.invoke(Command(resume=answers), cfg, version="v2")
        else:
            raise NothingToResume(
                f"thread {inv.run_id} has no pending interrupt in the graph's checkpointer, so hold"
                f" {inv.resume.hold_id} cannot be applied (was the checkpoint lost?)"
            )
        snapshot = self.graph.get_state(cfg)
        if snapshot.interrupts:
            self._ask(inv, snapshot.interrupts)
        return self.output(snapshot.values)

    def _ask(self, inv: Invocation, interrupts: Any) -> None:
        pauses = pauses_of(interrupts, schemas=self.schemas, answer=self.answer)
        if callable(self.intent):
            intent = self.intent(pauses)
        elif self.intent:
            intent = self.intent
        elif all(p.kind != "plain" for p in pauses):
            names = sorted({p.name for p in pauses})
            intent = f"Approve {len(pauses)} tool call(s): {', '.join(names)}"[:500]
        else:
            intent = f"Approve {len(pauses)} pending step(s)"
        items = []
        for p in pauses:
            item: dict[str, Any] = {
                "id": p.item_id,
                "title": p.title,
                "data": p.data,
                "actions": item_actions(p.allowed, self.actions),
            }
            if p.details:
                item["details"] = p.details
            own = self.schema(p.value) if callable(self.schema) else self.schema
            if p.kind == "plain" and p.schema is None and own is not None:
                item["schema"] = own
            elif p.schema is not None:
                item["schema"] = p.schema
            items.append(item)
        actions = hold_actions([i["actions"] for i in items])
        inv.ask(intent, items, actions=actions, details=self.details, expires_in=self.expires_in)
