"""/calibration: the agent's stated confidence against what reviewers changed, from the rollup."""

import csv
import datetime as dt
import io
import re

import pytest
from django.utils import timezone

from holds import calibration, rollup, services
from holds.auth import actor_for_account
from holds.models import AuditEvent, CalibrationTotal, HoldItem
from holds.schemas import changed_fields
from tests import factories

pytestmark = pytest.mark.django_db


def hold_with(cap, confidences: list[dict]):
    items = [
        {"id": f"I-{n}", "title": f"Item {n}", "data": {"amount": "10.00", "payee": "Acme"}, "confidence": c}
        for n, c in enumerate(confidences)
    ]
    return factories.held_hold(cap, factories.ask_body(items=items))[1]


def decide(hold, actions: list[str], edited: dict | None = None):
    actor = actor_for_account(factories.account(f"bot-{hold.pk}", role="member")[0])
    items = []
    for n, action in enumerate(actions):
        item = {"id": f"I-{n}", "action": action}
        if action == "edit":
            item["data"] = {"amount": "10.00", "payee": "Acme", **(edited or {})}
        items.append(item)
    services.hold_decide(hold_id=hold.pk, actor=actor, body={"items": items, "comment": "no"})


def by_field(rows):
    return {(r.capability, r.field): {c.bucket: (c.edited, c.decisions) for c in r.cells if c.decisions} for r in rows}


def report(now=None):
    return calibration.report(
        capability=None, tail_start=rollup.live_since(rollup.sealed_until(), now or timezone.now())
    )


def test_it_counts_edits_per_field_and_rejects_against_every_field(cap):
    decide(hold_with(cap, [{"amount": 0.95, "payee": 0.6}]), ["edit"], {"amount": "12.00"})
    decide(hold_with(cap, [{"amount": 0.95, "payee": 0.6}]), ["reject"])
    decide(hold_with(cap, [{"amount": 0.3}]), ["feedback"])
    decide(hold_with(cap, [{"amount": 0.75}, {}]), ["approve", "reject"])  # no confidence: not counted
    decide(hold_with(cap, [{"amount": 0.85}]), ["edit"], {})  # an edit that kept the amount
    hold_with(cap, [{"amount": 0.95}])  # pending: not a decision
    rows = report()
    assert by_field(rows) == {
        ("pay_invoices", "amount"): {"0": (1, 1), "0.7": (0, 1), "0.8": (0, 1), "0.9": (2, 2)},
        ("pay_invoices", "payee"): {"0.5": (1, 2)},
    }


def test_items_set_by_approve_by_confidence_are_left_out(cap):
    hold = hold_with(cap, [{"amount": 0.95}, {"amount": 0.95}])
    decide(hold, ["approve", "reject"])
    event = AuditEvent.objects.get(kind="hold.decided", hold_id_ref=hold.pk)
    counts = calibration.tally(None)
    assert counts[cap.pk, "amount", "0.9"][:2] == [2, 1]
    # A decision that lists I-0 as set by approve-by-confidence: only I-1 counts.
    AuditEvent.objects.create(
        kind="hold.decided", actor="x", hold_id_ref=hold.pk, data={"actions": {}, "by_confidence": ["I-0"]}
    )
    assert calibration.tally(event.at + dt.timedelta(microseconds=1))[cap.pk, "amount", "0.9"][:2] == [1, 1]


def test_sealed_spans_and_the_live_tail_add_up_once(cap):
    for _ in range(3):
        decide(hold_with(cap, [{"amount": 0.95}]), ["reject"])
    now = timezone.now()
    # Seal everything so far, as beat does a minute after each bucket ends.
    later = now + dt.timedelta(hours=2)
    while rollup.rollup(now=later):
        pass
    assert CalibrationTotal.objects.get(field="amount", bucket="0.9").decisions == 3
    assert rollup.rollup(now=later) == 0  # sealed once
    rows = report(later)
    assert by_field(rows)[("pay_invoices", "amount")] == {"0.9": (3, 3)}


