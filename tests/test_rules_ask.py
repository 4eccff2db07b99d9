"""Rules at the ask (SPEC Round 3 "Rules"): per item, in order, first match wins; decided holds resume
as usual, partly decided ones leave the rest to people and resume with every item."""

import pytest

from holds import services
from holds.auth import SYSTEM
from holds.models import AuditEvent, Hold, HoldItem, Invocation
from tests import factories

pytestmark = pytest.mark.django_db


def with_rules(cap, rules):
    services.rules_save(capability=cap, rules=rules, actor=SYSTEM)
    cap.refresh_from_db()
    return cap


def ask(api, cap, body, input=None):
    run = factories.start_run(cap, input=input)
    invocation, token = factories.deliver_now(run)
    response = api.post("/v0/holds", body, token=token)
    assert response.status_code == 201, response.content
    return run, invocation, Hold.objects.get(pk=int(response.json()["hold_id"][2:])), response.json()


def amounts(*values):
    return factories.ask_body(
        len(values),
        items=[
            {"id": f"INV-{n}", "title": f"Invoice {n}", "data": {"amount": v}, "confidence": {"amount": 0.95}}
            for n, v in enumerate(values, start=1)
        ],
    )


SMALL = {"id": "small", "when": "item.data.amount < 100 && item.confidence > 0.9", "then": "approve"}
HUGE = {"id": "huge", "when": "item.data.amount > 10000", "then": "reject", "comment": "too large for agents"}


def test_a_capability_without_rules_asks_as_before(api, cap):
    _, _, hold, body = ask(api, cap, amounts(5, 7))
    assert body["status"] == "pending" and hold.status == "pending"
    assert not HoldItem.objects.filter(hold=hold).exclude(action="").exists()


def test_every_item_decided_creates_the_hold_decided_and_resumes_it_once_the_agent_answers(api, cap):
    with_rules(cap, [HUGE, SMALL])
    run, invocation, hold, body = ask(api, cap, amounts(5, 20000))
    assert body["status"] == "decided"
    assert (
        hold.status == "decided"
        and hold.decided_by == "rule small v1, rule huge v1"
        and hold.decided_by_user_id is None
    )
    items = {i.item_id: i for i in HoldItem.objects.filter(hold=hold)}
    assert items["INV-1"].action == "approve"
    assert items["INV-1"].decided_by == {"type": "rule", "id": "small", "version": 1}
    assert items["INV-2"].action == "reject" and items["INV-2"].comment == "too large for agents"
    resume = Invocation.objects.get(hold=hold, kind="resume")
    # Waiting for the asker's answer, as a person's decision would.
    assert resume.status == "waiting"
    assert resume.resume["resolved_by"] == "rule"
    assert [(i["id"], i["action"], i["decided_by"]["id"]) for i in resume.resume["items"]] == [
        ("INV-1", "approve", "small"),
        ("INV-2", "reject", "huge"),
    ]
    factories.answer(invocation, {"status": "suspended", "hold_id": hold.public_id})
    resume.refresh_from_db()
    assert resume.status == "pending"
    event = AuditEvent.objects.get(kind="hold.decided", hold_id_ref=hold.pk)
    assert event.actor == "rule small v1, rule huge v1" and event.data["decided_by"]["INV-2"] == {
        "type": "rule",
        "id": "huge",
        "version": 1,
    }


def test_first_match_wins_and_an_ask_rule_stops_the_list(api, cap):
    with_rules(cap, [{"id": "look", "when": "item.data.amount == 50", "then": "ask"}, SMALL])
    _, _, hold, body = ask(api, cap, amounts(50, 60))
    assert body["status"] == "pending"
    items = {i.item_id: i for i in HoldItem.objects.filter(hold=hold)}
    assert items["INV-1"].action == "" and items["INV-1"].decided_by is None
    assert items["INV-2"].action == "approve" and items["INV-2"].decided_by["id"] == "small"
    assert AuditEvent.objects.get(kind="hold.decided_by_rule", hold_id_ref=hold.pk).data["actions"] == {
        "INV-2": "approve"
    }


