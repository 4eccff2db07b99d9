"""GET /v0/holds and GET /v0/holds/{id}: reading, keyset pages, and who may see what."""

import pytest

from holds import paging
from tests import factories

pytestmark = pytest.mark.django_db


def test_it_reads_a_hold_as_its_ask_plus_its_state(api, cap, member_key):
    run, hold = factories.held_hold(cap)
    read = api.get(f"/v0/holds/{hold.public_id}", key=member_key).json()
    asked = factories.ask_body()
    assert read["intent"] == asked["intent"] and read["actions"] == asked["actions"]
    assert read["items"] == asked["items"] and read["details"] == asked["details"] and read["files"] == []
    assert (read["hold_id"], read["run_id"], read["capability"], read["status"]) == (
        hold.public_id,
        run.public_id,
        "pay_invoices",
        "pending",
    )
    assert read["expires_at"] and read["created_at"]
    assert (read["decided_by"], read["decided_at"], read["resume"]) == (None, None, None)


def test_a_token_reads_only_its_own_runs_holds(api, cap):
    run_a = factories.start_run(cap)
    inv_a, token_a = factories.deliver_now(run_a)
    hold_a = api.post("/v0/holds", factories.ask_body(), token=token_a).json()["hold_id"]
    run_b, hold_b = factories.held_hold(cap)
    assert api.get(f"/v0/holds/{hold_a}", token=token_a).status_code == 200
    assert api.get(f"/v0/holds/{hold_b.public_id}", token=token_a).status_code == 404
    listed = api.get("/v0/holds", token=token_a).json()
    assert [h["hold_id"] for h in listed["items"]] == [hold_a]


def test_it_pages_by_keyset_without_gaps_or_repeats(api, cap, member_key, monkeypatch):
    monkeypatch.setattr(paging, "PAGE_SIZE", 3)
    made = [factories.held_hold(cap)[1].public_id for _ in range(7)]
    seen, cursor = [], None
    while True:
        page = api.get("/v0/holds" + (f"?cursor={cursor}" if cursor else ""), key=member_key).json()
        seen += [h["hold_id"] for h in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(made))


def test_it_filters_by_status_and_capability(api, cap, member_key):
    other = factories.capability(name="other")
    factories.held_hold(cap)
    _, theirs = factories.held_hold(other)
    listed = api.get("/v0/holds?capability=other&status=pending", key=member_key).json()["items"]
    assert [h["hold_id"] for h in listed] == [theirs.public_id]
    assert api.get("/v0/holds?status=decided", key=member_key).json()["items"] == []
    assert api.get("/v0/holds?status=bogus", key=member_key).status_code == 422
    assert api.get("/v0/holds?cursor=!!!", key=member_key).status_code == 422


def test_strangers_cannot_read(api, cap):
    _, hold = factories.held_hold(cap)
    assert api.get(f"/v0/holds/{hold.public_id}").status_code == 401
    assert api.get("/v0/holds").status_code == 401


def test_unknown_urls_and_methods_under_v0_answer_json(api, client, member_key):
    missing = client.get("/v0/nothing-here")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    wrong = client.delete("/v0/holds", headers={"authorization": f"Bearer {member_key}"})
    assert wrong.status_code == 405 and wrong.json()["error"] == "method_not_allowed"
