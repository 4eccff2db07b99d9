"""AG-UI and A2A capabilities keep delivery's guarantees: a worker lost after the agent paused (its lease
runs out, another worker sends again) asks no second hold, and a decision's resume goes out once; an A2A
start sent again after a send whose answer was lost adopts the task the first send made, and makes none.
Delivered in process (holds.delivery.deliver) to the agents of tests/frameworks (official packages)."""

import time
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from holds import delivery, services
from holds.auth import actor_for_account
from holds.models import Hold, Invocation, Run
from tests import factories
from tests.frameworks.test_a2a_protocol import Agent as A2AAgent
from tests.frameworks.test_ag_ui_protocol import Agent as AgUiAgent

pytestmark = pytest.mark.django_db(transaction=True)


def lose_the_worker_after_the_agent_answered(monkeypatch, invocation_id: str) -> None:
    """One attempt whose worker dies before it records the answer; then its lease runs out."""
    record = services.invocation_record

    def dies(**kwargs):
        raise RuntimeError("the worker died")

    monkeypatch.setattr(services, "invocation_record", dies)
    with pytest.raises(RuntimeError):
        delivery.deliver(invocation_id)
    monkeypatch.setattr(services, "invocation_record", record)
    Invocation.objects.filter(pk=invocation_id).update(lease_until=timezone.now() - timedelta(seconds=1))


def decide(hold: Hold, items: list[dict]) -> Invocation:
    account, _ = factories.account("reviewer", role="member")
    services.hold_decide(hold_id=hold.pk, actor=actor_for_account(account), body={"items": items})
    return Invocation.objects.get(hold=hold)


@pytest.mark.parametrize("protocol", ["ag-ui", "a2a"])
def test_a_replayed_pause_asks_no_second_hold_and_the_resume_goes_once(monkeypatch, protocol):
    agent = AgUiAgent(interrupts=1) if protocol == "ag-ui" else A2AAgent()
    try:
        cap = factories.capability(name="paying", endpoint=agent.url, protocol=protocol, timeout_seconds=10.0)
        run = factories.start_run(cap)
        start = Invocation.objects.get(run=run)
        lose_the_worker_after_the_agent_answered(monkeypatch, start.id)
        assert Hold.objects.filter(run=run).count() == 1  # the lost attempt asked it

        assert delivery.deliver(start.id) == "answered"
        hold = Hold.objects.get(run=run)
        assert Run.objects.get(pk=run.pk).status == "held"
        resume = decide(hold, [{"id": hold.items.get().item_id, "action": "approve"}])
        assert delivery.deliver(resume.id) == "answered"
        assert delivery.deliver(resume.id) == "not-due"
        assert Run.objects.get(pk=run.pk).status == "completed"
        if protocol == "ag-ui":
            assert [bool(i.resume) for i in agent.inputs] == [False, False, True]
            assert agent.inputs[0].run_id == agent.inputs[1].run_id == start.id  # the same AG-UI run again
        else:
            # The re-send found the task the lost attempt made (ListTasks by the run's context): one task.
            assert len(agent.executor.inputs) == 1 and len(agent.executor.decisions) == 1
            assert [t["id"] for t in agent_tasks(agent)] == [start_task(run)]
    finally:
        agent.served.stop()


