"""Who may decide, identically in the UI and the API, for people and service accounts:
role (admin/member/viewer) x approvers ([admin] / [admin, member]) x channel (UI/API)
x self_approval (true/false) x who started the run (the decider / someone else).

UI: the browser's confirm POST (/holds/{id}/decision, session + fingerprint), which calls
services.hold_decide with actor_for_user. API: POST /v0/holds/{id}/decision with a key."""

import itertools
import json
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from holds import services
from holds.auth import SYSTEM, actor_for_account, actor_for_invocation, actor_for_user, push_token_for
from holds.errors import Forbidden
from holds.models import DatasetItem, Hold, Invocation, Run
from holds.policy import decidable_holds, may_decide
from tests import factories

pytestmark = pytest.mark.django_db


ROLES = ("admin", "member", "viewer")
APPROVERS = (("admin",), ("admin", "member"))
CHANNELS = ("ui", "api")
SELF_APPROVAL = (True, False)
STARTERS = ("self", "other")
DECISION = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "reject"}]}


def expected(role, approvers, self_approval, starter) -> bool:
    return role in approvers and (self_approval or starter == "other")


def held_hold_started_by(cap, actor):
    run = factories.start_run(cap)
    # Written as the starter directly: a viewer starts no runs (policy.may_start_run), yet may have
    # started this one before their role changed.
    if actor is not SYSTEM:
        Run.objects.filter(pk=run.pk).update(started_by_user=actor.user, started_by_account=actor.account)
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
    # The queue and the decision ask one rule (policy.decidable_holds): a hold two runs down from the
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


# --- every entry point x every kind of actor ------------------------------------------------------
#
# Each URL pattern has rows here: (name, method) -> the actors it lets through. An actor is refused
# when the answer is 401, 403 or 404, a redirect to the sign-in page, or, for the pages that turn a
# refusal into a message on a 303, when the change did not happen (EFFECTS). A URL pattern added
# without a row fails test_every_url_pattern_has_a_row (policy.py is the one place that answers).

ACTORS = ("admin", "member", "member_other", "viewer", "starter", "grandstarter", "account", "token")
PEOPLE = {"admin", "member", "member_other", "viewer", "starter", "grandstarter"}
EVERYONE = set(ACTORS)
DECIDE_UI = {"admin", "member"}  # member_other: admin-only capability; (grand)starter: their own run
DECIDE_API = DECIDE_UI | {"account"}
READ_API = PEOPLE | {"account"}
RECORD = {"admin", "member", "starter", "grandstarter"}  # approvers of the capability (no starter rule)
ADMIN = {"admin"}


