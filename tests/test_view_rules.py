"""The rules page, "Approve and remember…" and where rule decisions show (hold page, history, ops)."""

import html
from datetime import timedelta

import pytest
from django.utils import timezone

from holds import services
from holds.auth import SYSTEM, actor_for_user
from holds.models import AuditEvent, Grant, HoldItem, RuleSet
from tests import factories

pytestmark = pytest.mark.django_db

RULES_YAML = """- id: small
  when: item.data.amount < 100
  then: approve
"""


def held(cap, *amounts):
    items = [{"id": f"INV-{n}", "title": f"Invoice {n}", "data": {"amount": a}} for n, a in enumerate(amounts, 1)]
    return factories.held_hold(cap, factories.ask_body(len(amounts), items=items))


def decide(hold, user, action="approve"):
    items = HoldItem.objects.filter(hold=hold).values_list("item_id", flat=True)
    services.hold_decide(
        hold_id=hold.pk, actor=actor_for_user(user), body={"items": [{"id": i, "action": action} for i in items]}
    )


def test_an_admin_backtests_then_saves_rules_on_the_page(client, cap, admin_user, member):
    _, past = held(cap, 50)
    decide(past, member, "reject")
    client.force_login(admin_user)
    page = client.get(f"/capabilities/{cap.name}/rules")
    assert page.status_code == 200 and b"No rules yet" in page.content
    tried = client.post(f"/capabilities/{cap.name}/rules", {"rules": RULES_YAML, "backtest": "1"})
    assert tried.status_code == 200
    text = tried.content.decode()
    assert "data-backtest-decided>1<" in text and "data-backtest-differ>1<" in text
    assert f'href="/holds/{past.public_id}"' in text
    assert not RuleSet.objects.exists()
    saved = client.post(f"/capabilities/{cap.name}/rules", {"rules": RULES_YAML, "save": "1"}, follow=True)
    assert saved.status_code == 200
    assert "Rules v1 saved. On the last 90 days they would have decided 1 item(s); people decided 1 of those" in (
        html.unescape(saved.content.decode())
    )
    assert RuleSet.objects.get().rules == [{"id": "small", "when": "item.data.amount < 100", "then": "approve"}]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("- id: a\n  when: item.data.amount <\n  then: approve\n", "rule 1: when: Syntax error"),
        ("- id: a\n  when: '" + "(" * 13 + "true" + ")" * 13 + "'\n  then: approve\n", "nests deeper than 12"),
        ("[unclosed", "Not valid YAML"),
        ("- id: a\n  when: 'true'\n  then: reject\n", "a reject rule needs a comment"),
    ],
)
def test_bad_rules_are_refused_on_the_page_with_where(client, cap, admin_user, text, shown):
    client.force_login(admin_user)
    response = client.post(f"/capabilities/{cap.name}/rules", {"rules": text, "save": "1"})
    assert response.status_code == 422
    assert shown in html.unescape(response.content.decode())
    assert not RuleSet.objects.exists()


def test_members_read_and_backtest_but_do_not_save(client, cap, member):
    client.force_login(member)
    assert client.get(f"/capabilities/{cap.name}/rules").status_code == 200
    assert client.post(f"/capabilities/{cap.name}/rules", {"rules": RULES_YAML, "backtest": "1"}).status_code == 200
    assert client.post(f"/capabilities/{cap.name}/rules", {"rules": RULES_YAML, "save": "1"}).status_code == 403
    assert client.get("/capabilities/nope/rules").status_code == 404


def test_the_rule_page_costs_no_query_per_hold(client, cap, admin_user, django_assert_max_num_queries):
    services.rules_save(capability=cap, rules=[{"id": "a", "when": "true", "then": "ask"}], actor=SYSTEM)
    client.force_login(admin_user)
    client.get(f"/capabilities/{cap.name}/rules")
    with django_assert_max_num_queries(12):
        assert client.get(f"/capabilities/{cap.name}/rules").status_code == 200


def test_hold_page_history_and_ops_name_the_rule_and_version(client, cap, member):
    services.rules_save(
        capability=cap, rules=[{"id": "small", "when": "item.data.amount < 100", "then": "approve"}], actor=SYSTEM
    )
    _, whole = held(cap, 5)
    _, part = held(cap, 6, 600)
    client.force_login(member)
    page = client.get(f"/holds/{whole.public_id}").content.decode()
    assert "Decided by <strong>rule small v1</strong>" in page and "decided by rule small v1" in page
    page = client.get(f"/holds/{part.public_id}").content.decode()
    # The rule's item is listed apart; only the other one has a choice to make.
    assert "Decided at the ask" in page and "decided by rule small v1" in page
    assert 'name="item-1-action"' in page and 'name="item-0-action"' not in page
    assert "rule small v1" in client.get("/history").content.decode()
    ops = client.get("/ops").content.decode()
    assert 'id="ops-by-rule"' in ops
    card = ops[ops.index('id="ops-by-rule"') :][:300]
    assert ">1 <" in card and "2 items" in card
    audit = AuditEvent.objects.filter(kind__in=["hold.decided", "hold.decided_by_rule"]).values_list("actor", flat=True)
    assert sorted(audit) == ["rule small v1", "rule small v1"]


