"""Approve by confidence: the server's preview of which items a threshold approves, and why the rest stay."""

import pytest

from holds.models import Capability
from tests import factories

pytestmark = pytest.mark.django_db


def body(actions=("approve", "edit", "reject", "feedback")):
    items = [
        {"id": "HIGH", "title": "High", "data": {"a": 1, "b": 2}, "confidence": {"a": 0.97, "b": 0.93}},
        {"id": "MID", "title": "Mid", "data": {"a": 1}, "confidence": {"a": 0.85}},
        {"id": "LOW", "title": "Low", "data": {"a": 1, "b": 2}, "confidence": {"a": 0.99, "b": 0.4}},
        {"id": "NONE", "title": "No confidence", "data": {"a": 1}},
        {"id": "HID", "title": "Pay\u200b Acme", "data": {"a": 1}, "confidence": {"a": 1.0}},
    ]
    return factories.ask_body(items=items, actions=list(actions))


def preview(client, hold, threshold):
    return client.post(f"/holds/{hold.public_id}/by-confidence", {"threshold": threshold})


def test_the_preview_lists_approved_items_and_why_the_others_stay(client, cap, member):
    run, hold = factories.held_hold(cap, body())
    client.force_login(member)
    page = client.get(f"/holds/{hold.public_id}").content.decode()
    assert 'id="by-confidence"' in page and '<option value="0.9" selected>' in page
    html = preview(client, hold, "0.9").content.decode()
    approved, stay = html.split("Stay undecided")
    assert "HIGH" in approved and "lowest confidence 0.93" in approved
    assert "MID" in stay and "lowest confidence 0.85 is below 0.9" in stay
    assert "LOW" in stay and "lowest confidence 0.4 is below 0.9" in stay
    assert "NONE" in stay and "no confidence stated, and no confidence_default" in stay
    assert "HID" in stay and "hidden characters" in stay and "always stays" in stay
    assert 'data-approve="item-0"' in html  # HIGH, the first asked: only its radio is set
    html = preview(client, hold, "0.8").content.decode()
    assert "<strong>2</strong> items at or above 0.8 would be approved" in html
    assert 'data-approve="item-0 item-1"' in html


def test_confidence_default_counts_for_items_without_confidence_but_never_for_flagged_ones(client, cap, member):
    Capability.objects.filter(pk=cap.pk).update(confidence_default=1.0)
    run, hold = factories.held_hold(cap, body())
    client.force_login(member)
    html = preview(client, hold, "1.0").content.decode()
    approved, stay = html.split("Stay undecided")
    assert "NONE" in approved and "(the capability&#x27;s default)" in approved
    assert "HID" in stay


def test_bad_thresholds_viewers_and_holds_without_approve(client, cap, member, viewer):
    run, hold = factories.held_hold(cap, body())
    client.force_login(member)
    assert preview(client, hold, "0.6").status_code == 422
    run, no_approve = factories.held_hold(cap, body(actions=("reject", "feedback")))
    assert 'id="by-confidence"' not in client.get(f"/holds/{no_approve.public_id}").content.decode()
    client.force_login(viewer)
    assert preview(client, hold, "0.9").status_code == 403
