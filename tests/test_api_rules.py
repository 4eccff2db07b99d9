"""/v0/ rules, backtests and standing grants with a service-account key (SPEC Round 3)."""

import datetime as dt
import threading

import pytest
from django.db import connection
from django.utils import timezone

from holds import services
from holds.auth import SYSTEM
from holds.models import AuditEvent, Capability, Grant, Hold, HoldItem, RuleSet
from tests import factories

pytestmark = pytest.mark.django_db

SMALL = {"id": "small", "when": "item.data.amount < 100", "then": "approve"}


def rules_url(cap):
    return f"/v0/capabilities/{cap.name}/rules"


def ask(api, cap, *amounts, answer=True):
    run = factories.start_run(cap)
    invocation, token = factories.deliver_now(run)
    body = factories.ask_body(
        len(amounts),
        items=[
            {"id": f"INV-{n}", "title": f"Invoice {n}", "data": {"amount": a}} for n, a in enumerate(amounts, start=1)
        ],
    )
    response = api.post("/v0/holds", body, token=token)
    assert response.status_code == 201, response.content
    hold = Hold.objects.get(pk=int(response.json()["hold_id"][2:]))
    if answer:
        factories.answer(invocation, {"status": "suspended", "hold_id": hold.public_id})
    return hold


def decided_by_person(api, cap, key, amount, action):
    hold = ask(api, cap, amount)
    response = api.post(f"/v0/holds/{hold.public_id}/decision", {"items": [{"id": "INV-1", "action": action}]}, key=key)
    assert response.status_code == 200, response.content
    return hold


def in_days(n):
    return (timezone.now() + dt.timedelta(days=n)).isoformat()


# --- rules ------------------------------------------------------------------------------------------


def test_an_admin_key_saves_versions_read_back_and_audited(api, cap, admin_key, member_key):
    assert api.get(rules_url(cap), key=member_key).json() == {
        "capability": "pay_invoices",
        "version": 0,
        "rules": [],
        "saved_by": None,
        "saved_at": None,
    }
    for n in (1, 2):
        response = api.put(rules_url(cap), {"rules": [SMALL]}, key=admin_key)
        assert response.status_code == 200, response.content
        assert response.json()["version"] == n
    out = api.get(rules_url(cap), key=member_key).json()
    assert out["version"] == 2 and out["rules"] == [SMALL] and out["saved_by"] == "service account ops-bot"
    assert RuleSet.objects.filter(capability=cap).count() == 2
    events = AuditEvent.objects.filter(kind="rules.saved").order_by("id")
    assert [e.data["version"] for e in events] == [1, 2] and events[0].actor == "service account ops-bot"


def test_only_admins_save_rules_and_runs_read_none(api, cap, member_key, live):
    assert api.put(rules_url(cap), {"rules": [SMALL]}, key=member_key).status_code == 403
    assert api.get(rules_url(cap), token=live[2]).status_code == 403
    assert api.get("/v0/capabilities/nope/rules", key=member_key).status_code == 404
    assert not RuleSet.objects.exists()


@pytest.mark.parametrize(
    ("rule", "field", "position"),
    [
        ({"id": "a", "when": "item.data.amount <", "then": "approve"}, "rules[0].when", (1, 19)),
        ({"id": "a", "when": "itm.data.amount < 3", "then": "approve"}, "rules[0].when", (1, 9)),
        ({"id": "a", "when": "x" * 2001, "then": "approve"}, "rules[0].when", (1, 2001)),
        ({"id": "a", "when": "(" * 13 + "true" + ")" * 13, "then": "approve"}, "rules[0].when", (1, 13)),
        ({"id": "a", "when": "item.data.amount + 1", "then": "approve"}, "rules[0].when", (1, 1)),
        ({"id": "a", "when": "true", "then": "reject"}, "rules[0].then", None),
        ({"id": "a", "when": "true", "then": "delete"}, "rules[0].then", None),
        ({"id": "a b", "when": "true", "then": "ask"}, "rules[0].id", None),
        ({"id": "a", "when": "true", "then": "ask", "extra": 1}, "rules[0].extra", None),
    ],
)
def test_a_bad_rule_is_refused_with_where(api, cap, admin_key, rule, field, position):
    response = api.put(rules_url(cap), {"rules": [rule]}, key=admin_key)
    assert response.status_code == 422, response.content
    errors = response.json()["errors"]
    assert [e["field"] for e in errors] == [field]
    if position:
        assert (errors[0]["line"], errors[0]["column"]) == position
    assert not RuleSet.objects.exists()


