"""POST /v0/holds/{id}/decision: deciding by API, once, with SPEC's resume payload."""

import datetime as dt

import pytest
from django.utils import timezone

from holds.models import AuditEvent, Hold, Invocation, Run
from tests import factories

pytestmark = pytest.mark.django_db


def decide(api, hold, body, key):
    return api.post(f"/v0/holds/{hold.public_id}/decision", body, key=key)


def resume_of(hold):
    return Invocation.objects.get(hold=hold, kind="resume")


def test_it_decides_and_creates_the_resume_in_one_step(api, cap, member_key):
    run, hold = factories.held_hold(cap)
    body = {
        "items": [
            {"id": "INV-1", "action": "edit", "data": {"payee": "Aksa Lojistik A.Ş.", "amount": "100.00"}},
            {"id": "INV-2", "action": "reject"},
        ],
        "comment": "paid last week",
    }
    response = decide(api, hold, body, member_key)
    assert response.status_code == 200, response.content
    out = response.json()
    assert out["status"] == "decided" and out["decided_by"] == "service account robot" and out["decided_at"]
    invocation = resume_of(hold)
    assert invocation.kind == "resume" and invocation.seq == 2 and invocation.status == "pending"
    # The receipt's content is tests/test_receipts.py's.
    assert invocation.resume.pop("receipt").count(".") == 2
    assert invocation.resume == {
        "hold_id": hold.public_id,
        "resolved_by": "human",
        "items": [
            {
                "id": "INV-1",
                "action": "edit",
                "data": {"payee": "Aksa Lojistik A.Ş.", "amount": "100.00"},
                "comment": "paid last week",
            },
            {
                "id": "INV-2",
                "action": "reject",
                "data": {"payee": "Payee 2", "amount": "101.00"},
                "comment": "paid last week",
            },
        ],
        "comment": "paid last week",
    }
    assert AuditEvent.objects.filter(kind="hold.decided", hold_id_ref=hold.pk).count() == 1
    run.refresh_from_db()
    # Held, on its asking invocation, until the resume is first sent.
    assert run.status == Run.Status.HELD and run.seq == 1


def test_it_copies_the_comment_only_onto_edit_reject_and_feedback(api, cap, member_key):
    run, hold = factories.held_hold(cap, factories.ask_body(4))
    body = {
        "items": [
            {"id": "INV-1", "action": "approve"},
            {"id": "INV-2", "action": "feedback"},
            {"id": "INV-3", "action": "reject", "comment": "   "},
            {"id": "INV-4", "action": "approve", "comment": "own note"},
        ],
        "comment": "see thread",
    }
    assert decide(api, hold, body, member_key).status_code == 200
    items = resume_of(hold).resume["items"]
    assert [i["comment"] for i in items] == [None, "see thread", "see thread", "own note"]
    assert [i["data"] for i in items] == [item["data"] for item in factories.ask_body(4)["items"]]


def test_it_keeps_the_items_own_comment_over_the_holds(api, cap, member_key):
    run, hold = factories.held_hold(cap)
    body = {
        "items": [{"id": "INV-1", "action": "reject", "comment": "dup"}, {"id": "INV-2", "action": "approve"}],
        "comment": "general",
    }
    decide(api, hold, body, member_key)
    assert [i["comment"] for i in resume_of(hold).resume["items"]] == ["dup", None]


def test_it_treats_a_blank_hold_comment_as_absent(api, cap, member_key):
    run, hold = factories.held_hold(cap)
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}], "comment": "  "}
    decide(api, hold, body, member_key)
    assert resume_of(hold).resume["comment"] is None


def test_it_decides_once_and_answers_409_with_who_and_when(api, cap, member_key, admin_key):
    run, hold = factories.held_hold(cap)
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    first = decide(api, hold, body, member_key).json()
    again = decide(api, hold, body, admin_key)
    assert again.status_code == 409
    assert again.json()["error"] == "already_decided"
    assert again.json()["decided_by"] == first["decided_by"] and again.json()["decided_at"] == first["decided_at"]
    assert Invocation.objects.filter(hold=hold).count() == 1


