"""Quorum (SPEC "Quorum and separation of duties"), through HTTP and the services: N distinct approvals
decide, any reject decides at once, nobody counts twice, the run's starter never counts."""

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from holds import services
from holds.auth import actor_for_account, actor_for_invocation, actor_for_user
from holds.errors import Conflict, Forbidden, Invalid
from holds.models import AuditEvent, AuditKind, Hold, Invocation
from tests import factories

pytestmark = pytest.mark.django_db

APPROVE = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
REJECT = {"items": [{"id": "INV-1", "action": "reject"}, {"id": "INV-2", "action": "approve"}], "comment": "no"}
EDITED = {"payee": "Payee 1", "amount": "90.00"}
EDIT = {"items": [{"id": "INV-1", "action": "edit", "data": EDITED}, {"id": "INV-2", "action": "approve"}]}
QUORUM = {"approvals": 2, "from": ["member", "admin"]}


@pytest.fixture
def keys(db):
    return [factories.account(f"bot{n}", role="member")[1] for n in range(3)]


@pytest.fixture
def qcap(keys):
    return factories.capability("pay_big", quorum=QUORUM)


def decide(api, hold, body, key):
    return api.post(f"/v0/holds/{hold.public_id}/decision", body, key=key)


def resumes(hold):
    return list(Invocation.objects.filter(hold=hold, kind=Invocation.Kind.RESUME))


def test_the_nth_distinct_approval_decides_and_earlier_ones_answer_202(api, qcap, keys):
    _, hold = factories.held_hold(qcap)
    first = decide(api, hold, APPROVE, keys[0])
    assert first.status_code == 202, first.content
    body = first.json()
    assert body["status"] == "pending" and body["needed"] == 2 and body["remaining"] == 1
    assert [a["by"] for a in body["approvals"]] == ["service account bot0"]
    assert resumes(hold) == []
    shown = api.get(f"/v0/holds/{hold.public_id}", key=keys[2]).json()
    assert shown["status"] == "pending" and [a["by"] for a in shown["quorum"]["approvals"]] == ["service account bot0"]
    second = decide(api, hold, APPROVE, keys[1])
    assert second.status_code == 200, second.content
    assert (
        second.json()["status"] == "decided"
        and second.json()["decided_by"] == "service account bot0, service account bot1"
    )
    (resume,) = resumes(hold)
    assert {i["action"] for i in resume.resume["items"]} == {"approve"}
    event = AuditEvent.objects.get(hold_id_ref=hold.pk, kind=AuditKind.HOLD_DECIDED)
    assert event.data["approvals"] == ["service account bot0", "service account bot1"]
    assert decide(api, hold, APPROVE, keys[2]).json()["error"] == "already_decided"


def test_a_repeat_approval_is_409_naming_the_earlier_one(api, qcap, keys):
    _, hold = factories.held_hold(qcap)
    first = decide(api, hold, APPROVE, keys[0])
    again = decide(api, hold, APPROVE, keys[0])
    assert again.status_code == 409
    assert again.json()["error"] == "already_approved"
    assert (
        again.json()["approved_by"] == "service account bot0"
        and again.json()["approved_at"] == first.json()["approvals"][0]["at"]
    )
    assert Hold.objects.get(pk=hold.pk).status == Hold.Status.PENDING and resumes(hold) == []


def test_any_reject_decides_at_once(api, qcap, keys):
    _, hold = factories.held_hold(qcap)
    assert decide(api, hold, APPROVE, keys[0]).status_code == 202
    rejected = decide(api, hold, REJECT, keys[1])
    assert rejected.status_code == 200 and rejected.json()["decided_by"] == "service account bot1"
    (resume,) = resumes(hold)
    assert resume.resume["items"][0]["action"] == "reject"


def test_an_edit_clears_approvals_of_other_data_and_counts_for_its_own(api, qcap, keys):
    _, hold = factories.held_hold(qcap)
    assert decide(api, hold, APPROVE, keys[0]).status_code == 202
    edited = decide(api, hold, EDIT, keys[1])
    assert edited.status_code == 202, edited.content
    assert [a["by"] for a in edited.json()["approvals"]] == ["service account bot1"] and edited.json()["remaining"] == 1
    # bot0 approved other data: its approval was cleared, so it may approve the edited data now.
    done = decide(api, hold, EDIT, keys[0])
    assert done.status_code == 200, done.content
    (resume,) = resumes(hold)
    assert resume.resume["items"][0] == {"id": "INV-1", "action": "edit", "data": EDITED, "comment": None}


def test_approvals_of_different_data_do_not_add_up(api, qcap, keys):
    _, hold = factories.held_hold(qcap)
    assert decide(api, hold, EDIT, keys[0]).status_code == 202
    plain = decide(api, hold, APPROVE, keys[1])
    assert plain.status_code == 202 and plain.json()["remaining"] == 1
    assert decide(api, hold, APPROVE, keys[2]).status_code == 200
    (resume,) = resumes(hold)
    assert resume.resume["items"][0]["action"] == "approve"


