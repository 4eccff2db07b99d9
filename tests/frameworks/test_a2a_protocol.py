"""An A2A capability (protocol: a2a) through the real service: the agent is built with the official
`a2a-sdk` server (AgentExecutor, DefaultRequestHandler, JSON-RPC routes, push notifications), and asks
for input (`input-required`). Approve, edit, reject and expiry reach it as a follow-up message on the
same task; its pushes are authenticated by the token Review Queue gave; bad pushes are 4xx."""

import asyncio

import httpx
import pytest
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.routes import create_agent_card_routes
from a2a.server.tasks import (
    TaskUpdater,
)
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, Part, Task, TaskState, TaskStatus
from django.utils import timezone
from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from holds.models import Hold, Invocation
from tests import factories
from tests.frameworks.a2a_server import a2a_app
from tests.frameworks.asgi import Served
from tests.frameworks.protocol_drive import ProtocolDrive
from tests.processes import free_port, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_redis]


def data_of(message) -> dict:
    return next(json_format.MessageToDict(p.data) for p in message.parts if p.WhichOneof("content") == "data")


class Payments(AgentExecutor):
    """Asks to approve a payment, then pays per the follow-up's `{approved, data, comment}`."""

    def __init__(self):
        self.inputs, self.decisions, self.mode = [], [], "ok"
        self.delay = 0.0  # seconds from taking a start (its task stored, submitted) to asking for input

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        up = TaskUpdater(event_queue=event_queue, task_id=context.task_id, context_id=context.context_id)
        if context.current_task is None:
            self.inputs.append(data_of(context.message))
            await event_queue.enqueue_event(
                Task(
                    id=context.task_id,
                    context_id=context.context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    history=[context.message],
                )
            )
            if self.mode == "fail":
                await up.failed(message=up.new_agent_message(parts=[Part(text="the ledger is closed")]))
                return
            await asyncio.sleep(self.delay)
            question = Part()
            question.data.struct_value.update({"invoice": "INV-1", "amount": 120})
            await up.requires_input(message=up.new_agent_message(parts=[Part(text="Pay INV-1 120?"), question]))
            return
        decision = data_of(context.message)
        self.decisions.append({"decision": decision, "text": context.get_user_input()})
        if self.mode == "later":
            # The agent takes the follow-up and answers `working`; it pays a moment later, on its own.
            await up.start_work()
            self.later = asyncio.create_task(self.pay_later(up, decision))
            return
        if decision["approved"]:
            paid = Part()
            paid.data.struct_value.update(decision["data"])
            await up.add_artifact(parts=[paid], name="payment", last_chunk=True)
            await up.complete()
        else:
            await up.reject(message=up.new_agent_message(parts=[Part(text=f"not paid: {decision['comment']}")]))

    async def pay_later(self, up: TaskUpdater, decision: dict) -> None:
        await asyncio.sleep(1)
        paid = Part()
        paid.data.struct_value.update(decision["data"])
        await up.add_artifact(parts=[paid], name="payment", last_chunk=True)
        await up.complete()

    async def cancel(self, context, event_queue):
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class Agent:
    def __init__(self):
        self.executor = Payments()
        self.pushes: list[tuple[str, int]] = []
        port = free_port()

        async def seen(response):
            self.pushes.append((str(response.request.url), response.status_code))

        pushes = httpx.AsyncClient(event_hooks={"response": [seen]})
        app = a2a_app(self.executor, name="payments", url=f"http://127.0.0.1:{port}/a2a", push_client=pushes)
        self.served = Served(app, "/.well-known/agent-card.json", port=port)
        self.url = f"http://127.0.0.1:{self.served.port}"


@pytest.fixture
def agent(monkeypatch):
    made = Agent()
    yield made
    made.served.stop()


class Drive(ProtocolDrive):
    protocol = "a2a"
    input = {"invoice": "INV-1"}
    settle_seconds = 30


def test_it_turns_input_required_into_a_hold_and_approves_on_the_same_task(service, agent):
    drive = Drive(service, agent)
    run_id = drive.start()
    hold = drive.hold(run_id)
    assert agent.executor.inputs == [{"invoice": "INV-1"}]
    (item,) = hold["items"]
    assert item["title"] == "Pay INV-1 120?" and item["data"] == {"invoice": "INV-1", "amount": 120}
    drive.decide(hold, [{"id": "input", "action": "approve"}])
    run = drive.settled(run_id, ("completed", "failed"))
    assert run["status"] == "completed", run
    assert agent.executor.decisions == [
        {
            "decision": {"approved": True, "data": {"invoice": "INV-1", "amount": 120}, "comment": None},
            "text": "approve",
        }
    ]
    assert run["output"] == {
        "artifacts": [{"name": "payment", "parts": [{"data": {"invoice": "INV-1", "amount": 120}}]}]
    }
    # The agent's own pushes reached Review Queue with the token it was given: none refused.
    wait_until(lambda: agent.pushes, 10, "the agent's pushes")
    assert all(status in (200, 202) for _, status in agent.pushes), agent.pushes


def test_it_sends_an_edit_as_the_data_and_fails_the_run_when_the_agent_rejects_the_task(service, agent):
    drive = Drive(service, agent)
    run_id = drive.start()
    hold = drive.hold(run_id)
    drive.decide(hold, [{"id": "input", "action": "edit", "data": {"invoice": "INV-1", "amount": 99}}])
    assert drive.settled(run_id, ("completed", "failed"))["output"]["artifacts"][0]["parts"] == [
        {"data": {"invoice": "INV-1", "amount": 99}}
    ]

    run_id = drive.start()
    drive.decide(drive.hold(run_id), [{"id": "input", "action": "reject", "comment": "duplicate"}])
    run = drive.settled(run_id, ("completed", "failed"))
    assert run["status"] == "failed" and run["error"] == "the A2A task was rejected: not paid: duplicate"
    assert agent.executor.decisions[-1]["decision"] == {
        "approved": False,
        "data": {"invoice": "INV-1", "amount": 120},
        "comment": "duplicate",
    }


