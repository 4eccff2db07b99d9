"""An OpenAI Agents SDK agent whose `pay` tool needs approval (offline: a scripted model).

    AGENTOS_SECRET=whsec_… python examples/openai_agents_agent.py --port 8082
    python examples/openai_agents_agent.py --demo

Swap `ScriptedModel` for a real model name (e.g. model="gpt-5") to run it for real.
"""

from __future__ import annotations

import argparse

import agentos
from agentos.adapters.openai_agents import OpenAIAgentsAgent
from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

set_tracing_disabled(True)


@function_tool(needs_approval=True)
def pay(payee: str, amount: str) -> str:
    """Pay a payee."""
    return f"paid {payee} {amount}"


def build() -> Agent:
    model = ScriptedModel(
        [
            [function_call("pay", {"payee": "Acme", "amount": "120.00"}, call_id="call_1")],
            [function_call("pay", {"payee": "Acme Corp", "amount": "100.00"}, call_id="call_2")],
            [assistant_message("Paid Acme Corp 100.00 as the reviewer asked.")],
        ]
    )
    return Agent(name="Payments", instructions="Pay invoices.", tools=[pay], model=model)


def handlers():
    return {"pay_with_openai": OpenAIAgentsAgent(build())}


def demo() -> None:
    from agentos.testing import FakeReviewQueue

    with FakeReviewQueue() as rq, agentos.Server(handlers(), port=0, secret=rq.secret) as agent:
        run_id = rq.start_run("pay_with_openai", {"prompt": "pay Acme"}, agent.url)
        hold = rq.open_hold(run_id)
        print("held:", hold["intent"], [i["title"] for i in hold["items"]])
        edit = {
            "id": "call_1",
            "action": "edit",
            "data": {"payee": "Acme Corp", "amount": "100.00"},
        }
        print("answer:", rq.decide(hold["hold_id"], [edit], comment="use the legal name"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8082)
    parser.add_argument("--demo", action="store_true")
    args = parser.parse_args()
    demo() if args.demo else agentos.serve(handlers(), port=args.port)