def test_the_runs_starter_never_counts_nor_an_ancestors(api, keys):
    starter_account, starter_key = factories.account("starter", role="member")
    cap = factories.capability("pay_big", quorum=QUORUM)
    parent, _ = services.run_start(capability_name=cap.name, input={}, actor=actor_for_account(starter_account))
    parent_invocation, _ = factories.deliver_now(parent)
    child, _ = services.run_start(capability_name=cap.name, input={}, actor=actor_for_invocation(parent_invocation))
    assert child.parent_id == parent.pk
    invocation, _ = factories.deliver_now(child)
    hold = services.hold_ask(invocation=invocation, body=factories.ask_body())
    refused = decide(api, hold, APPROVE, starter_key)
    assert refused.status_code == 403, refused.content
    assert "started this run" in refused.json()["message"]
    assert decide(api, hold, APPROVE, keys[0]).status_code == 202


def test_roles_outside_the_quorum_do_not_count(api, keys):
    factories.person("ann", role="admin")
    factories.person("adam", role="admin")
    cap = factories.capability("pay_big", quorum={"approvals": 2, "from": ["admin"]})
    _, hold = factories.held_hold(cap)
    refused = decide(api, hold, APPROVE, keys[0])
    assert refused.status_code == 403 and "admin" in refused.json()["message"]
    # A member's reject still vetoes: it decides like any decision of someone who may decide.
    assert decide(api, hold, REJECT, keys[0]).status_code == 200


def test_people_count_once_each_through_the_service(keys):
    ann, bob = factories.person("ann", role="member"), factories.person("bob", role="member")
    cap = factories.capability("pay_big", quorum=QUORUM)
    _, hold = factories.held_hold(cap)
    pending = services.hold_decide(hold_id=hold.pk, actor=actor_for_user(ann), body=APPROVE)
    assert pending.status == Hold.Status.PENDING and pending.quorum_state["remaining"] == 1
    with pytest.raises(Conflict) as again:
        services.hold_decide(hold_id=hold.pk, actor=actor_for_user(ann), body=APPROVE)
    assert again.value.code == "already_approved"
    decided = services.hold_decide(hold_id=hold.pk, actor=actor_for_user(bob), body=APPROVE)
    assert decided.status == Hold.Status.DECIDED and decided.decided_by == "ann, bob"
    assert len(resumes(hold)) == 1


def test_a_quorum_larger_than_who_may_decide_is_refused_at_load(tmp_path, keys):
    with pytest.raises(Invalid) as refused:
        factories.capability("pay_big", quorum={"approvals": 4, "from": ["member"]})
    assert "needs 4 approvals but only 3" in refused.value.errors[0]["message"]
    file = tmp_path / "agentos.yaml"
    file.write_text(
        "capabilities:\n  pay_big:\n    endpoint: http://127.0.0.1:9\n    quorum: {approvals: 4, from: [member]}\n"
    )
    with pytest.raises(CommandError, match="needs 4 approvals"):
        call_command("sync_capabilities", str(file))
    file.write_text(
        "capabilities:\n  pay_big:\n    endpoint: http://127.0.0.1:9\n    quorum: {approvals: 0, from: [viewer]}\n"
    )
    with pytest.raises(CommandError, match="key 'quorum'"):
        call_command("sync_capabilities", str(file))


def test_a_rule_then_quorum_requires_it(api, keys):
    cap = factories.capability(
        "pay_rules",
        rules=[{"id": "big", "when": "double(item.data.amount) > 100.5", "then": {"quorum": 2, "from": ["member"]}}],
    )
    _, hold = factories.held_hold(cap)
    # INV-2 (101.00) matches: the hold needs two approvals although the capability alone needs one.
    assert Hold.objects.get(pk=hold.pk).quorum["approvals"] == 2
    assert decide(api, hold, APPROVE, keys[0]).status_code == 202
    assert decide(api, hold, APPROVE, keys[1]).status_code == 200
    _, small = factories.held_hold(cap, body=factories.ask_body(n_items=1))
    assert Hold.objects.get(pk=small.pk).quorum is None
    one = {"items": [{"id": "INV-1", "action": "approve"}]}
    assert decide(api, small, one, keys[0]).status_code == 200


def test_forbidden_before_conflict_for_a_decided_hold(keys):
    cap = factories.capability("pay_big", quorum=QUORUM)
    _, hold = factories.held_hold(cap)
    for key_index in (0, 1):
        services.hold_decide(hold_id=hold.pk, actor=actor_for_account(_account(key_index)), body=APPROVE)
    with pytest.raises((Conflict, Forbidden)) as late:
        services.hold_decide(hold_id=hold.pk, actor=actor_for_account(_account(2)), body=APPROVE)
    assert late.value.code == "already_decided"


def _account(n):
    from holds.models import ServiceAccount

    return ServiceAccount.objects.get(name=f"bot{n}")