class World:
    """Two capabilities without self-approval: `cap` (admin and member approve) and `admin_cap` (admin
    only). In `cap`: a hold two runs below a run `grandstarter` started (its run token live), a hold
    of a run `starter` started; in `admin_cap`, the hold `member_other` is shown. Each lists a file;
    each capability has a dataset with an item and an experiment. Grants need a capability that allows
    self-approval (policy.may_create_grant): `grant_cap` (admin and member approve) and `admin_grant_cap`
    (admin only, member_other's), each with a rule set and a hold an admin decided, its first item
    approved, a grant made from it. `a2a_run`: a run of an A2A capability, its invocation delivering."""

    def __init__(self):
        self.cap = factories.capability(self_approval=False)
        self.admin_cap = factories.capability(name="admin_only", approvers=["admin"], self_approval=False)
        self.people = {
            name: factories.person(name, role=role)
            for name, role in (
                ("admin", "admin"),
                ("member", "member"),
                ("member_other", "member"),
                ("viewer", "viewer"),
                ("starter", "member"),
                ("grandstarter", "member"),
            )
        }
        self.account, self.key = factories.account("robot", role="member")
        grandparent = factories.start_run(self.cap, actor=actor_for_user(self.people["grandstarter"]))
        parent = factories.start_run(self.cap, actor=actor_for_invocation(factories.deliver_now(grandparent)[0]))
        child = factories.start_run(self.cap, actor=actor_for_invocation(factories.deliver_now(parent)[0]))
        self.hold, self.token = self._hold(child)
        self.own_hold = self._hold(factories.start_run(self.cap, actor=actor_for_user(self.people["starter"])))[0]
        self.admin_hold = self._hold(factories.start_run(self.admin_cap))[0]
        services.run_state_put(run=self.hold.run, key="k", value=1, actor=SYSTEM)
        self.datasets = {cap.pk: self._dataset(cap) for cap in (self.cap, self.admin_cap)}
        self.invocation = Invocation.objects.filter(run=self.admin_hold.run).first()
        grant_cap = factories.capability(name="grantable", self_approval=True)
        admin_grant_cap = factories.capability(name="admin_grantable", approvers=["admin"], self_approval=True)
        self.grants = {cap.pk: self._granted(cap) for cap in (grant_cap, admin_grant_cap)}
        self.grant_cap_of = {"member_other": admin_grant_cap}
        self.grant_cap = grant_cap
        a2a = factories.capability(name="a2a_agent", protocol="a2a")
        self.a2a_run = factories.start_run(a2a)
        factories.deliver_now(self.a2a_run)

    def _hold(self, run):
        invocation, token = factories.deliver_now(run)
        run_file = factories.run_file(run)
        hold = services.hold_ask(invocation=invocation, body=factories.ask_body(files=[run_file.public_id]))
        hold.file = run_file
        return hold, token

    def _dataset(self, cap):
        admin = actor_for_user(self.people["admin"])
        dataset = services.dataset_create(name=f"set of {cap.name}", capability_name=cap.name, actor=admin)
        item = services.dataset_item_add(
            dataset=dataset, actor=admin, input={}, recorded_holds=[], expected_output=None
        )
        experiment, _ = services.experiment_start(dataset=dataset, actor=admin)
        return dataset, item, experiment

    def _granted(self, cap):
        admin = actor_for_user(self.people["admin"])
        services.rules_save(capability=cap, rules=[{"id": "a", "when": "true", "then": "ask"}], actor=admin)
        hold = factories.held_hold(cap)[1]
        services.hold_decide(hold_id=hold.pk, actor=admin, body=DECISION)
        grant = services.grant_create(
            capability=cap,
            when="item.data.amount == 1",
            expires_at=timezone.now() + timedelta(days=10),
            actor=admin,
            hold=hold,
            item_id="INV-1",
        )
        return hold, grant

    def grants_of(self, actor: str):
        """(capability, decided hold, grant) the actor works on."""
        cap = self.grant_cap_of.get(actor, self.grant_cap)
        return (cap, *self.grants[cap.pk])

    def hold_of(self, actor: str):
        return {"starter": self.own_hold, "member_other": self.admin_hold}.get(actor, self.hold)

    def evals_of(self, actor: str):
        hold = self.hold_of(actor)
        return self.datasets[hold.capability_id]


def _decision(w, a):
    hold = w.hold_of(a)
    return {"decision": json.dumps(DECISION), "fingerprint": hold.fingerprint}


def _grant_form(w, a):
    expires_on = (timezone.localdate() + timedelta(days=10)).isoformat()
    return {"item": "INV-1", "when": "item.data.amount == 2", "expires_on": expires_on, "save": "1"}


def _grant_body(w, a):
    return {"when": "item.data.amount == 2", "expires_at": (timezone.now() + timedelta(days=10)).isoformat()}


def _away_body(w, a):
    # admin decides everything, so stands in for anyone but themself (the admin's own row: a 422, let through).
    now = timezone.now()
    return {"away_from": now.isoformat(), "away_until": (now + timedelta(days=1)).isoformat(), "delegate": "admin"}


def _extended(w, a):
    hold = w.hold_of(a)
    return Hold.objects.get(pk=hold.pk).expires_at > hold.expires_at


