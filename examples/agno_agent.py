"""An Agno agent whose payments wait for a person (offline demo: a scripted model, no network).

AGENTOS_SECRET=whsec_… python examples/agno_agent.py --port 8085
python examples/agno_agent.py --demo      # the whole flow against a fake Review Queue

The agent is built again in every invocation from the same tools and database: the resume may
reach another process, which continues the paused run from the database.
"""

import argparse
import json

import agentos
from agentos.adapters.agno import AgnoAgent
from agno.agent import Agent
from agno.db.sqlite import SqliteDb
from agno.models.base import Model
from agno.models.response import ModelResponse
from agno.tools import tool


@tool(requires_confirmation=True)
def pay(payee: str, amount: str) -> str:
    """Pay an invoice."""
    return f"Paid {payee} {amount}."


class DemoModel(Model):
    """Stands in for a real model (use agno.models.openai etc.): pays once, then reports the result."""

    def __init__(self):
        super().__init__(id="demo", name="Demo", provider="offline")

    def invoke(self, *args, messages=None, **kwargs):
        done = [m for m in messages or [] if m.role == "tool"]
        if done:
            return ModelResponse(role="assistant", content=str(done[-1].content))
        args = json.dumps({"payee": "Acme", "amount": "120.00"})
        return ModelResponse(
            role="assistant",
            tool_calls=[{"id": "call_1", "type": "function", "function": {"name": "pay", "arguments": args}}],
        )

    async def ainvoke(self, *args, **kwargs):
        return self.invoke(*args, **kwargs)

    def invoke_stream(self, *args, **kwargs):
        yield self.invoke(*args, **kwargs)

    async def ainvoke_stream(self, *args, **kwargs):
        yield self.invoke(*args, **kwargs)

    def _parse_provider_response(self, response, **kwargs):
        return response

    def _parse_provider_response_delta(self, response):
        return response


def handlers(path: str = "agno.db"):
    def build():
        return Agent(model=DemoModel(), tools=[pay], db=SqliteDb(db_file=path), telemetry=False)

    return {"pay_with_agno": AgnoAgent(build, details="One payment per call.")}


def demo() -> None:
    import tempfile

    from agentos.testing import FakeReviewQueue

    with tempfile.TemporaryDirectory() as tmp, FakeReviewQueue() as rq:
        with agentos.Server(handlers(f"{tmp}/agno.db"), port=0, secret=rq.secret) as agent:
            run_id = rq.start_run("pay_with_agno", {"prompt": "Pay Acme's invoice"}, agent.url)
            hold = rq.open_hold(run_id)
            print("held:", hold["intent"], [i["title"] for i in hold["items"]])
            edited = {**hold["items"][0]["data"], "amount": "100.00"}
            answer = rq.decide(hold["hold_id"], [{"id": hold["items"][0]["id"], "action": "edit", "data": edited}])
            print("answer:", answer)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8085)
    parser.add_argument("--demo", action="store_true")
    args = parser.parse_args()
    demo() if args.demo else agentos.serve(handlers(), port=args.port)