def test_approve_and_remember_from_a_decided_item(client, cap, member):
    _, hold = held(cap, 42)
    decide(hold, member)
    client.force_login(member)
    page = client.get(f"/holds/{hold.public_id}").content.decode()
    assert f'href="/holds/{hold.public_id}/grant?item=INV-1"' in page and "Approve and remember" in page
    form = client.get(f"/holds/{hold.public_id}/grant?item=INV-1").content.decode()
    assert "item.data.amount == 42" in form
    expires = (timezone.localdate() + timedelta(days=10)).isoformat()
    body = {"item": "INV-1", "when": "item.data.amount == 42", "expires_on": expires, "max_uses": "2"}
    preview = client.post(f"/holds/{hold.public_id}/grant", {**body, "preview": "1"})
    assert preview.status_code == 200 and "data-backtest-decided>1<" in preview.content.decode()
    assert not Grant.objects.exists()
    saved = client.post(f"/holds/{hold.public_id}/grant", {**body, "save": "1"}, follow=True)
    assert saved.status_code == 200
    grant = Grant.objects.get()
    assert (grant.max_uses, grant.from_hold_id, grant.from_item_id, grant.created_by) == (2, hold.pk, "INV-1", "mona")
    assert grant.expires_at <= timezone.now() + timedelta(days=11)
    listed = saved.content.decode()
    assert grant.public_id in listed and "never" in listed
    _, next_hold = held(cap, 42)
    next_hold.refresh_from_db()
    assert next_hold.status == "decided" and next_hold.decided_by == f"grant {grant.public_id}"
    # Revoked from the list by an approver: the next one goes to people.
    client.post(f"/capabilities/{cap.name}/grants/{grant.public_id}/revoke")
    _, third = held(cap, 42)
    third.refresh_from_db()
    assert third.status == "pending"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"when": "item.data."}, "Syntax error"),
        ({"expires_on": ""}, "Choose the day"),
        ({"max_uses": "two"}, "A whole number"),
    ],
)
def test_bad_grants_are_refused_on_the_form(client, cap, member, change, field):
    _, hold = held(cap, 42)
    decide(hold, member)
    client.force_login(member)
    expires = (timezone.localdate() + timedelta(days=10)).isoformat()
    body = {"item": "INV-1", "when": "true", "expires_on": expires, "save": "1", **change}
    response = client.post(f"/holds/{hold.public_id}/grant", body)
    assert response.status_code == 422 and field in html.unescape(response.content.decode())
    assert not Grant.objects.exists()


def test_no_grant_from_a_rejected_item_nor_by_a_viewer(client, cap, member, viewer):
    _, hold = held(cap, 42)
    decide(hold, member, "reject")
    client.force_login(member)
    assert "data-remember" not in client.get(f"/holds/{hold.public_id}").content.decode()
    refused = client.post(f"/holds/{hold.public_id}/grant", {"item": "INV-1", "when": "true", "save": "1"})
    assert refused.status_code == 403
    client.force_login(viewer)
    assert client.post(f"/holds/{hold.public_id}/grant", {"item": "INV-1", "save": "1"}).status_code == 403
    assert client.get(f"/holds/{hold.public_id}/grant?item=nope").status_code == 404
    assert not Grant.objects.exists()


def test_a_rule_quorum_more_than_who_may_decide_is_refused_on_the_page(client, cap, admin_user, member):
    # Who may approve pay_invoices: admin_user and member; a quorum of three of them could never be met.
    client.force_login(admin_user)
    text = "- id: big\n  when: item.data.amount > 1000\n  then: {quorum: 3, from: [admin, member]}\n"
    response = client.post(f"/capabilities/{cap.name}/rules", {"rules": text, "save": "1"})
    assert response.status_code == 422
    assert "rule 1: then: needs 3 approvals but only 2 people or service accounts may give one" in (
        html.unescape(response.content.decode())
    )
    assert not RuleSet.objects.exists()
    saved = client.post(f"/capabilities/{cap.name}/rules", {"rules": text.replace("3", "2"), "save": "1"})
    assert saved.status_code == 303 and RuleSet.objects.get().rules[0]["then"] == {
        "quorum": 2,
        "from": ["admin", "member"],
    }