# (name, method) -> (path(world, actor), body(world, actor) or None, allowed actors)
H = lambda w, a: w.hold_of(a).public_id  # noqa: E731
D = lambda w, a: w.evals_of(a)[0].public_id  # noqa: E731
C = lambda w, a: w.grants_of(a)[0].name  # noqa: E731
G = lambda w, a: w.grants_of(a)[2].public_id  # noqa: E731
RULES = {"rules": [{"id": "small", "when": "item.data.amount < 100", "then": "approve"}]}
A2A_PUSH = {"statusUpdate": {"taskId": "task-1", "status": {"state": "TASK_STATE_WORKING"}}}
ROWS = {
    ("login", "GET"): (lambda w, a: "/login/", None, EVERYONE),
    ("logout", "POST"): (lambda w, a: "/logout/", {}, EVERYONE),
    ("queue", "GET"): (lambda w, a: "/", None, PEOPLE),
    ("history", "GET"): (lambda w, a: "/history", None, PEOPLE),
    ("hold", "GET"): (lambda w, a: f"/holds/{H(w, a)}", None, PEOPLE),
    ("hold-review", "POST"): (lambda w, a: f"/holds/{H(w, a)}/review", _decision, DECIDE_UI),
    ("hold-decision", "POST"): (lambda w, a: f"/holds/{H(w, a)}/decision", _decision, DECIDE_UI),
    ("hold-extend", "POST"): (
        lambda w, a: f"/holds/{H(w, a)}/extend",
        lambda w, a: {"expires_in": 7 * 86400, "reason": "more time"},
        DECIDE_UI,
    ),
    ("hold-presence", "POST"): (lambda w, a: f"/holds/{H(w, a)}/presence", {}, DECIDE_UI),
    ("hold-claim", "POST"): (lambda w, a: f"/holds/{H(w, a)}/claim", {}, DECIDE_UI),
    ("hold-by-confidence", "POST"): (lambda w, a: f"/holds/{H(w, a)}/by-confidence", {"threshold": "0.5"}, DECIDE_UI),
    ("calibration", "GET"): (lambda w, a: "/calibration", None, PEOPLE),
    ("calibration-csv", "GET"): (lambda w, a: "/calibration.csv", None, PEOPLE),
    ("file", "GET"): (lambda w, a: f"/files/{w.hold_of(a).file.public_id}", None, PEOPLE),
    ("hold-add-to-dataset", "GET"): (lambda w, a: f"/holds/{H(w, a)}/dataset", None, PEOPLE),
    ("experiments", "GET"): (lambda w, a: "/experiments", None, PEOPLE),
    ("experiment", "GET"): (lambda w, a: f"/experiments/{w.evals_of(a)[2].public_id}", None, PEOPLE),
    ("datasets", "GET"): (lambda w, a: "/datasets", None, PEOPLE),
    ("dataset", "GET"): (lambda w, a: f"/datasets/{D(w, a)}", None, PEOPLE),
    ("dataset-experiment-start", "POST"): (lambda w, a: f"/datasets/{D(w, a)}/experiments", {}, RECORD),
    ("dataset-item-delete", "POST"): (
        lambda w, a: f"/datasets/{D(w, a)}/items/{w.evals_of(a)[1].public_id}/delete",
        {},
        RECORD,
    ),
    ("team", "GET"): (lambda w, a: "/team", None, ADMIN),
    ("team-person-add", "POST"): (lambda w, a: "/team/people", {"username": "newcomer", "role": "member"}, ADMIN),
    ("team-person-role", "POST"): (
        lambda w, a: f"/team/people/{w.people['viewer'].pk}/role",
        {"role": "member"},
        ADMIN,
    ),
    ("team-person-active", "POST"): (
        lambda w, a: f"/team/people/{w.people['viewer'].pk}/active",
        {"active": ""},
        ADMIN,
    ),
    ("team-person-slack", "POST"): (
        lambda w, a: f"/team/people/{w.people['viewer'].pk}/slack",
        {"slack_user_id": "U0VIEWER"},
        ADMIN,
    ),
    # Out of office: every person sets their own (identity from the session); an admin anyone's from
    # the team page. Service accounts and runs have none (SPEC "Escalation and delegation").
    ("away", "GET"): (lambda w, a: "/away", None, PEOPLE),
    ("away", "POST"): (lambda w, a: "/away", {"clear": "1"}, PEOPLE),
    ("team-person-away", "GET"): (lambda w, a: f"/team/people/{w.people['viewer'].pk}/away", None, ADMIN),
    ("team-person-away", "POST"): (
        lambda w, a: f"/team/people/{w.people['viewer'].pk}/away",
        {"clear": "1"},
        ADMIN,
    ),
    ("api-me-away", "GET"): (lambda w, a: "/v0/me/away", None, PEOPLE),
    ("api-me-away", "PUT"): (lambda w, a: "/v0/me/away", _away_body, PEOPLE),
    ("api-me-away", "DELETE"): (lambda w, a: "/v0/me/away", None, PEOPLE),
    ("manifest", "GET"): (lambda w, a: "/manifest.webmanifest", None, EVERYONE),
    ("service-worker", "GET"): (lambda w, a: "/sw.js", None, EVERYONE),
    ("favicon", "GET"): (lambda w, a: "/favicon.ico", None, EVERYONE),
    # Receipts' public keys: a third party verifies a receipt with nothing but these (SPEC, Decision receipts).
    ("jwks", "GET"): (lambda w, a: "/.well-known/jwks.json", None, EVERYONE),
    ("push-subscriptions", "GET"): (lambda w, a: "/push/subscriptions", None, PEOPLE),
    ("push-subscriptions", "POST"): (lambda w, a: "/push/subscriptions", {"endpoint": "https://p.example/x"}, PEOPLE),
    ("team-account-add", "POST"): (lambda w, a: "/team/accounts", {"name": "bot2", "role": "member"}, ADMIN),
    ("team-account-role", "POST"): (lambda w, a: f"/team/accounts/{w.account.pk}/role", {"role": "admin"}, ADMIN),
    ("team-account-revoke", "POST"): (lambda w, a: f"/team/accounts/{w.account.pk}/revoke", {}, ADMIN),
    ("team-capability", "POST"): (
        lambda w, a: f"/team/capabilities/{w.cap.pk}",
        {"approvers": ["admin", "member"]},
        ADMIN,
    ),
    # A set-password link is its own credential (Django's token), for someone not signed in.
    ("team-set-password", "GET"): (lambda w, a: "/team/set-password/MQ/not-a-token", None, EVERYONE),
    ("team-password-set", "GET"): (lambda w, a: "/team/password-set", None, EVERYONE),
    ("audit", "GET"): (lambda w, a: "/audit", None, ADMIN),
    ("audit-csv", "GET"): (lambda w, a: "/audit.csv", None, ADMIN),
    ("ops", "GET"): (lambda w, a: "/ops", None, PEOPLE),
    ("ops-fragment", "GET"): (lambda w, a: "/ops/fragment", None, PEOPLE),
    ("ops-retry", "POST"): (lambda w, a: f"/ops/invocations/{w.invocation.id}/retry", {}, ADMIN),
    ("ops-enable", "POST"): (lambda w, a: f"/ops/capabilities/{w.cap.pk}/enable", {}, ADMIN),
    ("healthz", "GET"): (lambda w, a: "/healthz", None, EVERYONE),
    # Rules decide for everyone: any reader sees them (and backtests an edit), only an admin saves.
    ("capability-rules", "GET"): (lambda w, a: f"/capabilities/{C(w, a)}/rules", None, PEOPLE),
    ("capability-rules", "POST"): (
        lambda w, a: f"/capabilities/{C(w, a)}/rules",
        {"rules": "- id: small\n  when: item.data.amount < 100\n  then: approve\n", "save": "1"},
        ADMIN,
    ),
    # Grants: made by who may decide the item (an approver, self-approval allowed), revoked by any
    # approver or an admin (SPEC "Standing grants"); member_other's are of an admin-only capability.
    ("capability-grant-revoke", "POST"): (lambda w, a: f"/capabilities/{C(w, a)}/grants/{G(w, a)}/revoke", {}, RECORD),
    ("grant-new", "GET"): (lambda w, a: f"/holds/{w.grants_of(a)[1].public_id}/grant?item=INV-1", None, RECORD),
    ("grant-new", "POST"): (lambda w, a: f"/holds/{w.grants_of(a)[1].public_id}/grant", _grant_form, RECORD),
    ("api-holds", "GET"): (lambda w, a: "/v0/holds", None, EVERYONE),
    ("api-holds", "POST"): (lambda w, a: "/v0/holds", lambda w, a: factories.ask_body(), {"token"}),
    ("api-hold", "GET"): (lambda w, a: f"/v0/holds/{H(w, a)}", None, EVERYONE),
    ("api-hold-decision", "POST"): (lambda w, a: f"/v0/holds/{H(w, a)}/decision", DECISION, DECIDE_API),
    ("api-hold-extend", "POST"): (
        lambda w, a: f"/v0/holds/{H(w, a)}/extend",
        {"expires_in": 7 * 86400, "reason": "more time"},
        DECIDE_API,
    ),
    ("api-runs", "POST"): (lambda w, a: "/v0/runs", {"capability": "pay_invoices", "input": {}}, EVERYONE - {"viewer"}),
    ("api-run", "GET"): (lambda w, a: f"/v0/runs/{w.hold.run.public_id}", None, EVERYONE),
    ("api-run-fail", "POST"): (lambda w, a: f"/v0/runs/{w.hold.run.public_id}/fail", {}, ADMIN),
    ("api-run-state", "GET"): (lambda w, a: f"/v0/runs/{w.hold.run.public_id}/state/k", None, {"admin", "token"}),
    ("api-run-state", "PUT"): (lambda w, a: f"/v0/runs/{w.hold.run.public_id}/state/k", 2, {"token"}),
    ("api-files", "POST"): (lambda w, a: "/v0/files", "upload", {"token"}),
    ("api-file", "GET"): (lambda w, a: f"/v0/files/{w.hold_of(a).file.public_id}", None, EVERYONE),
    ("api-invocation-retry", "POST"): (lambda w, a: f"/v0/invocations/{w.invocation.id}/retry", {}, ADMIN),
    ("api-datasets", "GET"): (lambda w, a: "/v0/datasets", None, READ_API),
    ("api-datasets", "POST"): (
        lambda w, a: "/v0/datasets",
        lambda w, a: {"name": f"new by {a}", "capability": w.hold_of(a).capability.name},
        RECORD | {"account"},
    ),
    ("api-dataset", "GET"): (lambda w, a: f"/v0/datasets/{D(w, a)}", None, READ_API),
    ("api-dataset-items", "GET"): (lambda w, a: f"/v0/datasets/{D(w, a)}/items", None, READ_API),
    ("api-dataset-items", "POST"): (lambda w, a: f"/v0/datasets/{D(w, a)}/items", {"input": {}}, RECORD | {"account"}),
    ("api-dataset-item", "GET"): (
        lambda w, a: f"/v0/datasets/{D(w, a)}/items/{w.evals_of(a)[1].public_id}",
        None,
        READ_API,
    ),
    ("api-dataset-item", "DELETE"): (
        lambda w, a: f"/v0/datasets/{D(w, a)}/items/{w.evals_of(a)[1].public_id}",
        None,
        RECORD | {"account"},
    ),
    ("api-experiments", "GET"): (lambda w, a: "/v0/experiments", None, READ_API),
    ("api-experiments", "POST"): (
        lambda w, a: "/v0/experiments",
        lambda w, a: {"dataset": D(w, a)},
        RECORD | {"account"},
    ),
    ("api-experiment", "GET"): (lambda w, a: f"/v0/experiments/{w.evals_of(a)[2].public_id}", None, READ_API),
    ("api-capability-rules", "GET"): (lambda w, a: f"/v0/capabilities/{C(w, a)}/rules", None, READ_API),
    ("api-capability-rules", "PUT"): (lambda w, a: f"/v0/capabilities/{C(w, a)}/rules", RULES, ADMIN),
    ("api-capability-backtest", "POST"): (lambda w, a: f"/v0/capabilities/{C(w, a)}/backtest", RULES, READ_API),
    ("api-capability-grants", "GET"): (lambda w, a: f"/v0/capabilities/{C(w, a)}/grants", None, READ_API),
    ("api-capability-grants", "POST"): (
        lambda w, a: f"/v0/capabilities/{C(w, a)}/grants",
        _grant_body,
        RECORD | {"account"},
    ),
    ("api-grant", "GET"): (lambda w, a: f"/v0/grants/{G(w, a)}", None, READ_API),
    ("api-grant-revoke", "POST"): (lambda w, a: f"/v0/grants/{G(w, a)}/revoke", {}, RECORD | {"account"}),
    # An A2A agent's push is authenticated by the notification token Review Queue gave it for the run
    # (X-A2A-Notification-Token), never by a session, a key or a run token: every actor here is refused
    # (401, the run being an A2A run that exists; test_the_a2a_push_takes_only_its_notification_token).
    ("api-a2a-push", "POST"): (lambda w, a: f"/v0/a2a/runs/{w.a2a_run.public_id}/push", A2A_PUSH, set()),
    ("api-openapi", "GET"): (lambda w, a: "/v0/openapi.json", None, EVERYONE),
    ("api-docs", "GET"): (lambda w, a: "/v0/docs", None, EVERYONE),
}

