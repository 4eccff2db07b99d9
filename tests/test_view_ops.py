"""/ops: queue depth, oldest pending, time to decision, expiring soon, undeliverable with Retry,
disabled endpoints with Enable, decisions per hour as SVG; a fixed query count at any size.
Also the structured logs that ops read (JSON lines with request, run, hold and invocation ids)."""

import datetime as dt
import json
import logging

import pytest
from django.utils import timezone

from holds import logging as rq_logging
from holds import rollup, services
from holds.auth import actor_for_account
from holds.models import AuditEvent, Capability, Hold, Invocation, OpsHour
from holds.services import gateway
from holds.web import ops
from tests import factories

pytestmark = pytest.mark.django_db


def decide(hold, actor, action="approve"):
    items = [{"id": f"INV-{n + 1}", "action": action} for n in range(hold.item_count)]
    return services.hold_decide(hold_id=hold.pk, actor=actor, body={"items": items})


def undeliverable_resume(hold, settings):
    settings.RQ_RETRY_SCHEDULE = [0]
    invocation = Invocation.objects.get(hold=hold, kind="resume")
    claim = services.invocation_claim(invocation_id=invocation.id)
    services.invocation_record(
        invocation_id=invocation.id, attempt=claim.attempt, outcome=services.Outcome(kind="retry", error="refused")
    )
    invocation.refresh_from_db()
    assert invocation.status == Invocation.Status.UNDELIVERABLE
    return invocation


@pytest.fixture
def robot(db):
    return actor_for_account(factories.account("robot", role="admin")[0])


