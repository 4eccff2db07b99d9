"""Who may decide, identically in the UI and the API, for people and service accounts:
role (admin/member/viewer) x approvers ([admin] / [admin, member]) x channel (UI/API)
x self_approval (true/false) x who started the run (the decider / someone else).

UI: the browser's confirm POST (/holds/{id}/decision, session + fingerprint), which calls
services.hold_decide with actor_for_user. API: POST /v0/holds/{id}/decision with a key."""

import itertools
import json

import pytest

from holds import services
from holds.auth import SYSTEM, actor_for_account, actor_for_invocation, actor_for_user, decidable_holds, may_decide
from holds.errors import Forbidden
from holds.models import Hold, Invocation
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    # People are made by the dozen here; a slow password hash would only slow the tests.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


ROLES = ("admin", "member", "viewer")
APPROVERS = (("admin",), ("admin", "member"))
CHANNELS = ("ui", "api")
SELF_APPROVAL = (True, False)
STARTERS = ("self", "other")
DECISION = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "reject"}]}


def expected(role, approvers, self_approval, starter) -> bool:
    return role in approvers and (self_approval or starter == "other")


def held_hold_started_by(cap, actor):
    run = factories.start_run(cap, actor=actor)
    invocation, _ = factories.deliver_now(run)
    hold = services.hold_ask(invocation=invocation, body=factories.ask_body())
    factories.answer(invocation, {"status": "suspended", "hold_id": hold.public_id})
    return hold


@pytest.mark.parametrize(
    "role,approvers,channel,self_approval,starter",
    list(itertools.product(ROLES, APPROVERS, CHANNELS, SELF_APPROVAL, STARTERS)),
)
def test_it_decides_only_as_the_matrix_says(client, api, role, approvers, channel, self_approval, starter):
    cap = factories.capability(approvers=list(approvers), self_approval=self_approval)
    if channel == "ui":
        decider = factories.person("decider", role=role)
        actor = actor_for_user(decider)
    else:
        account, key = factories.account("decider-bot", role=role)
        actor = actor_for_account(account)
    hold = held_hold_started_by(cap, actor if starter == "self" else SYSTEM)

    if channel == "ui":
        client.force_login(decider)
        response = client.post(
            f"/holds/{hold.public_id}/decision",
            {"decision": json.dumps(DECISION), "fingerprint": hold.fingerprint},
        )
        status = response.status_code
        allowed_status = 303  # See Other: the browser GETs the hold page
    else:
        response = api.post(f"/v0/holds/{hold.public_id}/decision", DECISION, key=key)
        status = response.status_code
        allowed_status = 200

    hold.refresh_from_db()
    if expected(role, approvers, self_approval, starter):
        assert status == allowed_status, response.content
        assert hold.status == Hold.Status.DECIDED and hold.decided_by == actor.label
        assert Invocation.objects.filter(hold=hold, kind="resume").count() == 1
    else:
        assert status == 403, response.content
        assert hold.status == Hold.Status.PENDING
        assert not Invocation.objects.filter(hold=hold, kind="resume").exists()


def test_it_counts_a_superuser_as_admin_whatever_the_membership_says(client):
    cap = factories.capability(approvers=["admin"])
    root = factories.person("root", role="viewer")
    root.is_superuser = True
    root.save()
    hold = factories.held_hold(cap)[1]
    client.force_login(root)
    response = client.post(
        f"/holds/{hold.public_id}/decision", {"decision": json.dumps(DECISION), "fingerprint": hold.fingerprint}
    )
    assert response.status_code == 303
    hold.refresh_from_db()
    assert hold.status == Hold.Status.DECIDED


def test_it_forbids_self_approval_through_an_ancestor_run(api):
    cap = factories.capability(self_approval=False)
    account, key = factories.account("starter-bot", role="admin")
    parent = factories.start_run(cap, actor=actor_for_account(account))
    parent_invocation, _ = factories.deliver_now(parent)
    child = factories.start_run(cap, actor=actor_for_invocation(parent_invocation))
    invocation, _ = factories.deliver_now(child)
    hold = services.hold_ask(invocation=invocation, body=factories.ask_body())
    assert child.parent_id == parent.pk and child.started_by_account_id is None
    response = api.post(f"/v0/holds/{hold.public_id}/decision", DECISION, key=key)
    assert response.status_code == 403
    other_key = factories.account("other-bot", role="member")[1]
    assert api.post(f"/v0/holds/{hold.public_id}/decision", DECISION, key=other_key).status_code == 200


def test_it_never_lets_a_run_token_decide(api):
    cap = factories.capability()
    run = factories.start_run(cap)
    invocation, token = factories.deliver_now(run)
    hold = services.hold_ask(invocation=invocation, body=factories.ask_body())
    assert api.post(f"/v0/holds/{hold.public_id}/decision", DECISION, token=token).status_code == 403
    with pytest.raises(Forbidden):
        services.hold_decide(hold_id=hold.pk, actor=actor_for_invocation(invocation), body=DECISION)


def test_it_applies_a_role_change_to_the_very_next_decision(api, admin_user):
    cap = factories.capability(approvers=["admin"])
    account, key = factories.account("robot", role="member")
    hold = factories.held_hold(cap)[1]
    assert api.post(f"/v0/holds/{hold.public_id}/decision", DECISION, key=key).status_code == 403
    services.service_account_set_role(account_id=account.pk, role="admin", actor=actor_for_user(admin_user))
    assert api.post(f"/v0/holds/{hold.public_id}/decision", DECISION, key=key).status_code == 200


@pytest.mark.parametrize("starter_kind", ["person", "account"])
def test_a_grandchild_runs_hold_is_neither_listed_nor_decidable_for_who_started_the_grandparent(client, starter_kind):
    # The queue and the decision ask one rule (auth.decidable_holds): a hold two runs down from the
    # run its decider started must be left out of that person's queue, not listed and then refused.
    cap = factories.capability(self_approval=False)
    if starter_kind == "person":
        starter = actor_for_user(factories.person("mona"))
    else:
        starter = actor_for_account(factories.account("starter-bot")[0])
    grandparent = factories.start_run(cap, actor=starter)
    parent = factories.start_run(cap, actor=actor_for_invocation(factories.deliver_now(grandparent)[0]))
    child = factories.start_run(cap, actor=actor_for_invocation(factories.deliver_now(parent)[0]))
    invocation, _ = factories.deliver_now(child)
    hold = services.hold_ask(invocation=invocation, body=factories.ask_body())
    assert (child.parent.parent_id, grandparent.started_by_user_id or grandparent.started_by_account_id) == (
        grandparent.pk,
        (starter.user or starter.account).pk,
    )
    other = actor_for_user(factories.person("ana"))
    hold = Hold.objects.select_related("capability").get(pk=hold.pk)

    queue = Hold.objects.filter(status=Hold.Status.PENDING)
    assert list(decidable_holds(starter, queue, [cap])) == []
    assert not may_decide(starter, hold)
    with pytest.raises(Forbidden):
        services.hold_decide(hold_id=hold.pk, actor=starter, body=DECISION)
    assert list(decidable_holds(other, queue, [cap])) == [hold]
    assert may_decide(other, hold)

    if starter_kind == "person":
        client.force_login(starter.user)
        assert hold.public_id not in client.get("/").content.decode()
        client.force_login(other.user)
        assert hold.public_id in client.get("/").content.decode()