def test_a_field_is_flagged_only_with_20_decisions_at_0_9_changed_over_20_percent(cap):
    for n in range(19):
        decide(hold_with(cap, [{"amount": 0.95}]), ["reject" if n < 5 else "approve"])
    rows = report()
    assert not rows[0].flagged  # 5 of 19: too few decisions to say
    decide(hold_with(cap, [{"amount": 0.95}]), ["approve"])
    assert report()[0].flagged  # 5 of 20 = 25 %


def test_the_page_shows_chart_table_and_flag_to_anyone_signed_in(client, cap, viewer):
    other = factories.capability(name="refunds")
    for n in range(20):
        decide(hold_with(cap, [{"amount": 0.95, "payee": 0.55}]), ["reject" if n < 6 else "approve"])
    decide(hold_with(other, [{"payee": 0.8}]), ["approve"])
    client.force_login(viewer)
    page = client.get("/calibration").content.decode()
    assert '<svg class="chart" viewBox="0 0 704 432"' in page and 'class="diagonal"' in page
    assert "Overconfident field:" in page
    assert "<code>pay_invoices.amount</code> (6 / 20 at 0.9–1.0 changed or turned down)" in page
    assert "6 / 20" in page and "refunds</td>" in page
    filtered = client.get("/calibration?capability=refunds").content.decode()
    assert "pay_invoices" not in filtered.split("<main")[-1].split("Download CSV")[-1]
    assert "0 / 1" in filtered
    assert client.get("/calibration?capability=nope").status_code == 200


def test_the_chart_says_what_the_table_says_and_tells_fields_apart_without_colour(client, cap, viewer):
    for n in range(20):
        decide(hold_with(cap, [{"amount": 0.95, "payee": 0.55}]), ["reject" if n < 6 else "approve"])
    client.force_login(viewer)
    page = client.get("/calibration").content.decode()
    chart = page.split('<svg class="chart"')[1].split("</svg>")[0]
    table = page.split('id="table-title"')[1]
    # The same figures in the same words: "changed or turned down", "6 / 20", "30 %", the buckets' names.
    assert "Changed or turned down, by stated confidence" in table.split("</h2>")[0]
    assert ">changed or turned down</text>" in chart
    assert "pay_invoices.amount, 0.9–1.0: 6 / 20 changed or turned down (30 %)</title>" in chart
    assert '6 / 20 <span class="muted">(30 %)</span>' in table and "0.9–1.0</th>" in table
    assert ">30 %</text>" not in chart and ">25 %</text>" in chart and ">0.9</text>" in chart
    # Two fields, two styles: a different mark and a different dash, in the chart, legend and table.
    lines = re.findall(r'<polyline points="[^"]+" fill="none" stroke="(#\w+)" class="series"([^/]*)/>', chart)
    assert len(lines) == 2 and lines[0][1] == "" and 'stroke-dasharray="9 4"' in lines[1][1]
    marks = re.findall(r'<path d="M[^"]+?([ahL])[^"]*" class="mark"', chart)
    assert marks == ["a", "h"], "a circle for the first field, a square for the second"
    samples = re.findall(r'<span class="swatch"><svg width="40"[^>]*><line [^>]*stroke="(#\w+)"', page)
    assert samples == [lines[0][0], lines[1][0]] * 2, "legend, then table: the same two samples"
    # Points above the diagonal are overconfident: the chart names that side as the table flags it.
    assert ">overconfident</text>" in chart and '<span class="flag">overconfident</span>' in table


def test_the_csv_has_every_bucket_and_quotes_formula_like_field_names(client, cap, member):
    decide(hold_with(cap, [{"amount": 0.95}]), ["reject"])
    hold = factories.held_hold(
        cap,
        factories.ask_body(items=[{"id": "I-0", "title": "t", "data": {"=cmd": 1}, "confidence": {"=cmd": 0.2}}]),
    )[1]
    actor = actor_for_account(factories.account("csv-bot", role="member")[0])
    services.hold_decide(hold_id=hold.pk, actor=actor, body={"items": [{"id": "I-0", "action": "approve"}]})
    client.force_login(member)
    response = client.get("/calibration.csv?capability=pay_invoices")
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0][:5] == ["capability", "field", "bucket", "decisions", "edited_or_rejected"]
    assert ["pay_invoices", "amount", "0.9-1.0", "1", "1", "1.0000", "0.9500", ""] in rows
    assert rows[1][1] == "'=cmd" and len(rows) == 1 + 2 * 5