# Pages that answer a refusal with a message on a 303: whether the change happened.
EFFECTS = {
    "hold-extend": _extended,
    "hold-claim": lambda w, a: Hold.objects.get(pk=w.hold_of(a).pk).claimed_by_id == w.people[a].pk,
    "dataset-experiment-start": lambda w, a: w.evals_of(a)[0].experiments.count() == 2,
    "dataset-item-delete": lambda w, a: DatasetItem.objects.get(pk=w.evals_of(a)[1].pk).deleted_at is not None,
}
# Fragments and forms that answer everyone who may read the hold, showing controls only to who may use
# them ("Approve and remember…" shows its refusal in place of the form).
SHOWN = {("hold-presence", "POST"): 'id="presence"', ("grant-new", "GET"): 'class="panel grant-form"'}

# Routes with no actor: the Django admin (is_staff, tests/test_security_admin.py), /metrics (its own
# bearer token, tests/test_metrics.py) and Slack's interactions (Slack's signature,
# tests/test_channels_slack.py); bench/ views exist only with RQ_BENCH_VIEWS.
NOT_ACTOR_ROUTES = {"metrics", "slack-interactions"}


def _url_names() -> set[str]:
    from django.urls import URLPattern, URLResolver, get_resolver

    names = set()

    def walk(patterns):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                if pattern.namespace != "admin":
                    walk(pattern.url_patterns)
            elif isinstance(pattern, URLPattern):
                names.add(pattern.name or str(pattern.pattern))

    walk(get_resolver().url_patterns)
    return names