def test_it_tells_the_agent_when_the_hold_expired(service, agent):
    drive = Drive(service, agent)
    run_id = drive.start()
    drive.hold(run_id)
    Hold.objects.filter(run__capability__name=drive.name).update(expires_at=timezone.now())
    run = drive.settled(run_id, ("completed", "failed"))
    assert agent.executor.decisions[-1]["decision"] == {
        "approved": False,
        "data": None,
        "comment": "expired: nobody decided in time",
    }
    assert run["status"] == "failed"


def test_it_fails_the_run_when_the_task_fails(service, agent):
    agent.executor.mode = "fail"
    drive = Drive(service, agent)
    run = drive.settled(drive.start())
    assert run["status"] == "failed" and run["error"] == "the A2A task was failed: the ledger is closed"


def test_it_refuses_a_push_with_a_wrong_token_an_unknown_run_or_task_and_takes_a_replay_once(service, agent):
    from holds.auth import push_token_for
    from holds.models import Run

    drive = Drive(service, agent)
    run_id = drive.start()
    drive.hold(run_id)
    run = Run.objects.get(capability__name=drive.name)
    task_id = Invocation.objects.get(run=run, kind="start").answer["a2a"]["task_id"]
    push = f"{service}/v0/a2a/runs/{run_id}/push"
    good = {"x-a2a-notification-token": push_token_for(run)}
    body = {"statusUpdate": {"taskId": task_id, "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}}
    assert httpx.post(push, json=body, headers={"x-a2a-notification-token": "nope"}).status_code == 401
    assert httpx.post(push, json=body).status_code == 401
    assert httpx.post(f"{service}/v0/a2a/runs/r_999999/push", json=body, headers=good).status_code == 404
    unknown = {"statusUpdate": {"taskId": "not-a-task", "status": {}}}
    answer = httpx.post(push, json=unknown, headers=good)
    assert answer.status_code == 404 and answer.json()["error"] == "not_found"
    assert httpx.post(push, content=b"{", headers=good).status_code == 400
    assert httpx.post(push, json={"hello": 1}, headers=good).status_code == 422
    # A replayed push for the held task wakes nothing (the run waits on a person) and changes nothing.
    for _ in range(2):
        answer = httpx.post(push, json=body, headers=good)
        assert answer.status_code == 202 and answer.json() == {"status": "ignored"}
    assert drive.run(run_id)["status"] == "held"


def test_it_fails_the_run_on_an_agent_without_a_card_and_retries_an_answer_that_is_not_json_rpc(service, agent):
    drive = Drive(service, agent)
    no_card = factories.capability(
        name=drive.name + "-x", endpoint=f"{service}/nothing-here", protocol="a2a", timeout_seconds=5.0
    )
    answer = drive.api.post("/v0/runs", json={"capability": no_card.name, "input": {}})
    run = drive.settled(answer.json()["run_id"])
    assert run["status"] == "failed" and "HTTP 404" in run["error"]

    # A card whose JSON-RPC URL answers a web page: a failed attempt, retried; the run goes on waiting.
    port = free_port()
    card = AgentCard(
        name="web page",
        capabilities=AgentCapabilities(push_notifications=True),
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", protocol_version="1.0", url=f"http://127.0.0.1:{port}/rpc")
        ],
    )

    async def page(request):
        return HTMLResponse("<html>hello</html>")

    app = Starlette(routes=[*create_agent_card_routes(agent_card=card), Route("/rpc", page, methods=["POST"])])
    served = Served(app, "/.well-known/agent-card.json", port=port)
    try:
        html = factories.capability(name=drive.name + "-h", endpoint=served.url, protocol="a2a", timeout_seconds=5.0)
        run_id = drive.api.post("/v0/runs", json={"capability": html.name, "input": {}}).json()["run_id"]
        invocation = wait_until(
            lambda: Invocation.objects.filter(run__capability=html, attempts__gte=2, last_error__gt="").first(),
            30,
            "two failed attempts",
        )
        assert invocation.last_error.startswith("not A2A: the answer is not JSON"), invocation.last_error
        assert drive.run(run_id)["status"] == "running"
    finally:
        served.stop()


def test_a_task_the_agent_goes_on_working_on_is_followed_by_its_push(service, agent):
    drive = Drive(service, agent)
    run_id = drive.start()
    hold = drive.hold(run_id)
    agent.executor.mode = "later"
    drive.decide(hold, [{"id": "input", "action": "approve"}])
    resume = wait_until(
        lambda: Invocation.objects.filter(
            kind="resume", run__capability__name=drive.name, answer__isnull=False
        ).first(),
        30,
        "the working answer",
    )
    run = drive.settled(run_id, ("completed", "failed"))
    assert run["status"] == "completed", run
    assert run["output"]["artifacts"][0]["parts"] == [{"data": {"invoice": "INV-1", "amount": 120}}]
    outcomes = list(resume.delivery_attempts.order_by("number").values_list("outcome", flat=True))
    assert outcomes[0] == "working" and outcomes[-1] == "answered", outcomes
    # The agent's push of its progress woke the waiting invocation (200 "woken"; 202 is "nothing waits").
    assert 200 in [status for _, status in agent.pushes] and {s for _, s in agent.pushes} <= {200, 202}
