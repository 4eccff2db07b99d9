"""A LangGraph agent whose payments wait for a person (offline: plain nodes, no model).

AGENTOS_SECRET=whsec_… python examples/langgraph_agent.py --port 8081
python examples/langgraph_agent.py --demo      # the whole flow against a fake Review Queue
"""

import argparse
import operator
import sqlite3
from typing import Annotated, TypedDict

import agentos
from agentos.adapters.langgraph import LangGraphAgent
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt


class State(TypedDict, total=False):
    invoices: list[dict]
    paid: Annotated[list, operator.add]
    skipped: Annotated[list, operator.add]


def pay_all(state: State) -> State:
    paid, skipped = [], []
    for invoice in state["invoices"]:
        # Nothing before interrupt() has side effects: the node re-runs from the top.
        decision = interrupt({"title": f"Pay {invoice['payee']}", **invoice})
        if decision["action"] in ("approve", "edit"):
            paid.append(decision["data"])
        else:
            skipped.append({"id": invoice["id"], "why": decision["comment"]})
    return {"paid": paid, "skipped": skipped}


def build(path: str = "langgraph-checkpoints.sqlite"):
    builder = StateGraph(State)
    builder.add_node("pay_all", pay_all)
    builder.add_edge(START, "pay_all")
    saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
    return builder.compile(checkpointer=saver)


def handlers(path: str = "langgraph-checkpoints.sqlite"):
    return {"pay_with_langgraph": LangGraphAgent(build(path), details="One payment per step.", answer="decision")}


def demo() -> None:
    import tempfile

    from agentos.testing import FakeReviewQueue

    invoices = [{"id": "INV-1", "payee": "Acme", "amount": "120.00"}]
    with tempfile.TemporaryDirectory() as tmp, FakeReviewQueue() as rq:
        with agentos.Server(handlers(f"{tmp}/cp.sqlite"), port=0, secret=rq.secret) as agent:
            run_id = rq.start_run("pay_with_langgraph", {"invoices": invoices}, agent.url)
            hold = rq.open_hold(run_id)
            print("held:", hold["intent"], [i["title"] for i in hold["items"]])
            edited = {**hold["items"][0]["data"], "amount": "100.00"}
            item_id = hold["items"][0]["id"]
            answer = rq.decide(hold["hold_id"], [{"id": item_id, "action": "edit", "data": edited}])
            print("answer:", answer)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--demo", action="store_true")
    args = parser.parse_args()
    demo() if args.demo else agentos.serve(handlers(), port=args.port)