@pytest.mark.parametrize("raw", ["[", '{"rules": 3}', '{"nope": []}', "[]"])
def test_bad_bodies_are_4xx_never_500(api, cap, admin_key, raw):
    response = api.put(rules_url(cap), None, key=admin_key, raw=raw)
    assert response.status_code in (400, 422), response.content


def test_a_quorum_rule_is_saved_and_asks_until_quorum_lands(api, cap, admin_key, admin_user):
    # Two admins (the key's account and admin_user) may give the two approvals.
    quorum = {"id": "big", "when": "item.data.amount > 1000", "then": {"quorum": 2, "from": ["admin"]}}
    assert api.put(rules_url(cap), {"rules": [quorum, SMALL]}, key=admin_key).status_code == 200
    hold = ask(api, cap, 5000)
    assert Hold.objects.get(pk=hold.pk).status == "pending"


def test_a_rule_quorum_more_than_who_may_decide_is_refused_on_save(api, cap, admin_key, admin_user, member):
    # Admins who may approve: the key's account and admin_user (2). Members: member (1), and a revoked
    # account and an inactive person do not count.
    services.service_account_revoke(account_id=factories.account("old-bot")[0].pk, actor=SYSTEM)
    services.person_set_active(user_id=factories.person("gone").pk, active=False, actor=SYSTEM)
    three = {"id": "big", "when": "item.data.amount > 1000", "then": {"quorum": 3, "from": ["admin"]}}
    response = api.put(rules_url(cap), {"rules": [SMALL, three]}, key=admin_key)
    assert response.status_code == 422, response.content
    (error,) = response.json()["errors"]
    assert error["field"] == "rules[1].then"
    assert "needs 3 approvals but only 2 people or service accounts may give one" in error["message"]
    two_members = {**three, "then": {"quorum": 2, "from": ["member"]}}
    assert api.put(rules_url(cap), {"rules": [two_members]}, key=admin_key).status_code == 422
    assert not RuleSet.objects.exists() and not AuditEvent.objects.filter(kind="rules.saved").exists()
    # Roles the capability does not let approve count for nothing, even when the rule names them.
    admins_only = factories.capability("admins_only", approvers=["admin"])
    both = {**three, "then": {"quorum": 2, "from": ["admin", "member"]}}
    assert api.put(rules_url(admins_only), {"rules": [both]}, key=admin_key).status_code == 200
    three_of_both = {**three, "then": {"quorum": 3, "from": ["admin", "member"]}}
    assert api.put(rules_url(admins_only), {"rules": [three_of_both]}, key=admin_key).status_code == 422
    assert api.put(rules_url(cap), {"rules": [three_of_both]}, key=admin_key).status_code == 200


# --- backtest --------------------------------------------------------------------------------------


def test_the_backtest_counts_what_a_rule_would_decide_and_what_people_decided_otherwise(api, cap, member_key):
    agreed = decided_by_person(api, cap, member_key, 50, "approve")
    rejected = decided_by_person(api, cap, member_key, 60, "reject")
    decided_by_person(api, cap, member_key, 500, "reject")  # the rule would not decide it
    ask(api, cap, 70)  # pending: no decision to compare with
    response = api.post(f"/v0/capabilities/{cap.name}/backtest", {"rules": [SMALL]}, key=member_key)
    assert response.status_code == 200, response.content
    out = response.json()
    assert (out["items"], out["would_decide"], out["decided_otherwise"]) == (3, 2, 1)
    assert out["differences"] == [
        {
            "hold_id": rejected.public_id,
            "item_id": "INV-1",
            "title": "Invoice 1",
            "person": "reject",
            "would": "approve",
            "by": "small",
            "url": f"/holds/{rejected.public_id}",
        }
    ]
    assert agreed.public_id not in {d["hold_id"] for d in out["differences"]}
    # A grant's expression alone, as the grant form previews it.
    grant = api.post(f"/v0/capabilities/{cap.name}/backtest", {"when": "item.data.amount == 60"}, key=member_key)
    assert (grant.json()["would_decide"], grant.json()["decided_otherwise"]) == (1, 1)


