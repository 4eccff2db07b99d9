"""A Pydantic AI agent whose payments wait for a person (offline demo: a scripted model, no network).

AGENTOS_SECRET=whsec_… python examples/pydantic_ai_agent.py --port 8086
python examples/pydantic_ai_agent.py --demo      # the whole flow against a fake Review Queue

The run ends with `DeferredToolRequests` ("two-run pattern"); the message history waits in run state,
so the resume may reach another process.
"""

import argparse

import agentos
from agentos.adapters.pydantic_ai import PydanticAIAgent
from pydantic_ai import Agent, DeferredToolRequests, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


def demo_model(messages, info: AgentInfo) -> ModelResponse:
    """Stands in for a real model ('openai:…', 'anthropic:…'): pays once, then reports the result."""
    returns = [p for p in messages[-1].parts if p.part_kind == "tool-return"]
    if returns:
        return ModelResponse(parts=[TextPart(str(returns[-1].content))])
    return ModelResponse(parts=[ToolCallPart("pay", {"payee": "Acme", "amount": "120.00"}, tool_call_id="call_1")])


agent = Agent(FunctionModel(demo_model), output_type=[str, DeferredToolRequests])


@agent.tool_plain(requires_approval=True)
def pay(payee: str, amount: str) -> str:
    """Pay an invoice."""
    return f"Paid {payee} {amount}."


def handlers():
    return {"pay_with_pydantic_ai": PydanticAIAgent(agent, details="One payment per call.")}


def demo() -> None:
    from agentos.testing import FakeReviewQueue

    with FakeReviewQueue() as rq, agentos.Server(handlers(), port=0, secret=rq.secret) as server:
        run_id = rq.start_run("pay_with_pydantic_ai", {"prompt": "Pay Acme's invoice"}, server.url)
        hold = rq.open_hold(run_id)
        print("held:", hold["intent"], [i["title"] for i in hold["items"]])
        edited = {**hold["items"][0]["data"], "amount": "100.00"}
        answer = rq.decide(hold["hold_id"], [{"id": hold["items"][0]["id"], "action": "edit", "data": edited}])
        print("answer:", answer)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8086)
    parser.add_argument("--demo", action="store_true")
    args = parser.parse_args()
    demo() if args.demo else agentos.serve(handlers(), port=args.port)
