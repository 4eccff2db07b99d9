"""An AG-UI capability (protocol: ag-ui) through the real service: the agent is built with the official
`ag-ui-protocol` package (its models and EventEncoder) on Starlette, and pauses with interrupts.
Approve, edit, reject and expiry reach it as an AG-UI resume on the same thread; bad streams are errors."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from ag_ui.core import (
    Interrupt,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from ag_ui.encoder import EventEncoder
from django.utils import timezone
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from holds.models import Hold, Invocation
from tests.frameworks.asgi import Served
from tests.frameworks.protocol_drive import ProtocolDrive
from tests.processes import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_redis]

SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "editedArgs": {"type": "object"}},
    "required": ["approved"],
}


class Agent:
    """A payment agent: its first run proposes `pay(invoice, amount)` and interrupts for approval; a run
    with `resume` pays per the answer and finishes with its state. `mode` breaks it on purpose."""

    def __init__(self, interrupts=1, expires_in=None):
        self.inputs: list[RunAgentInput] = []
        self.mode = "ok"
        self.cut_resumes = 0  # resume streams to stop before RUN_FINISHED
        self.interrupts = interrupts
        self.expires_in = expires_in
        app = Starlette(routes=[Route("/agent", self.run, methods=["POST"])])
        self.served = Served(app, "/agent")
        self.url = self.served.url + "/agent"

    async def run(self, request: Request):
        run_input = RunAgentInput.model_validate(await request.json())
        self.inputs.append(run_input)
        if self.mode == "json":
            return JSONResponse({"status": "completed", "output": {}})
        encoder = EventEncoder(accept=request.headers.get("accept"))
        return StreamingResponse(
            (encoder.encode(e) if not isinstance(e, str) else e for e in self.events(run_input)),
            media_type=encoder.get_content_type(),
        )

    def events(self, run_input: RunAgentInput):
        thread, run = run_input.thread_id, run_input.run_id
        yield RunStartedEvent(thread_id=thread, run_id=run)
        if run_input.resume and self.cut_resumes:
            self.cut_resumes -= 1
            return
        if run_input.resume:
            paid = [{"interrupt": r.interrupt_id, "status": r.status, "payload": r.payload} for r in run_input.resume]
            yield StateSnapshotEvent(snapshot={"paid": paid})
            yield RunFinishedEvent(thread_id=thread, run_id=run, outcome=RunFinishedSuccessOutcome())
            return
        if self.mode == "error":
            yield RunErrorEvent(message="the ledger is closed", code="LEDGER")
            return
        interrupts = []
        for n in range(1, self.interrupts + 1):
            call = f"call_pay_{n}"
            yield ToolCallStartEvent(tool_call_id=call, tool_call_name="pay", parent_message_id="m1")
            yield ToolCallArgsEvent(tool_call_id=call, delta=json.dumps({"invoice": f"INV-{n}", "amount": 120 * n}))
            yield ToolCallEndEvent(tool_call_id=call)
            expires = None
            if self.expires_in:
                expires = (datetime.now(UTC) + timedelta(seconds=self.expires_in)).isoformat()
            interrupts.append(
                Interrupt(
                    id=f"int-{n}",
                    reason="tool_call",
                    message=f"Pay INV-{n} {120 * n}?",
                    tool_call_id=call,
                    response_schema=SCHEMA,
                    expires_at=expires,
                )
            )
        if self.mode == "cut":
            return  # the stream stops before RUN_FINISHED
        if self.mode == "no-id":
            finished = RunFinishedEvent(
                thread_id=thread, run_id=run, outcome=RunFinishedInterruptOutcome(interrupts=interrupts)
            ).model_dump(by_alias=True, exclude_none=True, mode="json")
            del finished["outcome"]["interrupts"][0]["id"]
            yield f"data: {json.dumps(finished)}\n\n"
            return
        yield RunFinishedEvent(thread_id=thread, run_id=run, outcome=RunFinishedInterruptOutcome(interrupts=interrupts))


class Drive(ProtocolDrive):
    protocol = "ag-ui"
    input = {"task": "pay the invoices"}
    settle_seconds = 60


@pytest.fixture
def agents():
    made = []

    def make(**kwargs) -> Agent:
        made.append(Agent(**kwargs))
        return made[-1]

    yield make
    for agent in made:
        agent.served.stop()


def test_it_turns_interrupts_into_one_hold_and_resumes_the_thread_on_approve(service, agents):
    agent = agents(interrupts=2)
    drive = Drive(service, agent)
    run_id = drive.start()
    hold = drive.hold(run_id)
    assert [i["id"] for i in hold["items"]] == ["int-1", "int-2"]
    first = hold["items"][0]
    assert first["title"] == "Pay INV-1 120?"
    assert first["schema"] == SCHEMA
    assert first["data"] == {"approved": True, "editedArgs": {"invoice": "INV-1", "amount": 120}}
    assert "call_pay_1" in first["details"] and "tool_call" in first["details"]
    start = agent.inputs[0]
    assert start.thread_id == run_id and json.loads(start.messages[0].content) == {"task": "pay the invoices"}

    drive.decide(hold, [{"id": "int-1", "action": "approve"}, {"id": "int-2", "action": "approve"}])
    run = drive.settled(run_id, ("completed", "failed"))
    assert run["status"] == "completed", run
    resumed = agent.inputs[-1]
    assert resumed.thread_id == run_id and resumed.run_id != start.run_id
    # The conversation goes back with the resume: the proposed tool calls, as an AG-UI client keeps them.
    calls = [c.id for m in resumed.messages for c in (getattr(m, "tool_calls", None) or [])]
    assert calls == ["call_pay_1", "call_pay_2"]
    assert [(r.interrupt_id, r.status, r.payload) for r in resumed.resume] == [
        ("int-1", "resolved", {"approved": True, "editedArgs": {"invoice": "INV-1", "amount": 120}}),
        ("int-2", "resolved", {"approved": True, "editedArgs": {"invoice": "INV-2", "amount": 240}}),
    ]
    assert run["output"] == {
        "paid": [{"interrupt": r.interrupt_id, "status": "resolved", "payload": r.payload} for r in resumed.resume]
    }


def test_it_sends_an_edit_as_the_payload_and_a_reject_as_cancelled(service, agents):
    agent = agents(interrupts=2)
    drive = Drive(service, agent)
    run_id = drive.start()
    hold = drive.hold(run_id)
    edited = {"approved": True, "editedArgs": {"invoice": "INV-1", "amount": 99}}
    drive.decide(
        hold,
        [{"id": "int-1", "action": "edit", "data": edited}, {"id": "int-2", "action": "reject", "comment": "dup"}],
    )
    assert drive.settled(run_id, ("completed", "failed"))["status"] == "completed"
    assert [(r.interrupt_id, r.status, r.payload) for r in agent.inputs[-1].resume] == [
        ("int-1", "resolved", edited),
        ("int-2", "cancelled", {"approved": False, "reason": "dup"}),
    ]


def test_it_refuses_an_edit_that_breaks_the_response_schema(service, agents):
    drive = Drive(service, agents())
    hold = drive.hold(drive.start())
    response = drive.api.post(
        f"/v0/holds/{hold['hold_id']}/decision",
        json={"items": [{"id": "int-1", "action": "edit", "data": {"approved": "yes"}}]},
    )
    assert response.status_code == 422, response.text


def test_it_takes_the_expiry_from_expires_at_and_cancels_every_interrupt_when_the_hold_expires(service, agents):
    agent = agents(interrupts=2, expires_in=3600)
    drive = Drive(service, agent)
    run_id = drive.start()
    hold = drive.hold(run_id)
    expires_at = datetime.fromisoformat(hold["expires_at"])
    assert timedelta(minutes=58) < expires_at - timezone.now() <= timedelta(hours=1)
    Hold.objects.filter(run__capability__name=drive.name).update(expires_at=timezone.now())  # due now
    assert drive.settled(run_id, ("completed", "failed"))["status"] == "completed"
    assert [(r.interrupt_id, r.status) for r in agent.inputs[-1].resume] == [
        ("int-1", "cancelled"),
        ("int-2", "cancelled"),
    ]


def test_it_fails_the_run_on_run_error(service, agents):
    agent = agents()
    agent.mode = "error"
    drive = Drive(service, agent)
    run = drive.settled(drive.start())
    assert run["status"] == "failed" and run["error"] == "RUN_ERROR (LEDGER): the ledger is closed"


def test_it_fails_the_run_on_an_interrupt_without_an_id(service, agents):
    agent = agents()
    agent.mode = "no-id"
    drive = Drive(service, agent)
    run = drive.settled(drive.start())
    assert run["status"] == "failed", run
    assert "broke the AG-UI protocol" in run["error"] and "id" in run["error"]


@pytest.mark.parametrize(
    ("mode", "error"),
    [("cut", "the event stream ended before RUN_FINISHED"), ("json", "not an AG-UI event stream")],
)
def test_it_retries_a_stream_that_stops_or_is_not_ag_ui_and_goes_on_once_the_agent_answers(
    service, agents, mode, error
):
    agent = agents()
    agent.mode = mode
    drive = Drive(service, agent)
    run_id = drive.start()
    invocation = wait_until(
        lambda: Invocation.objects.filter(run__capability__name=drive.name, attempts__gte=1, last_error__gt="").first(),
        30,
        "a failed attempt",
    )
    assert error in invocation.last_error
    assert drive.run(run_id)["status"] == "running"
    agent.mode = "ok"
    hold = drive.hold(run_id)  # the next attempt (the retry schedule's) reaches the agent
    assert [i["id"] for i in hold["items"]] == ["int-1"]


def test_a_resume_whose_stream_stops_is_sent_again_and_the_decision_is_not_lost(service, agents):
    agent = agents()
    agent.cut_resumes = 1
    drive = Drive(service, agent)
    run_id = drive.start()
    drive.decide(drive.hold(run_id), [{"id": "int-1", "action": "reject", "comment": "not this one"}])
    run = drive.settled(run_id, ("completed", "failed"))
    assert run["status"] == "completed", run
    resumes = [i for i in agent.inputs if i.resume]
    assert len(resumes) == 2 and resumes[0].run_id == resumes[1].run_id  # the same AG-UI run, sent again
    assert [(r.interrupt_id, r.status, r.payload) for r in resumes[1].resume] == [
        ("int-1", "cancelled", {"approved": False, "reason": "not this one"})
    ]
