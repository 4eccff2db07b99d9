"""An AG-UI agent from a framework that serves AG-UI: Pydantic AI's tool approval over AG-UI (the pattern of
its `examples/pydantic_ai_examples/ag_ui/api/tool_approval.py`: a tool with `requires_approval=True`,
`DeferredToolRequests` in the output, served by `AGUIAdapter.dispatch_request`), through the real service.
The model is a local FunctionModel (no network); the agent, its AG-UI event stream, its interrupt and its
resume handling are Pydantic AI's own."""

import uuid

import httpx
import pytest
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.ui.ag_ui import AGUIAdapter
from starlette.applications import Starlette
from starlette.routing import Route

from tests import factories
from tests.frameworks.asgi import Served
from tests.processes import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_redis]


async def model(messages: list[ModelMessage], info: AgentInfo):
    """Asks to pay INV-1 120 once; then says what the tool answered (or that it was denied)."""
    returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
    if not returns:
        yield {0: DeltaToolCall(name="pay", json_args='{"invoice": "INV-1", "amount": 120}', tool_call_id="call_1")}
    else:
        yield f"done: {returns[-1].content}"


class Payments:
    def __init__(self):
        self.paid: list[dict] = []
        agent = Agent(FunctionModel(stream_function=model), output_type=[str, DeferredToolRequests])

        @agent.tool_plain(requires_approval=True)
        def pay(invoice: str, amount: int) -> str:
            self.paid.append({"invoice": invoice, "amount": amount})
            return f"paid {invoice} {amount}"

        async def endpoint(request):
            return await AGUIAdapter.dispatch_request(request, agent=agent)

        self.served = Served(Starlette(routes=[Route("/agent", endpoint, methods=["POST"])]), "/agent")
        self.url = self.served.url + "/agent"


@pytest.fixture
def payments():
    made = Payments()
    yield made
    made.served.stop()


def drive(service, payments, decide):
    name = f"pyd_{uuid.uuid4().hex[:8]}"
    factories.capability(name=name, endpoint=payments.url, protocol="ag-ui", timeout_seconds=20.0)
    key = factories.account(f"bot-{name}", role="member")[1]
    api = httpx.Client(base_url=service, headers={"authorization": f"Bearer {key}"}, timeout=30)
    run_id = api.post("/v0/runs", json={"capability": name, "input": {"task": "pay INV-1"}}).json()["run_id"]

    def settled(statuses):
        return wait_until(lambda: (r := api.get(f"/v0/runs/{run_id}").json())["status"] in statuses and r, 60, "run")

    run = settled(("held", "completed", "failed"))
    assert run["status"] == "held", run["error"]
    hold = api.get(f"/v0/holds/{run['holds'][-1]['hold_id']}").json()
    (item,) = hold["items"]
    assert item["id"].endswith("call_1") and item["title"].startswith("Approve pay(")
    assert item["data"] == {"approved": True, "editedArgs": {"invoice": "INV-1", "amount": 120}}
    assert item["schema"]["required"] == ["approved"]
    answer = api.post(f"/v0/holds/{hold['hold_id']}/decision", json={"items": [decide(item["id"])]})
    assert answer.status_code == 200, answer.text
    return settled(("completed", "failed"))


def test_it_runs_the_tool_a_person_approved(service, payments):
    run = drive(service, payments, lambda i: {"id": i, "action": "approve"})
    assert run["status"] == "completed", run
    assert payments.paid == [{"invoice": "INV-1", "amount": 120}]


def test_it_runs_the_tool_with_the_arguments_a_person_edited(service, payments):
    edited = {"approved": True, "editedArgs": {"invoice": "INV-1", "amount": 99}}
    run = drive(service, payments, lambda i: {"id": i, "action": "edit", "data": edited})
    assert run["status"] == "completed", run
    assert payments.paid == [{"invoice": "INV-1", "amount": 99}]


def test_it_does_not_run_a_rejected_tool(service, payments):
    run = drive(service, payments, lambda i: {"id": i, "action": "reject", "comment": "duplicate"})
    assert run["status"] == "completed", run
    assert payments.paid == []
