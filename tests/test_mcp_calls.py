"""holds/services/mcp_calls.py: an MCP call as a run of one hold, through the services alone."""

from datetime import timedelta

import pytest
from django.utils import timezone

from holds import services
from holds.auth import actor_for_account, actor_for_user
from holds.errors import Invalid
from holds.models import Hold, Invocation, Run
from holds.services.mcp_calls import mcp_call_ask, mcp_call_claim, mcp_call_finish, mcp_call_output
from tests import factories

pytestmark = pytest.mark.django_db
ASK = {"intent": "Allow Bash?", "items": [{"id": "call", "title": "Bash", "data": {"command": "ls"}}]}


@pytest.fixture
def actor():
    factories.capability(name="mcp", endpoint="http://127.0.0.1:9")
    return actor_for_account(factories.account("bot")[0])


def ask(actor, key="mcp:k1", body=ASK):
    return mcp_call_ask(capability_name="mcp", actor=actor, input={"tool_name": "Bash"}, ask=body, key=key)


def test_a_call_is_a_held_run_whose_start_is_never_sent(actor):
    held = ask(actor)
    run = Run.objects.get(pk=held.run_id)
    assert run.status == "held" and Hold.objects.get(pk=held.hold_id).status == "pending"
    (start,) = Invocation.objects.filter(run=run)
    assert (start.status, start.lease_until, start.attempts) == ("delivering", None, 0)
    assert start.id not in services.invocations_due()  # the relay never hands it out


def test_a_retry_is_the_same_run_and_hold_and_only_one_acts(actor):
    first, again = ask(actor), ask(actor)
    assert first == again and Run.objects.count() == 1 and Hold.objects.count() == 1
    reviewer = actor_for_user(factories.person("rev"))
    services.hold_decide(hold_id=first.hold_id, actor=reviewer, body={"items": [{"id": "call", "action": "approve"}]})
    assert Invocation.objects.get(kind="resume").status == "waiting"  # the call answers, not a resume
    assert [mcp_call_claim(run_id=first.run_id) for _ in range(3)] == [True, False, False]
    assert mcp_call_output(run_id=first.run_id) == (False, None)
    mcp_call_finish(run_id=first.run_id, answer={"behavior": "allow"})
    mcp_call_finish(run_id=first.run_id, answer={"behavior": "deny"})  # a second finish changes nothing
    assert mcp_call_output(run_id=first.run_id) == (True, {"behavior": "allow"})
    statuses = dict(Invocation.objects.values_list("kind", "status"))
    assert statuses == {"start": "answered", "resume": "cancelled"}


def test_a_bad_ask_writes_nothing(actor):
    with pytest.raises(Invalid):
        ask(actor, body={"intent": "Allow?", "items": []})
    with pytest.raises(Invalid):
        mcp_call_ask(capability_name="nope", actor=actor, input={}, ask=ASK, key=None)
    assert Run.objects.count() == 0 and Hold.objects.count() == 0 and Invocation.objects.count() == 0


def test_the_same_key_with_another_input_is_refused(actor):
    ask(actor)
    with pytest.raises(Invalid):
        mcp_call_ask(capability_name="mcp", actor=actor, input={"tool_name": "Write"}, ask=ASK, key="mcp:k1")
    assert Run.objects.count() == 1


def test_with_a_window_a_key_names_a_call_until_it_is_over(actor):
    window = timedelta(seconds=300)
    reviewer = actor_for_user(factories.person("rev"))

    def windowed():
        return mcp_call_ask(
            capability_name="mcp", actor=actor, input={"tool_name": "Bash"}, ask=ASK, key="mcp:w", window=window
        )

    first = windowed()
    services.hold_decide(hold_id=first.hold_id, actor=reviewer, body={"items": [{"id": "call", "action": "approve"}]})
    long_ago = timezone.now() - timedelta(seconds=301)
    Hold.objects.filter(pk=first.hold_id).update(decided_at=long_ago)
    assert mcp_call_claim(run_id=first.run_id)
    assert windowed() == first  # settled long ago, but its answer is being acted on: still that call
    mcp_call_finish(run_id=first.run_id, answer={"behavior": "allow"})
    Hold.objects.filter(pk=first.hold_id).update(decided_at=timezone.now() - timedelta(seconds=299))
    assert windowed() == first  # answered, within the window: a retry whose answer was lost
    Hold.objects.filter(pk=first.hold_id).update(decided_at=long_ago)
    second = windowed()  # answered, past the window: a new call
    assert second.run_id != first.run_id and Hold.objects.get(pk=second.hold_id).status == "pending"
    assert windowed() == second and Run.objects.count() == 2
