"""AG-UI and A2A capabilities keep delivery's guarantees: a worker lost after the agent paused (its lease
runs out, another worker sends again) asks no second hold, and a decision's resume goes out once.
Delivered in process (holds.delivery.deliver) to the agents of tests/frameworks (official packages)."""

from datetime import timedelta

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
            assert len(agent.executor.inputs) == 2 and len(agent.executor.decisions) == 1
    finally:
        agent.served.stop()