def test_signed_out_people_are_sent_to_sign_in(client):
    assert client.get("/calibration").status_code == 302
    assert client.get("/calibration.csv").status_code == 302


def test_an_edit_counts_as_the_last_look_shows_it_2_and_2_0_differ_key_order_does_not(cap):
    # Regression: calibration compared with != (2 == 2.0) while the last look and the decided page
    # compare as JSON (schemas.changed_fields): one rule now, so the two agree.
    data = {"amount": 2, "terms": {"days": 30, "net": True}}
    items = [{"id": "I-0", "title": "Item", "data": data, "confidence": {"amount": 0.95, "terms": 0.95}}]
    hold = factories.held_hold(cap, factories.ask_body(items=items))[1]
    actor = actor_for_account(factories.account("bot", role="member")[0])
    edited = {"amount": 2.0, "terms": {"net": True, "days": 30}}
    services.hold_decide(
        hold_id=hold.pk, actor=actor, body={"items": [{"id": "I-0", "action": "edit", "data": edited}]}
    )
    item = HoldItem.objects.get(hold=hold)
    assert [key for key, _, _ in changed_fields(item.data, item.decided_data)] == ["amount"]
    assert by_field(report()) == {
        ("pay_invoices", "amount"): {"0.9": (1, 1)},
        ("pay_invoices", "terms"): {"0.9": (0, 1)},
    }


def test_the_live_tail_is_tallied_again_only_when_a_decision_joins_it(cap, monkeypatch):
    decide(hold_with(cap, [{"amount": 0.95}]), ["reject"])
    tallied = []
    real = calibration.tally
    monkeypatch.setattr(calibration, "tally", lambda *args: tallied.append(args) or real(*args))
    now = timezone.now()
    assert by_field(report(now)) == {("pay_invoices", "amount"): {"0.9": (1, 1)}}
    assert by_field(report(now)) == {("pay_invoices", "amount"): {"0.9": (1, 1)}}
    assert len(tallied) == 1  # the second view found the same decided events: the same tally
    decide(hold_with(cap, [{"amount": 0.95}]), ["approve"])
    assert by_field(report(now)) == {("pay_invoices", "amount"): {"0.9": (1, 2)}}
    assert len(tallied) == 2


def test_with_the_rollup_behind_the_tail_is_reused_for_a_minute(cap, monkeypatch):
    """Nothing sealed: every view's tail starts LIVE_LIMIT ago. That start moves once a minute, not on every
    request, so views within a minute reuse one tally (bench: calibration with the rollup 24 h behind)."""
    decide(hold_with(cap, [{"amount": 0.95}]), ["reject"])
    assert rollup.sealed_until() is None
    tallied = []
    real = calibration.tally
    monkeypatch.setattr(calibration, "tally", lambda *args: tallied.append(args) or real(*args))
    minute = timezone.now().replace(second=0, microsecond=0)
    for at in (10, 25, 59.5):
        now = minute + dt.timedelta(seconds=at)
        assert by_field(report(now)) == {("pay_invoices", "amount"): {"0.9": (1, 1)}}
        assert len(tallied) == 1, "a view within the same minute tallied the tail again"
        # The tail is never longer than LIVE_LIMIT, and at most a minute shorter.
        assert now - rollup.LIVE_LIMIT <= tallied[0][0] <= now - rollup.LIVE_LIMIT + dt.timedelta(minutes=1)
    report(minute + dt.timedelta(minutes=1, seconds=1))
    assert len(tallied) == 2  # the next minute: a tail that starts a minute later