def test_it_answers_409_expired_once_expires_at_passed_even_before_the_sweep(api, cap, member_key):
    run, hold = factories.held_hold(cap)
    Hold.objects.filter(pk=hold.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    response = decide(api, hold, body, member_key)
    assert response.status_code == 409 and response.json()["error"] == "expired"
    assert response.json()["expires_at"]
    assert Hold.objects.get(pk=hold.pk).status == "pending"  # the sweep, not the refusal, expires it
    assert not Invocation.objects.filter(hold=hold).exists()


def test_it_checks_conflict_before_validation(api, cap, member_key):
    run, hold = factories.held_hold(cap)
    ok = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    decide(api, hold, ok, member_key)
    assert decide(api, hold, {"nonsense": 1}, member_key).status_code == 409


def test_it_names_every_bad_field(api, cap, member_key):
    run, hold = factories.held_hold(cap, factories.ask_body(3, actions=["approve", "edit", "reject"]))
    body = {
        "items": [
            {"id": "INV-1", "action": "feedback"},
            {"id": "INV-2", "action": "edit", "data": {"payee": "x"}},
            {"id": "INV-2", "action": "approve", "data": {"payee": "x", "amount": "1"}},
            {"id": "NOPE", "action": "approve"},
            {"id": "INV-1", "action": "explode", "extra": True},
        ],
        "comment": 7,
        "decided_by": "mallory",
    }
    response = decide(api, hold, body, member_key)
    assert response.status_code == 422
    fields = {e["field"] for e in response.json()["errors"]}
    assert {"items[4].action", "items[4].extra", "comment", "decided_by"} <= fields, fields
    assert Hold.objects.get(pk=hold.pk).status == "pending"


def test_it_checks_the_decision_against_the_hold(api, cap, member_key):
    run, hold = factories.held_hold(cap, factories.ask_body(3, actions=["approve", "edit", "reject"]))
    body = {
        "items": [
            {"id": "INV-1", "action": "feedback"},
            {"id": "INV-2", "action": "edit", "data": {"payee": "x"}},
            {"id": "INV-2", "action": "approve", "data": {"payee": "x", "amount": "1"}},
            {"id": "NOPE", "action": "approve"},
        ],
    }
    response = decide(api, hold, body, member_key)
    assert response.status_code == 422
    errors = response.json()["errors"]
    fields = [e["field"] for e in errors]
    assert "items[0].action" in fields  # feedback is not offered
    assert "items[1].data" in fields  # an edit sends every asked key
    assert "items[2].id" in fields  # decided twice
    assert "items[2].data" in fields  # data only with edit
    assert "items[3].id" in fields  # not an item of the hold
    assert any(e["field"] == "items" and "INV-3" in e["message"] for e in errors)  # missing


def test_it_requires_a_comment_for_feedback(api, cap, member_key):
    run, hold = factories.held_hold(cap)
    body = {"items": [{"id": "INV-1", "action": "feedback"}, {"id": "INV-2", "action": "approve"}]}
    response = decide(api, hold, body, member_key)
    assert response.status_code == 422 and response.json()["errors"][0]["field"] == "items[0].comment"
    body["comment"] = "please split"
    assert decide(api, hold, body, member_key).status_code == 200


def test_it_takes_the_decider_from_the_key_never_the_body(api, cap, member_key):
    run, hold = factories.held_hold(cap)
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    decide(api, hold, body, member_key)
    assert Hold.objects.get(pk=hold.pk).decided_by == "service account robot"


def test_it_refuses_non_approvers_run_tokens_and_strangers(api, cap, db):
    run, hold = factories.held_hold(cap)
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    viewer_key = factories.account("watcher", role="viewer")[1]
    assert decide(api, hold, body, viewer_key).status_code == 403
    assert decide(api, hold, body, "rqk_unknown").status_code == 401
    assert api.post(f"/v0/holds/{hold.public_id}/decision", body).status_code == 401
    assert decide(api, hold, body, None).status_code == 401
    assert Hold.objects.get(pk=hold.pk).status == "pending"


def test_it_refuses_a_run_token_with_403(api, cap, member_key):
    run = factories.start_run(cap)
    invocation, token = factories.deliver_now(run)
    hold_id = api.post("/v0/holds", factories.ask_body(), token=token).json()["hold_id"]
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    assert api.post(f"/v0/holds/{hold_id}/decision", body, token=token).status_code == 403


def test_it_lets_only_listed_roles_decide(api, db):
    cap = factories.capability(name="wire_money", approvers=["admin"])
    run, hold = factories.held_hold(cap)
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    assert decide(api, hold, body, factories.account("m", role="member")[1]).status_code == 403
    assert decide(api, hold, body, factories.account("a", role="admin")[1]).status_code == 200


def test_it_refuses_self_approval_when_the_capability_forbids_it(api, db):
    cap = factories.capability(name="payroll", self_approval=False)
    account, key = factories.account("starter", role="member")
    run = factories.start_run(cap, actor=factories.actor_for_account(account))
    invocation, token = factories.deliver_now(run)
    hold = Hold.objects.get(pk=int(api.post("/v0/holds", factories.ask_body(), token=token).json()["hold_id"][2:]))
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    assert decide(api, hold, body, key).status_code == 403
    assert decide(api, hold, body, factories.account("other", role="member")[1]).status_code == 200


def test_it_answers_404_for_unknown_holds(api, cap, member_key):
    assert decide(api, Hold(pk=999), {"items": []}, member_key).status_code == 404
    assert api.post("/v0/holds/zzz/decision", {}, key=member_key).json()["error"] == "not_found"


def test_a_decision_while_the_asker_is_still_answering_waits(api, cap, member_key):
    run = factories.start_run(cap)
    invocation, token = factories.deliver_now(run)
    hold_id = api.post("/v0/holds", factories.ask_body(), token=token).json()["hold_id"]
    hold = Hold.objects.get(pk=int(hold_id[2:]))
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    assert decide(api, hold, body, member_key).status_code == 200
    assert resume_of(hold).status == "waiting"
    factories.answer(invocation, {"status": "suspended", "hold_id": hold_id})
    assert resume_of(hold).status == "pending"
    run.refresh_from_db()
    assert run.status == "held"