def some_data(settings, robot, n=1):
    """n of everything the page shows: pending, expiring, decided, expired, undeliverable, disabled."""
    cap = Capability.objects.filter(name="pay_invoices").first() or factories.capability()
    Capability.objects.filter(pk=cap.pk).update(endpoint_disabled_at=None)  # disabled again below
    for _ in range(n):
        factories.held_hold(cap)
        factories.held_hold(cap, factories.ask_body(expires_in=1800))  # expires within the hour
        _, decided = factories.held_hold(cap)
        decide(decided, robot)
        undeliverable_resume(decided, settings)
        _, gone = factories.held_hold(cap)
        Hold.objects.filter(pk=gone.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    services.holds_expire_due()
    Capability.objects.filter(pk=cap.pk).update(endpoint_disabled_at=timezone.now())
    return cap


def test_it_sends_anonymous_people_to_sign_in(client):
    response = client.get("/ops")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_it_shows_the_queue_health(client, admin_user, settings, robot):
    cap = some_data(settings, robot)
    client.force_login(admin_user)
    response = client.get("/ops")
    assert response.status_code == 200
    page = response.content.decode()
    context = response.context
    assert [(row["capability"].name, row["count"]) for row in context["pending"]] == [("pay_invoices", 2)]
    assert context["expiring_count"] == 1 and context["undeliverable_count"] == 1
    assert [row["capability"].pk for row in context["disabled"]] == [cap.pk]
    assert context["day"]["decided"] == 1 and context["day"]["expired"] == 1
    assert context["day"]["share_text"] == "50%"
    assert "Retry</button>" in page and "Enable</button>" in page
    assert '<svg viewBox="0 0 720 200"' in page and 'class="bar-decided"' in page and 'class="bar-expired"' in page
    assert 'hx-get="/ops/fragment"' in page and 'hx-trigger="every 10s"' in page


def test_it_hides_retry_and_enable_from_viewers(client, viewer, settings, robot):
    some_data(settings, robot)
    client.force_login(viewer)
    page = client.get("/ops").content.decode()
    assert "Retry</button>" not in page and "Enable</button>" not in page
    assert "admins retry" in page


def test_it_serves_its_fragment_for_the_refresh(client, member, settings, robot):
    some_data(settings, robot)
    client.force_login(member)
    for response in (client.get("/ops/fragment"), client.get("/ops", headers={"HX-Request": "true"})):
        body = response.content.decode()
        assert response.status_code == 200
        assert body.lstrip().startswith('<div id="ops-body"') and "<html" not in body


def test_it_retries_an_undeliverable_invocation_for_admins_only(client, admin_user, member, settings, robot):
    some_data(settings, robot)
    invocation = Invocation.objects.get(status=Invocation.Status.UNDELIVERABLE)
    client.force_login(member)
    assert client.post(f"/ops/invocations/{invocation.id}/retry").status_code == 403
    invocation.refresh_from_db()
    assert invocation.status == Invocation.Status.UNDELIVERABLE
    client.force_login(admin_user)
    response = client.post(f"/ops/invocations/{invocation.id}/retry")
    assert response.status_code == 303 and response["Location"] == "/ops"
    invocation.refresh_from_db()
    assert invocation.status == Invocation.Status.PENDING and invocation.attempts == 0
    assert AuditEvent.objects.filter(kind="invocation.retried", actor="alice", invocation_id_ref=invocation.id).exists()
    # A second click finds nothing to retry and says so.
    again = client.post(f"/ops/invocations/{invocation.id}/retry", follow=True)
    assert "not undeliverable" in again.content.decode()


def test_it_enables_a_disabled_endpoint(client, admin_user, settings, robot):
    cap = some_data(settings, robot)
    client.force_login(admin_user)
    response = client.post(f"/ops/capabilities/{cap.pk}/enable")
    assert response.status_code == 303
    cap.refresh_from_db()
    assert cap.endpoint_disabled_at is None
    assert AuditEvent.objects.filter(kind="capability.endpoint_enabled", actor="alice").exists()
    assert client.get("/ops").context["disabled"] == []


def test_it_shows_a_stalled_endpoint(client, member, robot):
    cap = factories.capability()
    other = factories.capability(name="send_email")
    client.force_login(member)
    assert client.get("/ops").context["stalled"] == []
    Capability.objects.filter(pk=cap.pk).update(endpoint_stalled_at=timezone.now() - dt.timedelta(minutes=3))
    response = client.get("/ops")
    assert [c.pk for c in response.context["stalled"]] == [cap.pk] and other.pk != cap.pk
    page = response.content.decode()
    assert "Stalled endpoints" in page and "3m ago" in page


def test_it_shows_time_to_decision_percentiles(client, admin_user, robot):
    cap = factories.capability()
    for minutes in (5, 10, 50):
        _, hold = factories.held_hold(cap)
        Hold.objects.filter(pk=hold.pk).update(created_at=timezone.now() - dt.timedelta(minutes=minutes))
        decide(hold, robot)
    client.force_login(admin_user)
    day = client.get("/ops").context["day"]
    # Buckets 300 < 10 min <= 900 and 1800 < 50 min <= 3600: p50 falls in the first, p90 in the second.
    assert 300 < day["p50"] <= 900 and 1800 < day["p90"] <= 3600
    assert day["p50_text"].endswith("m")


def test_it_interpolates_percentiles_inside_a_bucket():
    counts = {"60": 2, "300": 2}
    assert rollup.percentile(counts, 0.5) == 60
    assert rollup.percentile(counts, 1.0) == 300
    assert rollup.percentile({}, 0.5) is None
    assert rollup.percentile({"+Inf": 1}, 0.5) == 604800


def test_it_charts_48_hours_with_sealed_and_live_hours(admin_user, robot):
    cap = factories.capability()
    _, hold = factories.held_hold(cap)
    decide(hold, robot)
    now = timezone.now()
    chart = ops.chart(rollup.recent(now)["hours"], now)
    assert len(chart["bars"]) == 48 and chart["bars"][-1].decided == 1 and chart["total_decided"] == 1
    assert chart["bars"][-1].h_decided > 0


@pytest.mark.parametrize("hour", [18, 17, 13, 12])
def test_every_hour_label_fits_inside_the_chart(hour):
    # 18:00 in the last slot, centred under its bar, was cut off at the right edge.
    chart = ops.chart({}, dt.datetime(2026, 12, 4, hour, 30, tzinfo=dt.UTC))
    assert [t["label"] for t in chart["ticks"]][-1] == f"{hour // 6 * 6:02d}:00"
    for tick in chart["ticks"]:
        left, right = {
            "middle": (tick["x"] - ops.TICK_HALF_WIDTH, tick["x"] + ops.TICK_HALF_WIDTH),
            "end": (tick["x"] - 2 * ops.TICK_HALF_WIDTH, tick["x"]),
        }[tick["anchor"]]
        assert 0 <= left and right <= chart["width"], tick
    assert chart["ticks"][0]["anchor"] == "middle"


def test_its_windows_and_chart_read_the_same_once_whole_hours_are_sealed(settings, robot):
    some_data(settings, robot, n=3)
    now = timezone.now()
    live = rollup.recent(now)
    assert live["day"][("decided", "")] == 3 and live["week"][("expired", "")] == 3
    assert rollup.rollup(now=now + dt.timedelta(hours=2)) >= 1 and not rollup._events(rollup.sealed_until()).exists()
    sealed = rollup.recent(now)
    assert sealed["day"] == live["day"] and sealed["week"] == live["week"]
    assert {h: c for h, c in sealed["hours"].items() if c} == {h: c for h, c in live["hours"].items() if c}


def test_it_keeps_its_query_count_fixed_whatever_the_data_size(
    client, admin_user, settings, robot, django_assert_num_queries
):
    some_data(settings, robot, n=1)
    client.force_login(admin_user)
    client.get("/ops")  # the session is warm, and so are the sealed sums
    with django_assert_num_queries(13):  # 12, and the escalated holds (issue 34)
        assert client.get("/ops").status_code == 200
    some_data(settings, robot, n=12)
    rollup.rollup(now=timezone.now() + dt.timedelta(hours=2))  # some hours sealed, some live
    factories.held_hold(factories.capability("ship_orders"))  # one more capability, same queries
    with django_assert_num_queries(15):  # a new seal: its sums are read once
        client.get("/ops")
    with django_assert_num_queries(13):
        response = client.get("/ops")
    assert response.context["undeliverable_count"] == 13


def test_it_reads_the_sealed_sums_again_after_each_seal_and_as_the_windows_move():
    def seal(start, decided):  # what rollup._seal writes: the watermark row and the counts
        OpsHour.objects.create(hour=start, metric="sealed", label="", value=rollup.BUCKET.total_seconds())
        OpsHour.objects.create(hour=start, metric="decided", label="", value=decided)

    now = timezone.now()
    first = rollup.floor_hour(now) - rollup.HOUR
    seal(first, 2)
    assert rollup.recent(now)["day"][("decided", "")] == 2
    seal(first + rollup.BUCKET, 3)
    assert rollup.recent(now)["day"][("decided", "")] == 5
    # The remembered sums are copied out, never merged into: the same call reads the same.
    assert rollup.recent(now)["day"][("decided", "")] == 5
    # A day later the first bucket has left the day window but not the week's.
    later = rollup.recent(first + 24 * rollup.HOUR + dt.timedelta(seconds=1))
    assert later["day"][("decided", "")] == 3 and later["week"][("decided", "")] == 5
    # Five minutes on, in the same hour (the same chart), the second bucket has left it too.
    last = rollup.recent(first + 24 * rollup.HOUR + rollup.BUCKET + dt.timedelta(seconds=1))
    assert ("decided", "") not in last["day"] and last["week"][("decided", "")] == 5
    assert rollup.recent(first + 24 * rollup.HOUR)["day"][("decided", "")] == 5


def decision_at(at):
    """A decision's audit event dated `at`, as the write path wrote it then (the model dates events now)."""
    gateway.fetch(
        f"INSERT INTO {AuditEvent._meta.db_table} (at, actor, kind, invocation_id_ref, data)"
        " VALUES (%s, 'robot', 'hold.decided', '', '{}')",
        [at],
    )


def lagging(now):
    """Decisions 30 hours ago (sealed), 5 hours ago (unsealed, past the live limit) and 2 minutes ago
    (live): beat sealed up to a day ago and stopped."""
    for ago in (dt.timedelta(hours=30), dt.timedelta(hours=5), dt.timedelta(minutes=2)):
        decision_at(now - ago)
    assert rollup.rollup(now=now - dt.timedelta(hours=24)) >= 1


def test_it_says_how_far_behind_the_rollup_is_and_counts_only_the_last_minutes_live(client, admin_user):
    now = timezone.now()
    lagging(now)
    client.force_login(admin_user)
    response = client.get("/ops")
    behind = response.context["behind"]
    assert behind["since"] == rollup.sealed_until() <= now - dt.timedelta(hours=24)
    assert behind["left_from"] == behind["since"] and behind["left_until"] >= now - rollup.LIVE_LIMIT
    page = response.content.decode()
    assert 'class="banner banner-warn ops-behind"' in page and "The rollup is 1d 0h behind" in page
    assert "the last 10 minutes are counted live" in page
    # The decision 5 hours ago lies in the unsealed span that the page leaves out; the others count.
    assert (response.context["week"]["decided"], response.context["day"]["decided"]) == (2, 1)
    # Once beat has caught up, everything counts again and the note is gone.
    rollup.rollup()
    response = client.get("/ops")
    assert response.context["behind"] is None and "ops-behind" not in response.content.decode()
    assert (response.context["week"]["decided"], response.context["day"]["decided"]) == (3, 2)


def test_it_says_so_when_the_rollup_never_ran(client, admin_user):
    now = timezone.now()
    decision_at(now - dt.timedelta(hours=5))
    decision_at(now - dt.timedelta(minutes=2))
    client.force_login(admin_user)
    response = client.get("/ops")
    assert response.context["behind"]["since"] == now - dt.timedelta(hours=5)
    assert "The rollup is 5h 00m behind" in response.content.decode()
    assert response.context["day"]["decided"] == 1


def test_it_shows_no_lag_note_while_beat_keeps_up(client, admin_user, robot):
    _, hold = factories.held_hold(factories.capability())
    decide(hold, robot)
    client.force_login(admin_user)
    assert client.get("/ops").context["behind"] is None  # nothing sealed yet, all of it recent
    rollup.rollup()
    response = client.get("/ops")
    assert response.context["behind"] is None and response.context["day"]["decided"] == 1


def test_its_query_count_stays_the_same_when_the_rollup_lags(
    client, admin_user, settings, robot, django_assert_num_queries
):
    some_data(settings, robot, n=3)
    lagging(timezone.now())
    for _ in range(20):  # more unsealed history: still the same queries
        decision_at(timezone.now() - dt.timedelta(hours=3))
    client.force_login(admin_user)
    client.get("/ops")  # the session is warm, and so are the sealed sums
    with django_assert_num_queries(13):
        response = client.get("/ops")
    assert response.context["behind"] is not None


# --- structured logs ------------------------------------------------------------------------------


def test_it_formats_log_records_as_json_lines_with_the_ids_in_context():
    record = logging.LogRecord("holds.test", logging.WARNING, __file__, 1, "sent %s", ("x",), None)
    tokens = rq_logging.bind(request_id="req-1", hold_id=7, run_id=3, invocation_id="inv_abc")
    try:
        rq_logging.ContextFilter().filter(record)
    finally:
        rq_logging.unbind(tokens)
    line = rq_logging.JsonFormatter().format(record)
    entry = json.loads(line)
    assert "\n" not in line
    assert entry["message"] == "sent x" and entry["level"] == "WARNING" and entry["logger"] == "holds.test"
    assert (entry["request_id"], entry["hold_id"], entry["run_id"], entry["invocation_id"]) == (
        "req-1",
        "7",
        "3",
        "inv_abc",
    )
    assert rq_logging.current() == {}


def test_it_gives_each_request_an_id_and_logs_the_hold_of_the_url(client, member, caplog):
    cap = factories.capability()
    _, hold = factories.held_hold(cap)
    client.force_login(member)
    seen = []

    class Catch(logging.Handler):
        def emit(self, record):
            seen.append(record)

    handler = Catch()
    handler.addFilter(rq_logging.ContextFilter())
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    try:
        response = client.get("/holds/h_999999", headers={"X-Request-ID": "trace-42"})
        assert response.status_code == 404
        assert response["X-Request-ID"] == "trace-42"
    finally:
        logger.removeHandler(handler)
    assert seen and seen[-1].request_id == "trace-42" and seen[-1].hold_id == "999999"
    # An unsafe incoming id is replaced by a fresh one.
    generated = client.get(f"/holds/{hold.public_id}", headers={"X-Request-ID": "bad id\nwith newline"})
    assert generated["X-Request-ID"] != "bad id\nwith newline" and len(generated["X-Request-ID"]) == 32


def test_it_shows_a_failing_endpoint_on_a_tile_its_row_and_in_metrics(client, member, robot, settings):
    settings.RQ_METRICS_TOKEN = "t" * 32
    cap = factories.capability()
    client.force_login(member)
    page = client.get("/ops").content.decode()
    assert "endpoint failing" not in page and "Every endpoint answered its last attempts." in page
    Capability.objects.filter(pk=cap.pk).update(
        endpoint_failures=4, endpoint_failing_since=timezone.now() - dt.timedelta(minutes=7)
    )
    response = client.get("/ops")
    assert [c.pk for c in response.context["failing"]] == [cap.pk]
    page = response.content.decode()
    assert "Failing endpoints" in page and "endpoint failing" in page and "7m ago" in page
    metrics = client.get("/metrics", headers={"authorization": "Bearer " + "t" * 32}).content.decode()
    assert f'rq_endpoint_failing{{capability="{cap.name}"}} 1.0' in metrics
    assert f'rq_endpoint_consecutive_failures{{capability="{cap.name}"}} 4.0' in metrics