def test_every_url_pattern_has_a_row():
    assert _url_names() - {"admin/login/"} == {name for name, _ in ROWS} | NOT_ACTOR_ROUTES


def _call(w: World, actor: str, name: str, method: str):
    from django.test import Client

    path, body, _ = ROWS[(name, method)]
    url = path(w, actor)
    body = body(w, actor) if callable(body) else body
    client, headers = Client(), {}
    if actor == "token":
        headers["x-agentos-run-token"] = w.token
    elif actor == "account":
        headers["authorization"] = f"Bearer {w.key}"
    else:
        client.force_login(w.people[actor])
    if name.startswith("api-") and method != "GET":
        if body == "upload":
            headers["x-filename"] = "a.txt"
            return client.post(url, data=b"hello", content_type="text/plain", headers=headers)
        call = getattr(client, method.lower())
        return call(url, data=json.dumps(body), content_type="application/json", headers=headers)
    if method == "GET":
        return client.get(url, headers=headers)
    return client.post(url, body, headers=headers)


def _let_through(w: World, actor: str, name: str, method: str, response) -> bool:
    if response.status_code in (401, 403, 404):
        return False
    if response.status_code in (301, 302) and "/login/?next=" in response.get("Location", ""):
        return False
    if name in EFFECTS and actor in PEOPLE:
        return EFFECTS[name](w, actor)
    if (name, method) in SHOWN:
        return SHOWN[(name, method)] in response.content.decode()
    return True