def agent_tasks(agent: A2AAgent) -> list[dict]:
    """Every task the A2A agent holds, through its own ListTasks."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    answer = httpx.post(agent.url + "/a2a", json=body, headers={"a2a-version": "1.0"}, timeout=10).json()
    return answer["result"].get("tasks", [])


def start_task(run: Run) -> str:
    return Invocation.objects.get(run=run, kind=Invocation.Kind.START).answer["a2a"]["task_id"]


def due_now(invocation: Invocation) -> None:
    Invocation.objects.filter(pk=invocation.pk).update(next_attempt_at=timezone.now())


def test_an_a2a_start_sent_again_after_its_answer_was_lost_makes_no_second_task():
    """The agent takes the start (its task stored) but asks for input only after the capability's timeout:
    the first send times out with no answer, and the retry, while the agent is still at it, must not
    send the start again (the agent would make a second task: a start names none). It adopts the task
    by the run's context (ListTasks), follows it (`working`, then GetTask) to its question: one task,
    one hold, one decision at the agent."""
    agent = A2AAgent()
    agent.executor.delay = 2.0
    try:
        cap = factories.capability(name="paying", endpoint=agent.url, protocol="a2a", timeout_seconds=1.0)
        run = factories.start_run(cap, input={"invoice": "INV-1"})
        start = Invocation.objects.get(run=run)
        assert delivery.deliver(start.id) == "retry"
        assert "no answer within" in Invocation.objects.get(pk=start.pk).last_error
        assert agent.executor.inputs == [{"invoice": "INV-1"}]  # it reached the agent

        due_now(start)
        assert delivery.deliver(start.id) == "working"  # the task found, still submitted
        (task,) = agent_tasks(agent)
        assert Invocation.objects.get(pk=start.pk).answer["a2a"] == {
            "task_id": task["id"],
            "context_id": f"rq-{start.id}",
        }
        assert Hold.objects.filter(run=run).count() == 0

        deadline = time.monotonic() + 10
        while agent_tasks(agent)[0]["status"]["state"] != "TASK_STATE_INPUT_REQUIRED":
            assert time.monotonic() < deadline, agent_tasks(agent)
            time.sleep(0.1)
        due_now(start)
        assert delivery.deliver(start.id) == "answered"
        assert Run.objects.get(pk=run.pk).status == "held"
        hold = Hold.objects.get(run=run)

        resume = decide(hold, [{"id": hold.items.get().item_id, "action": "approve"}])
        assert delivery.deliver(resume.id) == "answered"
        assert Run.objects.get(pk=run.pk).status == "completed"
        assert len(agent.executor.inputs) == 1 and len(agent.executor.decisions) == 1
        assert [t["id"] for t in agent_tasks(agent)] == [task["id"]] == [start_task(run)]
    finally:
        agent.served.stop()


def test_an_a2a_agent_that_cannot_list_tasks_gets_the_start_again(monkeypatch):
    """The limit decisions.md names: without ListTasks (A2A's unsupported operation) the re-send is sent,
    and the run goes on with the task it makes."""
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.utils.errors import UnsupportedOperationError

    async def unsupported(self, params, context):
        raise UnsupportedOperationError("ListTasks is not offered")

    monkeypatch.setattr(DefaultRequestHandler, "on_list_tasks", unsupported)
    agent = A2AAgent()
    agent.executor.delay = 2.0
    try:
        cap = factories.capability(name="paying", endpoint=agent.url, protocol="a2a", timeout_seconds=1.0)
        run = factories.start_run(cap, input={"invoice": "INV-1"})
        start = Invocation.objects.get(run=run)
        assert delivery.deliver(start.id) == "retry"
        agent.executor.delay = 0.0
        due_now(start)
        assert delivery.deliver(start.id) == "answered"
        assert Run.objects.get(pk=run.pk).status == "held" and Hold.objects.filter(run=run).count() == 1
        assert len(agent.executor.inputs) == 2
    finally:
        agent.served.stop()


def test_a_claim_says_whether_an_earlier_attempt_was_sent():
    """What makes an A2A start look for the task of an earlier send: not on its first claim, nor after a
    claim handed back unsent (deferred), but after a send whose lease ran out."""
    cap = factories.capability(name="paying", endpoint="http://127.0.0.1:9", protocol="a2a")
    start = Invocation.objects.get(run=factories.start_run(cap))
    first = services.invocation_claim(invocation_id=start.id)
    assert (first.attempt, first.sent_before) == (1, False)
    services.invocation_defer(invocation_id=start.id, attempt=1, wait=0, reason="deferred: busy")
    again = services.invocation_claim(invocation_id=start.id)
    assert (again.attempt, again.sent_before) == (1, False)
    Invocation.objects.filter(pk=start.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    taken_over = services.invocation_claim(invocation_id=start.id)
    assert (taken_over.attempt, taken_over.sent_before) == (2, True)