def test_the_backtest_leaves_out_rule_decisions_and_old_ones(api, cap, admin_key, member_key):
    decided_by_person(api, cap, member_key, 10, "reject")
    old = decided_by_person(api, cap, member_key, 20, "reject")
    Hold.objects.filter(pk=old.pk).update(decided_at=timezone.now() - dt.timedelta(days=91))
    api.put(rules_url(cap), {"rules": [SMALL]}, key=admin_key)
    assert ask(api, cap, 30).status in ("pending", "decided")
    out = api.post(f"/v0/capabilities/{cap.name}/backtest", {"rules": [SMALL]}, key=member_key).json()
    assert (out["items"], out["would_decide"], out["decided_otherwise"]) == (1, 1, 1)


def test_the_backtest_reports_errors_per_rule_and_is_one_statement(api, cap, member_key, django_assert_num_queries):
    decided_by_person(api, cap, member_key, 10, "approve")
    decided_by_person(api, cap, member_key, 20, "approve")
    from holds.backtest import backtest
    from holds.rules import check_rules

    rules, _ = check_rules([{"id": "odd", "when": "item.data.missing > 1", "then": "approve"}, SMALL])
    capability = Capability.objects.get(pk=cap.pk)
    with django_assert_num_queries(1):
        result = backtest(capability, rules=rules)
    assert result.by_rule["odd"].errors == 2 and "amount" not in result.by_rule["odd"].first_error
    assert result.by_rule["small"].decided == 2


# --- grants ----------------------------------------------------------------------------------------


def test_a_grant_approves_the_next_matching_hold_and_each_use_is_audited(api, cap, member_key):
    source = decided_by_person(api, cap, member_key, 42, "approve")
    body = {
        "when": "item.data.amount == 42",
        "expires_at": in_days(30),
        "hold_id": source.public_id,
        "item_id": "INV-1",
    }
    response = api.post(f"/v0/capabilities/{cap.name}/grants", body, key=member_key)
    assert response.status_code == 201, response.content
    grant_id = response.json()["grant_id"]
    assert response.json()["backtest"]["would_decide"] == 1
    hold = ask(api, cap, 42)
    assert hold.status == "decided" and hold.decided_by == f"grant {grant_id}"
    assert HoldItem.objects.get(hold=hold).decided_by == {"type": "grant", "id": grant_id}
    listed = api.get(f"/v0/capabilities/{cap.name}/grants", key=member_key).json()["grants"]
    assert [(g["grant_id"], g["uses"], g["last_used_at"] is not None) for g in listed] == [(grant_id, 1, True)]
    assert AuditEvent.objects.get(kind="grant.used").data == {"grant": grant_id, "items": ["INV-1"]}
    assert ask(api, cap, 43).status == "pending"


