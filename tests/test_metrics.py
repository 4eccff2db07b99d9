"""/metrics: Prometheus text behind a bearer token, with exact values after a scripted day."""

import datetime as dt

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from holds import rollup, services
from holds.auth import actor_for_account
from holds.models import Hold, Invocation
from tests import factories

pytestmark = pytest.mark.django_db
TOKEN = "metrics-token-for-tests"


@pytest.fixture
def token(settings):
    settings.RQ_METRICS_TOKEN = TOKEN
    return TOKEN


def scrape(client) -> dict:
    response = client.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    values = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def value(values, name, **labels):
    return values[(name, tuple(sorted(labels.items())))]


def deliver_resume(hold, outcome: services.Outcome) -> str:
    invocation = Invocation.objects.get(hold=hold, kind="resume")
    claim = services.invocation_claim(invocation_id=invocation.id)
    assert claim is not None
    return services.invocation_record(invocation_id=invocation.id, attempt=claim.attempt, outcome=outcome)


def scripted_day(settings):
    """5 asks, 2 decisions (3 items approve/reject/edit... see below), 1 expiry, 3 resume attempts."""
    pay = factories.capability("pay_invoices")
    ship = factories.capability("ship_orders")
    account, _ = factories.account("robot", role="member")
    robot = actor_for_account(account)
    holds = [factories.held_hold(pay)[1] for _ in range(4)] + [factories.held_hold(ship, factories.ask_body(1))[1]]
    h1, h2, h3 = holds[:3]
    services.hold_decide(
        hold_id=h1.pk,
        actor=robot,
        body={"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "reject"}]},
    )
    services.hold_decide(
        hold_id=h2.pk,
        actor=robot,
        body={
            "items": [
                {"id": "INV-1", "action": "edit", "data": {"payee": "Other", "amount": "1.00"}},
                {"id": "INV-2", "action": "approve"},
            ]
        },
    )
    Hold.objects.filter(pk=h3.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert services.holds_expire_due() == 1
    ok = services.Outcome(kind="answer", answer={"status": "completed", "output": {}}, status_code=200)
    assert deliver_resume(h1, ok) == "answered"
    assert deliver_resume(h2, services.Outcome(kind="retry", error="connection refused")) == "retry"
    settings.RQ_RETRY_SCHEDULE = [0]  # the expiry's resume gives up after one failed try
    assert deliver_resume(h3, services.Outcome(kind="retry", error="connection refused")) == "undeliverable"


def assert_scripted_values(values):
    assert value(values, "rq_holds_pending", capability="pay_invoices") == 1
    assert value(values, "rq_holds_pending", capability="ship_orders") == 1
    assert 0 < value(values, "rq_oldest_pending_seconds", capability="pay_invoices") < 120
    assert value(values, "rq_holds_asked_total") == 5
    assert value(values, "rq_holds_decided_total") == 2
    assert value(values, "rq_decisions_total", action="approve") == 2
    assert value(values, "rq_decisions_total", action="reject") == 1
    assert value(values, "rq_decisions_total", action="edit") == 1
    assert value(values, "rq_decisions_total", action="feedback") == 0
    assert value(values, "rq_holds_expired_total") == 1
    assert value(values, "rq_resume_attempts_total", outcome="answered") == 1
    assert value(values, "rq_resume_attempts_total", outcome="retry") == 1
    assert value(values, "rq_resume_attempts_total", outcome="undeliverable") == 1
    assert value(values, "rq_resume_undeliverable") == 1
    assert value(values, "rq_resume_delivery_latency_seconds_count") == 1
    assert value(values, "rq_resume_delivery_latency_seconds_bucket", le="+Inf") == 1
    assert value(values, "rq_resume_delivery_latency_seconds_bucket", le="60.0") == 1
    assert value(values, "rq_time_to_decision_seconds_count") == 2


def test_it_is_off_without_a_token_setting(client, settings):
    settings.RQ_METRICS_TOKEN = ""
    assert client.get("/metrics", headers={"authorization": "Bearer "}).status_code == 404


def test_it_refuses_a_missing_or_wrong_bearer_token(client, token):
    assert client.get("/metrics").status_code == 401
    response = client.get("/metrics", headers={"authorization": "Bearer wrong"})
    assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", headers={"authorization": f"Basic {TOKEN}"}).status_code == 401


def test_it_counts_a_scripted_set_of_asks_decisions_and_expiries_exactly(client, token, settings):
    scripted_day(settings)
    assert_scripted_values(scrape(client))


def test_it_reads_the_same_numbers_once_the_hours_are_sealed(client, token, settings):
    scripted_day(settings)
    before = scrape(client)
    # Three hours on, every event is in a sealed hour: totals now come from OpsTotal alone.
    assert rollup.rollup(now=timezone.now() + dt.timedelta(hours=3)) >= 2
    assert rollup.sealed_until() > timezone.now()
    after = scrape(client)
    assert_scripted_values(after)
    for key, number in before.items():
        if key[0] != "rq_oldest_pending_seconds":
            assert after[key] == number, key
    # Sealing twice changes nothing: each hour is sealed once.
    assert rollup.rollup(now=timezone.now() + dt.timedelta(hours=3)) == 0
    assert scrape(client)[("rq_holds_asked_total", ())] == 5


def test_it_seals_the_current_hour_in_five_minute_buckets_so_the_live_tail_stays_short(client, token, settings):
    scripted_day(settings)
    now = timezone.now()
    before, recent_before = scrape(client), rollup.recent(now)
    later = timezone.now() + dt.timedelta(minutes=7)
    assert rollup.rollup(now=later) >= 1
    # Sealed up to a 5-minute boundary at least a minute back: no event is left in the live tail.
    until = rollup.sealed_until()
    assert until.minute % 5 == 0 and until.second == 0 and later - dt.timedelta(minutes=6) <= until <= later
    assert not rollup._events(until).exists()
    after, recent_after = scrape(client), rollup.recent(now)
    for key, number in before.items():
        if key[0] != "rq_oldest_pending_seconds":
            assert after[key] == number, key
    # The ops page's windows and chart read the same from sealed rows as from the live tail.
    assert recent_before["day"] and recent_after["day"] == recent_before["day"]
    assert recent_after["week"] == recent_before["week"]
    assert {h: c for h, c in recent_after["hours"].items() if c} == {
        h: c for h, c in recent_before["hours"].items() if c
    }


def test_it_reads_a_fixed_number_of_queries_whatever_the_data_size(client, token, settings, django_assert_num_queries):
    cap = factories.capability()
    factories.held_hold(cap)
    with django_assert_num_queries(6):
        scrape(client)
    scripted_day(settings)
    for _ in range(10):
        factories.held_hold(cap)
    with django_assert_num_queries(6):
        scrape(client)
