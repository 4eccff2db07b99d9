"""A Google ADK agent whose payments wait for a person (offline demo: a scripted model, no network).

AGENTOS_SECRET=whsec_… python examples/adk_agent.py --port 8087
python examples/adk_agent.py --demo      # the whole flow against a fake Review Queue

The tool asks with `tool_context.request_confirmation(payload=…)`, so the reviewer can edit the
amount; the session waits in ADK's database (DatabaseSessionService), so any process resumes it.
"""

import argparse

import agentos
from agentos.adapters.adk import ADKAgent
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.sessions import DatabaseSessionService
from google.adk.tools import ToolContext
from google.genai import types


def pay(payee: str, amount: str, tool_context: ToolContext) -> dict:
    """Pay an invoice."""
    confirmation = tool_context.tool_confirmation
    if confirmation is None:
        tool_context.request_confirmation(hint="Approve this payment?", payload={"amount": amount})
        return {"status": "waiting for approval"}
    if not confirmation.confirmed:
        return {"status": "not paid", "reason": confirmation.hint}
    return {"status": f"Paid {payee} {confirmation.payload['amount']}."}  # side effects only after the check


class DemoLlm(BaseLlm):
    """Stands in for a real model ('gemini-…'): pays once, then reports the result."""

    model: str = "demo"

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False):
        responses = [p.function_response for p in llm_request.contents[-1].parts if p.function_response]
        if responses:
            text = str(responses[-1].response.get("status"))
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part.from_text(text=text)]))
            return
        call = types.FunctionCall(id="call_1", name="pay", args={"payee": "Acme", "amount": "120.00"})
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))


def handlers(path: str = "adk.db"):
    agent = LlmAgent(name="payer", model=DemoLlm(), instruction="Pay the invoices you are asked to.", tools=[pay])
    sessions = DatabaseSessionService(f"sqlite+aiosqlite:///{path}")
    return {"pay_with_adk": ADKAgent(agent, session_service=sessions, details="One payment per call.")}


def demo() -> None:
    import tempfile

    from agentos.testing import FakeReviewQueue

    with tempfile.TemporaryDirectory() as tmp, FakeReviewQueue() as rq:
        with agentos.Server(handlers(f"{tmp}/adk.db"), port=0, secret=rq.secret) as server:
            run_id = rq.start_run("pay_with_adk", {"prompt": "Pay Acme's invoice"}, server.url)
            hold = rq.open_hold(run_id)
            print("held:", hold["intent"], [i["title"] for i in hold["items"]])
            item = hold["items"][0]
            answer = rq.decide(hold["hold_id"], [{"id": item["id"], "action": "edit", "data": {"amount": "100.00"}}])
            print("answer:", answer)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8087)
    parser.add_argument("--demo", action="store_true")
    args = parser.parse_args()
    demo() if args.demo else agentos.serve(handlers(), port=args.port)