def test_a_grant_never_approves_what_does_not_offer_approve_nor_outlives_its_limits(api, cap, member_key):
    body = {"when": "true", "expires_at": in_days(1), "max_uses": 1}
    grant_id = api.post(f"/v0/capabilities/{cap.name}/grants", body, key=member_key).json()["grant_id"]
    assert ask(api, cap, 1).status == "decided"
    assert ask(api, cap, 2).status == "pending"  # used up
    assert Grant.objects.get(pk=int(grant_id.split("_")[1])).uses == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"when": "true"}, "expires_at"),
        ({"when": "true", "expires_at": "tomorrow"}, "expires_at"),
        ({"when": "true", "expires_at": "2020-01-01T00:00:00+00:00"}, "expires_at"),
        ({"when": "true", "expires_at": "2999-01-01T00:00:00+00:00"}, "expires_at"),
        ({"when": "item.", "expires_at": "IN30"}, "when"),
        ({"when": "true", "expires_at": "IN30", "max_uses": 0}, "max_uses"),
        ({"when": "true", "expires_at": "IN30", "max_uses": "3"}, "max_uses"),
    ],
)
def test_bad_grants_are_refused(api, cap, member_key, body, field):
    if body.get("expires_at") == "IN30":
        body = {**body, "expires_at": in_days(30)}
    response = api.post(f"/v0/capabilities/{cap.name}/grants", body, key=member_key)
    assert response.status_code == 422, response.content
    assert field in {e["field"] for e in response.json()["errors"]}
    assert not Grant.objects.exists()


def test_a_grant_is_never_wider_than_its_author_may_decide(api, cap, member_key, viewer):
    from holds.models import ServiceAccount

    _, viewer_key = factories.account("watcher", role="viewer")
    body = {"when": "true", "expires_at": in_days(3)}
    assert api.post(f"/v0/capabilities/{cap.name}/grants", body, key=viewer_key).status_code == 403
    strict = factories.capability("strict", self_approval=False)
    assert api.post(f"/v0/capabilities/{strict.name}/grants", body, key=member_key).status_code == 403
    # The author's key is revoked after granting: the grant no longer applies.
    assert api.post(f"/v0/capabilities/{cap.name}/grants", body, key=member_key).status_code == 201
    ServiceAccount.objects.filter(name="robot").update(revoked_at=timezone.now())
    assert ask(api, cap, 5).status == "pending"


def test_revoking_takes_effect_at_the_next_ask_and_only_approvers_or_admins_revoke(api, cap, member_key, admin_key):
    from holds.services import capability_set_approvers  # noqa: F401 (approvers are [admin, member] by default)

    grant_id = api.post(
        f"/v0/capabilities/{cap.name}/grants", {"when": "true", "expires_at": in_days(3)}, key=member_key
    ).json()["grant_id"]
    _, viewer_key = factories.account("watcher", role="viewer")
    assert api.post(f"/v0/grants/{grant_id}/revoke", key=viewer_key).status_code == 403
    response = api.post(f"/v0/grants/{grant_id}/revoke", key=admin_key)
    assert response.status_code == 200 and response.json()["revoked_by"] == "service account ops-bot"
    assert ask(api, cap, 5).status == "pending"
    assert AuditEvent.objects.filter(kind="grant.revoked").count() == 1
    assert api.get("/v0/grants/grt_999999", key=admin_key).status_code == 404
    assert api.get("/v0/grants/nonsense", key=admin_key).status_code == 404


@pytest.mark.django_db(transaction=True)
def test_max_uses_holds_under_concurrent_asks(cap, member_key):
    """Six asks at once against a grant of three uses: exactly three holds decided by it."""
    from holds import services
    from holds.auth import SYSTEM, actor_for_account
    from holds.models import ServiceAccount

    actor = actor_for_account(ServiceAccount.objects.get(name="robot"))
    grant = services.grant_create(
        capability=cap, when="true", expires_at=timezone.now() + dt.timedelta(days=1), max_uses=3, actor=actor
    )
    invocations = []
    for _ in range(6):
        run = factories.start_run(cap, actor=SYSTEM)
        invocations.append(factories.deliver_now(run)[0])
    barrier = threading.Barrier(len(invocations))
    holds, errors = [], []

    def one(invocation):
        try:
            barrier.wait()
            holds.append(services.hold_ask(invocation=invocation, body=factories.ask_body(1)))
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in invocations]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(h.status for h in holds) == ["decided"] * 3 + ["pending"] * 3
    grant.refresh_from_db()
    assert grant.uses == 3
    assert AuditEvent.objects.filter(kind="grant.used").count() == 3