@pytest.mark.parametrize("name,method", list(ROWS))
def test_every_entry_point_lets_through_only_its_rows_actors(settings, name, method):
    settings.RQ_PUBLIC_URL = "http://testserver"
    w = World()
    through = {}
    for actor in ACTORS:
        with transaction.atomic():  # each actor sees the world as built (rolled back to this savepoint)
            response = _call(w, actor, name, method)
            through[actor] = _let_through(w, actor, name, method, response)
            transaction.set_rollback(True)
    assert {a for a, ok in through.items() if ok} == ROWS[(name, method)][2]


def test_the_a2a_push_takes_only_its_notification_token(settings):
    # The matrix's row refuses every actor; this shows the refusal is the missing token (401 on a run
    # that is there), and that the token Review Queue gave the agent for the run is let through.
    settings.RQ_PUBLIC_URL = "http://testserver"
    w = World()
    path, body, _ = ROWS[("api-a2a-push", "POST")]
    for actor in ACTORS:
        assert _call(w, actor, "api-a2a-push", "POST").status_code == 401, actor
    from django.test import Client

    response = Client().post(
        path(w, "admin"),
        data=json.dumps(body),
        content_type="application/json",
        headers={"x-a2a-notification-token": push_token_for(w.a2a_run)},
    )
    assert response.status_code == 202 and response.json() == {"status": "ignored"}
