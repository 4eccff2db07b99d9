"""LangGraph: `interrupt()`s (plain or LangChain's HumanInTheLoopMiddleware) become one hold.

    graph = builder.compile(checkpointer=SqliteSaver(conn))   # durable: holds outlive the process
    agentos.serve({"triage": LangGraphAgent(graph)})

The run id is the graph's `thread_id`. When the graph stops, every pending interrupt becomes an
item of one hold; the resume answers them all in one `Command(resume={interrupt_id: …})`.

A plain `interrupt(value)` gets back `{"action": "approve" | "edit" | "reject", "data": …,
"comment": …}`: `data` is the value as decided (the reviewer's version for an edit), and a
feedback or an expired hold arrives as `reject` with a comment. Middleware requests get
LangChain's own decisions: approve, edit (`edited_action`) or reject with the comment as its
message. `respond` is never used to say no: the model would read it as the tool having worked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langgraph.types import Command, Interrupt

from .. import Invocation
from ..resume import DecidedItem
from . import EXPIRED_MESSAGE, call_title, jsonable, offered_actions

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


def _allowed_from_schema(schema: Any) -> set[str]:
    mapping = (schema or {}).get("discriminator", {}).get("mapping", {})
    return {_FROM_LANGCHAIN[k] for k in mapping if k in _FROM_LANGCHAIN}


def pauses_of(interrupts: list[Interrupt] | tuple[Interrupt, ...]) -> list[_Pause]:
    """One reviewable thing per pending tool call or plain interrupt, in interrupt order."""
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
                    )
                )
        elif isinstance(value, dict) and value.get("type") == "tool_approval":
            allowed = _allowed_from_schema(getattr(intr, "response_schema", None))
            pauses.append(
                _Pause(
                    item_id=intr.id,
                    interrupt_id=intr.id,
                    kind="call",
                    name=value["name"],
                    data=jsonable(value.get("args") or {}),
                    title=call_title(value["name"], value.get("args") or {}),
                    allowed=allowed or {"approve", "reject"},
                )
            )
        else:
            data = jsonable(value) if isinstance(value, dict) else {"value": jsonable(value)}
            if isinstance(value, dict) and isinstance(value.get("title"), str):
                title = value["title"]
            elif isinstance(value, str):
                title = value[:200]
            else:
                title = call_title("interrupt", data)
            pauses.append(
                _Pause(
                    item_id=intr.id,
                    interrupt_id=intr.id,
                    kind="plain",
                    name="interrupt",
                    data=data,
                    title=title or "Approve this step",
                    allowed={"approve", "edit", "reject"},
                )
            )
    return pauses


def _langchain_decision(pause: _Pause, decided: DecidedItem | None) -> dict[str, Any]:
    if decided is not None and decided.action == "approve":
        return {"type": "approve"}
    if decided is not None and decided.action == "edit":
        return {"type": "edit", "edited_action": {"name": pause.name, "args": decided.data}}
    message = decided.comment if decided is not None else EXPIRED_MESSAGE
    return {"type": "reject", "message": message} if message else {"type": "reject"}


def _plain_decision(pause: _Pause, decided: DecidedItem | None) -> dict[str, Any]:
    if decided is None:
        return {"action": "reject", "data": pause.data, "comment": EXPIRED_MESSAGE}
    action = "reject" if decided.action == "feedback" else decided.action
    return {"action": action, "data": decided.data, "comment": decided.comment}


def resume_map(interrupts: Any, decisions: dict[str, DecidedItem], expired: bool) -> dict:
    """`{interrupt_id: answer}` for every pending interrupt the decision covers.

    An expired hold rejects everything. An interrupt without a decision stays pending (the
    graph pauses again), so a partial answer never sends a wrong number of decisions.
    """
    answers: dict[str, Any] = {}
    batched: dict[str, list[tuple[_Pause, DecidedItem | None]]] = {}
    incomplete: set[str] = set()
    for pause in pauses_of(interrupts):
        decided = decisions.get(pause.item_id)
        if decided is None and not expired:
            incomplete.add(pause.interrupt_id)
        elif pause.kind == "batched":
            batched.setdefault(pause.interrupt_id, []).append((pause, decided))
        elif pause.kind == "call":
            answers[pause.interrupt_id] = _langchain_decision(pause, decided)
        else:
            answers[pause.interrupt_id] = _plain_decision(pause, decided)
    for iid, pairs in batched.items():
        # A batched request needs one decision per call, in order: a short list would
        # poison the thread (LangChain saves the bad answer and replays it forever).
        if iid not in incomplete:
            answers[iid] = {"decisions": [_langchain_decision(p, d) for p, d in pairs]}
    return answers


class LangGraphAgent:
    """A handler that runs a compiled graph; `graph` must have a (durable) checkpointer."""

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
    ):
        if getattr(graph, "checkpointer", None) in (None, False):
            raise ValueError("compile the graph with a checkpointer: the run resumes from it")
        self.graph = graph
        self.input = input or (lambda inv: inv.input)
        self.output = output or jsonable
        self.intent = intent
        self.actions = actions
        self.details = details
        self.expires_in = expires_in
        self.config = config or {}

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
            answers = resume_map(snapshot.interrupts, decisions, inv.resume.expired)
            self.graph.invoke(Command(resume=answers), cfg, version="v2")
        snapshot = self.graph.get_state(cfg)
        if snapshot.interrupts:
            self._ask(inv, snapshot.interrupts)
        return self.output(snapshot.values)

    def _ask(self, inv: Invocation, interrupts: Any) -> None:
        pauses = pauses_of(interrupts)
        actions = offered_actions([p.allowed for p in pauses], self.actions)
        if callable(self.intent):
            intent = self.intent(pauses)
        elif self.intent:
            intent = self.intent
        elif all(p.kind != "plain" for p in pauses):
            names = sorted({p.name for p in pauses})
            intent = f"Approve {len(pauses)} tool call(s): {', '.join(names)}"[:500]
        else:
            intent = f"Approve {len(pauses)} pending step(s)"
        items = [{"id": p.item_id, "title": p.title, "data": p.data} for p in pauses]
        inv.ask(intent, items, actions=actions, details=self.details, expires_in=self.expires_in)