def test_a_partly_decided_hold_leaves_the_rest_to_people_and_resumes_with_every_item(api, cap, member_key):
    with_rules(cap, [SMALL])
    _, invocation, hold, _ = ask(api, cap, amounts(5, 500))
    factories.answer(invocation, {"status": "suspended", "hold_id": hold.public_id})
    # The rule-decided item is not the person's to decide.
    both = {"items": [{"id": "INV-1", "action": "reject"}, {"id": "INV-2", "action": "approve"}]}
    refused = api.post(f"/v0/holds/{hold.public_id}/decision", both, key=member_key)
    assert refused.status_code == 422, refused.content
    response = api.post(
        f"/v0/holds/{hold.public_id}/decision", {"items": [{"id": "INV-2", "action": "reject"}]}, key=member_key
    )
    assert response.status_code == 200, response.content
    resume = Invocation.objects.get(hold=hold, kind="resume").resume
    assert resume["resolved_by"] == "human"
    assert [(i["id"], i["action"], i.get("decided_by")) for i in resume["items"]] == [
        ("INV-1", "approve", {"type": "rule", "id": "small", "version": 1}),
        ("INV-2", "reject", None),
    ]


def test_a_rule_never_approves_an_item_that_does_not_offer_approve(api, cap):
    with_rules(cap, [SMALL])
    body = amounts(5)
    body["actions"] = ["edit", "reject"]
    _, _, hold, out = ask(api, cap, body)
    assert out["status"] == "pending"
    assert HoldItem.objects.get(hold=hold).action == ""


@pytest.mark.parametrize(
    "when",
    [
        "item.data.missing > 3",  # a field the items lack: an error value, which reads as true if unchecked
        "item.data.amount < 'x'",  # no such overload
        "item.data.amount",  # not a boolean
        "1 / 0 == 1",
    ],
)
def test_an_expression_that_errors_is_false(api, cap, when):
    with_rules(cap, [{"id": "odd", "when": when, "then": "approve"}])
    _, _, hold, out = ask(api, cap, amounts(5))
    assert out["status"] == "pending"
    assert HoldItem.objects.get(hold=hold).action == ""


def test_rules_read_run_input_capability_title_and_flags(api, cap):
    with_rules(
        cap,
        [
            {"id": "flagged", "when": "size(item.flags) > 0", "then": "ask"},
            {
                "id": "trusted",
                "when": "run.input.vendor == 'acme' && capability == 'pay_invoices' && item.title.startsWith('Inv')",
                "then": "approve",
            },
        ],
    )
    body = amounts(5, 6)
    body["items"][1]["title"] = "Inv\u200boice"  # a hidden character: flagged, left to people
    _, _, hold, _ = ask(api, cap, body, input={"vendor": "acme"})
    items = {i.item_id: i.action for i in HoldItem.objects.filter(hold=hold)}
    assert items == {"INV-1": "approve", "INV-2": ""}


def test_a_new_version_applies_to_the_next_ask(api, cap):
    with_rules(cap, [SMALL])
    _, _, first, _ = ask(api, cap, amounts(5))
    with_rules(cap, [{"id": "none", "when": "false", "then": "approve"}])
    _, _, second, _ = ask(api, cap, amounts(5))
    assert first.status == "decided" and second.status == "pending"
    assert HoldItem.objects.get(hold=first).decided_by == {"type": "rule", "id": "small", "version": 1}


def test_the_python_sdk_reads_decided_by_from_the_resume_the_service_sent(api, cap):
    from agentos.resume import Resume

    with_rules(cap, [SMALL])
    _, _, hold, _ = ask(api, cap, amounts(5))
    resume = Resume.from_json(Invocation.objects.get(hold=hold, kind="resume").resume)
    assert resume.resolved_by == "rule"
    assert resume.item("INV-1").decided_by == {"type": "rule", "id": "small", "version": 1}
