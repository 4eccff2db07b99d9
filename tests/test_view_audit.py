"""/audit: admins read the log, filtered by hold, run, actor, kind and time, and export it as CSV."""

import csv
import datetime as dt
import io

import pytest
from django.utils import timezone

from holds import paging, services, spreadsheet
from holds.auth import SYSTEM, actor_for_user
from holds.models import AuditEvent
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def log(admin_user, member):
    """Two holds of one capability, one decided by mona, plus a role change by alice."""
    cap = factories.capability()
    run1, hold1 = factories.held_hold(cap, factories.ask_body(intent="<script>alert(1)</script> pay"))
    run2, hold2 = factories.held_hold(cap)
    services.hold_decide(
        hold_id=hold1.pk,
        actor=actor_for_user(member),
        body={"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "reject"}], "comment": "=1+2"},
    )
    viewer = factories.person("vic", role="viewer")
    services.person_set_role(user_id=viewer.pk, role="member", actor=actor_for_user(admin_user))
    return {"hold1": hold1, "hold2": hold2, "run1": run1, "run2": run2}


def kinds(response):
    return [row["event"].kind for row in response.context["events"]]


def test_it_is_for_admins_only(client, member, log):
    assert client.get("/audit").status_code == 302  # sign in first
    client.force_login(member)
    assert client.get("/audit").status_code == 403
    assert client.get("/audit.csv").status_code == 403


def test_it_lists_the_newest_first_and_escapes_what_agents_wrote(client, admin_user, log):
    client.force_login(admin_user)
    response = client.get("/audit")
    assert response.status_code == 200
    ids = [row["event"].pk for row in response.context["events"]]
    assert ids == sorted(ids, reverse=True) and len(ids) == AuditEvent.objects.count()
    page = response.content.decode()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_it_filters_by_hold_run_actor_and_kind(client, admin_user, log):
    client.force_login(admin_user)
    hold1, run2 = log["hold1"], log["run2"]
    by_hold = client.get("/audit", {"hold": hold1.public_id})
    assert set(kinds(by_hold)) == {"hold.asked", "hold.decided", "run.held"}
    assert all(row["event"].hold_id_ref == hold1.pk for row in by_hold.context["events"])
    assert kinds(client.get("/audit", {"hold": str(hold1.pk)})) == kinds(by_hold)  # "12" works like "h_12"
    by_run = client.get("/audit", {"run": run2.public_id})
    assert all(row["event"].run_id_ref == run2.pk for row in by_run.context["events"])
    assert "run.started" in kinds(by_run) and "hold.decided" not in kinds(by_run)
    assert kinds(client.get("/audit", {"actor": "mona"})) == ["hold.decided"]
    assert kinds(client.get("/audit", {"actor": "alice"})) == ["person.role_changed"]
    assert set(kinds(client.get("/audit", {"kind": "hold."}))) == {"hold.asked", "hold.decided"}
    assert kinds(client.get("/audit", {"kind": "person.role_changed"})) == ["person.role_changed"]


def test_it_filters_by_time(client, admin_user, log):
    client.force_login(admin_user)
    now = timezone.now()
    later = (now + dt.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M")
    earlier = (now - dt.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M")
    assert kinds(client.get("/audit", {"since": later})) == []
    assert len(kinds(client.get("/audit", {"since": earlier, "until": later}))) == AuditEvent.objects.count()
    assert kinds(client.get("/audit", {"until": earlier})) == []


def test_it_says_which_filter_is_wrong(client, admin_user, log):
    client.force_login(admin_user)
    response = client.get("/audit", {"hold": "nope", "since": "yesterday"})
    assert response.status_code == 422
    assert "Hold: an id like h_12." in response.content.decode()
    assert client.get("/audit.csv", {"run": "x_1"}).status_code == 400


def test_it_pages_older_events_by_id(client, admin_user, db):
    AuditEvent.objects.bulk_create(
        AuditEvent(kind="test.event", actor="system", data={"n": n}) for n in range(paging.PAGE_SIZE + 5)
    )
    client.force_login(admin_user)
    first = client.get("/audit", {"kind": "test.event"})
    assert len(first.context["events"]) == paging.PAGE_SIZE and first.context["next_url"]
    second = client.get(first.context["next_url"])
    assert len(second.context["events"]) == 5
    seen = {r["event"].pk for r in first.context["events"]} | {r["event"].pk for r in second.context["events"]}
    assert len(seen) == paging.PAGE_SIZE + 5
    assert not second.context["next_url"]


def test_it_exports_the_filtered_log_as_csv_without_formulas(client, admin_user, log):
    client.force_login(admin_user)
    response = client.get("/audit.csv", {"hold": log["hold1"].public_id})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"].startswith('attachment; filename="audit-')
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0] == ["id", "at", "actor", "kind", "run", "hold", "invocation", "data"]
    assert {row[3] for row in rows[1:]} == {"hold.asked", "hold.decided", "run.held"}
    assert all(row[5] == log["hold1"].public_id for row in rows[1:])
    decided = next(row for row in rows[1:] if row[3] == "hold.decided")
    assert decided[2] == "mona" and '"comment": "=1+2"' in decided[7]
    # A cell that a spreadsheet would run as a formula starts with a quote.
    assert spreadsheet.safe_cell("=HYPERLINK(1)") == "'=HYPERLINK(1)" and spreadsheet.safe_cell("ok") == "ok"


def test_it_exports_everything_when_unfiltered(client, admin_user, log):
    services.audit("test.system", SYSTEM)
    client.force_login(admin_user)
    rows = list(csv.reader(io.StringIO(b"".join(client.get("/audit.csv").streaming_content).decode())))
    assert len(rows) - 1 == AuditEvent.objects.count()


def test_a_csv_cell_a_spreadsheet_would_run_as_a_formula_starts_with_a_quote(client, admin_user):
    AuditEvent.objects.create(kind="person.added", actor="=HYPERLINK(1)", data={})
    AuditEvent.objects.create(kind="person.added", actor="ok", data={})
    client.force_login(admin_user)
    response = client.get("/audit.csv")
    actors = {row[2] for row in csv.reader(io.StringIO(b"".join(response.streaming_content).decode()))}
    assert {"'=HYPERLINK(1)", "ok"} <= actors and "=HYPERLINK(1)" not in actors


def test_it_says_what_happened_in_a_sentence_with_the_data_one_click_away(client, admin_user, log):
    client.force_login(admin_user)
    page = client.get("/audit").content.decode()
    assert "Decided: 1 approved, 1 rejected; comment “=1+2”" in page
    assert "Role of vic: viewer → member" in page
    assert "Asked “&lt;script&gt;alert(1)&lt;/script&gt; pay”: 2 items, to decide within" in page
    # The JSON is still there, folded: a details element per event, closed.
    assert page.count("<details><summary>Details</summary>") == len(client.get("/audit").context["events"])
    assert '"actions": {' not in page.split("<details>")[0]


def test_a_holds_timeline_has_asked_seen_claimed_extended_reminded_decided_delivered(
    client, admin_user, member, django_assert_num_queries
):
    from holds.models import Notification

    cap = factories.capability()
    run, hold = factories.held_hold(cap)
    client.force_login(member)
    for _ in range(3):  # the page's polls: seen once
        client.post(f"/holds/{hold.public_id}/presence")
    actor = actor_for_user(member)
    services.hold_claim(hold_id=hold.pk, actor=actor)
    services.hold_extend(hold_id=hold.pk, actor=actor, body={"expires_in": 2 * 86400, "reason": "ask the bank"})
    Notification.objects.create(hold=hold, kind="reminder", channel="email", sent_at=timezone.now())
    decision = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    services.hold_decide(hold_id=hold.pk, actor=actor, body=decision)
    invocation, _ = factories.deliver_now(run)
    factories.answer(invocation, {"status": "completed", "output": {}})
    client.force_login(admin_user)
    response = client.get(f"/audit?hold={hold.public_id}")
    words = [step.word for step in response.context["timeline"]]
    assert words == ["asked", "held", "seen", "claimed", "extended", "reminded", "decided", "delivered"], words
    page = response.content.decode()
    assert "Extended by 2 days, now due" in page and "ask the bank" in page
    assert "Decision sent to the agent, attempt 1: the agent took it (HTTP 200)" in page
    assert f'Timeline of <a href="/holds/{hold.public_id}">{hold.public_id}</a>' in page
    assert "Timeline of" not in client.get("/audit").content.decode()
    # The timeline is three indexed queries (events, notifications, attempts) on top of the page's,
    # the same for a hold with one event as for this one.
    other = factories.held_hold(cap)[1]
    count = len(_queries(client, f"/audit?hold={hold.public_id}"))
    assert len(_queries(client, f"/audit?hold={other.public_id}")) == count
    assert count == len(_queries(client, "/audit?kind=hold.asked")) + 3
    with django_assert_num_queries(count):
        client.get(f"/audit?hold={hold.public_id}")


def _queries(client, url):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return ctx.captured_queries