@pytest.mark.django_db(transaction=True)
def test_revoking_mid_ask_applies_the_grant_whole_or_not_at_all(cap, member_key):
    """Asks racing a revocation: each hold is decided by the grant with its use counted, or pending
    with none; never a decided hold without a use, nor a use without a decided hold."""
    from holds import services
    from holds.auth import SYSTEM, actor_for_account
    from holds.models import ServiceAccount

    actor = actor_for_account(ServiceAccount.objects.get(name="robot"))
    grant = services.grant_create(
        capability=cap, when="true", expires_at=timezone.now() + dt.timedelta(days=1), actor=actor
    )
    invocations = [factories.deliver_now(factories.start_run(cap, actor=SYSTEM))[0] for _ in range(4)]
    barrier = threading.Barrier(len(invocations) + 1)
    holds, errors = [], []

    def asker(invocation):
        try:
            barrier.wait()
            holds.append(services.hold_ask(invocation=invocation, body=factories.ask_body(2)))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    def revoker():
        try:
            barrier.wait()
            services.grant_revoke(grant_id=grant.pk, actor=actor)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=asker, args=(i,)) for i in invocations] + [threading.Thread(target=revoker)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    grant.refresh_from_db()
    decided = [h for h in holds if h.status == "decided"]
    assert grant.uses == 2 * len(decided)
    for hold in holds:
        actions = set(HoldItem.objects.filter(hold_id=hold.pk).values_list("action", flat=True))
        assert actions == ({"approve"} if hold.status == "decided" else {""})


def test_real_answers_match_the_openapi_document(api, client, cap, admin_key, member_key):
    import jsonschema

    doc = client.get("/v0/openapi.json").json()

    def check(path, method, response):
        schema = doc["paths"][path][method]["responses"][str(response.status_code)]["content"]["application/json"]
        jsonschema.validate(response.json(), {"components": doc["components"], **schema["schema"]})

    decided_by_person(api, cap, member_key, 60, "reject")
    # Two may give an approval that counts: the admin's and the member's service accounts.
    quorum = {"id": "q", "when": "false", "then": {"quorum": 2, "from": ["admin", "member"]}}
    reject = {"id": "no", "when": "item.data.amount > 9000", "then": "reject", "comment": "too much"}
    rules = "/v0/capabilities/{name}/rules"
    check(rules, "get", api.get(rules_url(cap), key=member_key))
    check(rules, "put", api.put(rules_url(cap), {"rules": [quorum, reject, SMALL]}, key=admin_key))
    check(rules, "put", api.put(rules_url(cap), {"rules": [{"id": "x"}]}, key=admin_key))  # 422
    check(rules, "get", api.get(rules_url(cap), key=member_key))
    backtest = f"/v0/capabilities/{cap.name}/backtest"
    check("/v0/capabilities/{name}/backtest", "post", api.post(backtest, {"rules": [SMALL]}, key=member_key))
    grants = f"/v0/capabilities/{cap.name}/grants"
    created = api.post(grants, {"when": "item.data.amount == 7", "expires_at": in_days(2)}, key=member_key)
    check("/v0/capabilities/{name}/grants", "post", created)
    check("/v0/capabilities/{name}/grants", "get", api.get(grants, key=member_key))
    grant_id = created.json()["grant_id"]
    check("/v0/grants/{grant_id}", "get", api.get(f"/v0/grants/{grant_id}", key=member_key))
    check("/v0/grants/{grant_id}/revoke", "post", api.post(f"/v0/grants/{grant_id}/revoke", key=member_key))
    # A hold decided by the rules reads back with decided_by per item and a resume resolved by rule.
    hold = ask(api, cap, 5, 9999)
    created_hold = api.get(f"/v0/holds/{hold.public_id}", key=member_key)
    check("/v0/holds/{hold_id}", "get", created_hold)
    assert [i["decided_by"]["id"] for i in created_hold.json()["items"]] == ["small", "no"]
    assert created_hold.json()["resume"]["resolved_by"] == "rule"
