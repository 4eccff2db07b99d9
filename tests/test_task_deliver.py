"""Delivering invocations to a real HTTP agent: signing, answers, retries, parking, undeliverable."""

import base64
import datetime as dt
import hashlib
import hmac

import pytest
from django.db import connection
from django.utils import timezone

from holds import delivery, services, tasks
from holds.auth import SYSTEM, actor_for_account, run_token_for
from holds.errors import Forbidden
from holds.models import AuditEvent, Capability, DeliveryAttempt, Hold, Invocation, Run, new_invocation_id
from tests import factories

pytestmark = pytest.mark.django_db


def due_now(invocation_id):
    Invocation.objects.filter(pk=invocation_id).update(next_attempt_at=timezone.now())


def test_it_sends_the_signed_start_body(agent, acap):
    run = factories.start_run(acap, input={"x": 1})
    invocation = Invocation.objects.get(run=run)
    assert delivery.deliver(invocation.id) == "answered"
    request = agent.requests[0]
    assert request["path"] == "/invoke"
    body = request["body"]
    assert body["resume"] is None
    assert body["invocation"] == {
        "id": invocation.id,
        "kind": "start",
        "seq": 1,
        "run_id": run.public_id,
        "capability": "pay_invoices",
        "version": "1",
        "api_url": "http://127.0.0.1:8000",
        "run_token": run_token_for(invocation.id),
        "input": {"x": 1},
        "eval": None,
    }
    headers = {k.lower(): v for k, v in request["headers"].items()}
    assert headers["webhook-id"] == invocation.id
    key = base64.b64decode(factories.SECRET.removeprefix("whsec_"))
    signed = f"{invocation.id}.{headers['webhook-timestamp']}.".encode() + request["raw"]
    expected = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    assert headers["webhook-signature"] == expected
    run.refresh_from_db()
    assert run.status == "completed" and run.output == {}


def test_it_is_safe_to_call_twice(agent, acap):
    run = factories.start_run(acap)
    invocation = Invocation.objects.get(run=run)
    assert delivery.deliver(invocation.id) == "answered"
    assert delivery.deliver(invocation.id) == "not-due"
    assert len(agent.requests) == 1


def test_no_agent_gets_a_cookie_any_agent_set(agent, acap):
    # One HTTP client serves every agent a worker calls: a cookie that one agent set went back to it on
    # every later call, and to every other agent on the same host (a cookie does not name a port).
    from tests.agent_double import AgentDouble

    other = AgentDouble()
    try:
        other_cap = factories.capability(name="other_agent", endpoint=other.url, timeout_seconds=2.0)
        completed = {"status": "completed", "output": {}}
        agent.script = [(200, completed, {"Set-Cookie": "session=agent-a-only; Path=/"})]
        for cap in (acap, other_cap, acap):
            run = factories.start_run(cap)
            assert delivery.deliver(Invocation.objects.get(run=run).id) == "answered"
        sent = [request["headers"] for request in agent.requests + other.requests]
        assert len(sent) == 3
        assert [name for headers in sent for name in headers if name.lower() == "cookie"] == []
    finally:
        other.close()


def test_500s_retry_on_the_schedule_then_deliver_with_the_same_id(agent, acap):
    agent.script = [(500, {}), (500, {}), (503, b"busy"), (200, {"status": "completed", "output": {"ok": True}})]
    run = factories.start_run(acap)
    invocation = Invocation.objects.get(run=run)
    schedule = [5, 30, 120]
    for attempt, wait in enumerate(schedule, start=1):
        before = timezone.now()
        assert delivery.deliver(invocation.id) == "retry"
        invocation.refresh_from_db()
        delay = (invocation.next_attempt_at - before).total_seconds()
        assert 0.8 * wait - 0.5 <= delay <= 1.2 * wait + 0.5, (attempt, delay)
        assert delivery.deliver(invocation.id) == "not-due"  # not before its time
        due_now(invocation.id)
    assert delivery.deliver(invocation.id) == "answered"
    assert {r["headers"]["webhook-id"] for r in agent.requests} == {invocation.id}
    assert len({r["headers"]["webhook-signature"] for r in agent.requests}) >= 1
    assert list(DeliveryAttempt.objects.filter(invocation=invocation).values_list("status_code", "outcome")) == [
        (500, "retry"),
        (500, "retry"),
        (503, "retry"),
        (200, "answered"),
    ]
    run.refresh_from_db()
    assert run.status == "completed" and run.output == {"ok": True}


def test_retry_after_is_honoured(agent, acap):
    agent.script = [(429, {}, {"Retry-After": "90"})]
    invocation = Invocation.objects.get(run=factories.start_run(acap))
    before = timezone.now()
    assert delivery.deliver(invocation.id) == "retry"
    invocation.refresh_from_db()
    assert 89 <= (invocation.next_attempt_at - before).total_seconds() <= 92  # not the schedule's 5 s


def test_an_agent_down_past_the_schedule_is_undeliverable_until_retried(agent, acap, admin_key, api):
    agent.default = (502, {})
    invocation = Invocation.objects.get(run=factories.start_run(acap))
    results = []
    for _ in range(4):
        results.append(delivery.deliver(invocation.id))
        due_now(invocation.id)
    assert results == ["retry", "retry", "retry", "undeliverable"]
    assert Invocation.objects.get(pk=invocation.pk).status == "undeliverable"
    agent.default = (200, {"status": "completed", "output": {}})
    response = api.post(f"/v0/invocations/{invocation.id}/retry", {}, key=admin_key)
    assert response.status_code == 200 and response.json()["status"] == "pending"
    assert delivery.deliver(invocation.id) == "answered"
    assert api.post(f"/v0/invocations/{invocation.id}/retry", {}, key=admin_key).status_code == 409


def test_garbage_answers_are_failed_attempts_with_a_readable_error(agent, acap):
    agent.script = [(200, b"<html>oops</html>"), (200, {"status": "done"})]
    invocation = Invocation.objects.get(run=factories.start_run(acap))
    assert delivery.deliver(invocation.id) == "retry"
    assert "not JSON" in Invocation.objects.get(pk=invocation.pk).last_error
    due_now(invocation.id)
    assert delivery.deliver(invocation.id) == "retry"
    assert "expected status" in Invocation.objects.get(pk=invocation.pk).last_error


def test_a_4xx_fails_the_run_with_the_agents_reason(agent, acap):
    agent.script = [(400, b"unknown capability pay_invoices")]
    run = factories.start_run(acap)
    assert delivery.deliver(Invocation.objects.get(run=run).id) == "failed"
    run.refresh_from_db()
    assert run.status == "failed" and "HTTP 400" in run.error and "unknown capability" in run.error


def test_suspended_must_name_the_hold_this_invocation_asked(agent, acap):
    agent.script = [(200, {"status": "suspended", "hold_id": "h_999"})]
    run = factories.start_run(acap)
    delivery.deliver(Invocation.objects.get(run=run).id)
    run.refresh_from_db()
    assert run.status == "failed" and "h_999" in run.error and "asked no hold" in run.error


def test_completed_output_is_checked_against_the_output_schema(agent, db):
    cap = factories.capability(name="typed", endpoint=agent.url, output_schema={"type": "object", "required": ["paid"]})
    agent.script = [(200, {"status": "completed", "output": {"nope": 1}})]
    run = factories.start_run(cap)
    delivery.deliver(Invocation.objects.get(run=run).id)
    run.refresh_from_db()
    assert run.status == "failed" and "'paid' is a required property" in run.error


def _recorded(run: Run) -> dict:
    """What recording a run's answer wrote, with its ids and times left out, to compare two runs."""
    invocation = Invocation.objects.get(run=run)
    run.refresh_from_db()
    attempts = DeliveryAttempt.objects.filter(invocation=invocation)
    events = AuditEvent.objects.filter(run_id_ref=run.pk).exclude(kind="run.started").order_by("id")
    return {
        "invocation": (invocation.status, invocation.answer, invocation.last_error, invocation.lease_until),
        "answered": invocation.answered_at is not None,
        "run": (run.status, run.output, run.error, run.finished_at is not None),
        "attempts": list(attempts.values_list("number", "status_code", "outcome", "error")),
        "events": [
            (e.kind, e.actor, e.hold_id_ref, e.invocation_id_ref.replace(invocation.id, "this"), e.data) for e in events
        ],
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("schema", [None, {"type": "object", "required": ["paid"]}])
def test_a_completed_answer_is_one_round_trip_that_writes_what_the_general_path_writes(
    agent, schema, count_round_trips
):
    cap = factories.capability(name="typed", endpoint=agent.url, output_schema=schema)
    agent.default = lambda request: (200, {"status": "completed", "output": {"paid": 2.50, "note": "<b>x</b>"}})
    at_once, general = factories.start_run(cap), factories.start_run(cap)
    first = Invocation.objects.get(run=at_once)
    with count_round_trips() as sent:
        assert delivery.deliver(first.id) == "answered"
    assert sent.round_trips == 2  # the claim, then the answer with its locks
    # The general path: the same answer recorded without the worker's claim.
    claim = services.invocation_claim(invocation_id=Invocation.objects.get(run=general).id)
    outcome = delivery._call(claim, agent.url + "/invoke", None)
    assert services.invocation_record(invocation_id=claim.invocation.id, attempt=1, outcome=outcome) == "answered"
    assert _recorded(at_once) == _recorded(general)
    assert _recorded(at_once)["run"] == ("completed", {"paid": 2.50, "note": "<b>x</b>"}, "", True)
    assert [kind for kind, *_ in _recorded(at_once)["events"]] == ["run.completed", "invocation.attempt"]


@pytest.mark.django_db(transaction=True)
def test_an_output_schema_changed_while_the_agent_answered_is_the_one_its_output_must_meet(agent):
    cap = factories.capability(name="typed", endpoint=agent.url, output_schema=None)

    def change_then_complete(request):
        Capability.objects.filter(pk=cap.pk).update(output_schema={"type": "object", "required": ["paid"]})
        return 200, {"status": "completed", "output": {"nope": 1}}

    agent.script = [change_then_complete]
    run = factories.start_run(cap)
    assert delivery.deliver(Invocation.objects.get(run=run).id) == "failed"
    run.refresh_from_db()
    assert run.status == "failed" and "'paid' is a required property" in run.error


def ask_then(status, body):
    """An agent step that asks a hold with its token (over the real API) and then answers."""

    def step(request):
        from django.test import Client

        token = request["body"]["invocation"]["run_token"]
        response = Client().post(
            "/v0/holds",
            data=factories.ask_body(),
            content_type="application/json",
            headers={"x-agentos-run-token": token},
        )
        hold_id = response.json()["hold_id"]
        return status, (body(hold_id) if callable(body) else body)

    return step


@pytest.mark.django_db(transaction=True)
def test_ask_suspend_decide_resume_complete(agent, acap, member_key, api):
    agent.script = [ask_then(200, lambda h: {"status": "suspended", "hold_id": h})]
    run = factories.start_run(acap)
    start = Invocation.objects.get(run=run)
    delivery.deliver(start.id)
    run.refresh_from_db()
    hold = Hold.objects.get(run=run)
    assert run.status == "held" and hold.status == "pending"
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "reject"}], "comment": "no"}
    api.post(f"/v0/holds/{hold.public_id}/decision", body, key=member_key)
    resume = Invocation.objects.get(hold=hold)
    agent.script = [(200, {"status": "completed", "output": {"paid": ["INV-1"]}})]
    assert delivery.deliver(resume.id) == "answered"
    sent = agent.requests[-1]["body"]
    assert sent["invocation"]["kind"] == "resume" and sent["invocation"]["seq"] == 2
    assert sent["resume"]["items"][1] == {
        "id": "INV-2",
        "action": "reject",
        "data": factories.ask_body()["items"][1]["data"],
        "comment": "no",
    }
    run.refresh_from_db()
    assert run.status == "completed" and run.output == {"paid": ["INV-1"]}


@pytest.mark.django_db(transaction=True)
def test_an_agent_that_asked_and_then_died_counts_as_suspended(agent, acap):
    agent.script = [ask_then(500, {})]
    run = factories.start_run(acap)
    start = Invocation.objects.get(run=run)
    assert delivery.deliver(start.id) == "answered"
    run.refresh_from_db()
    start.refresh_from_db()
    assert run.status == "held" and start.status == "answered" and "HTTP 500" in start.last_error
    assert len(agent.requests) == 1  # not retried: a person already has the question


@pytest.mark.django_db(transaction=True)
def test_completing_after_asking_cancels_the_hold(agent, acap):
    agent.script = [ask_then(200, {"status": "completed", "output": {}})]
    run = factories.start_run(acap)
    delivery.deliver(Invocation.objects.get(run=run).id)
    assert Hold.objects.get(run=run).status == "cancelled"
    assert Run.objects.get(pk=run.pk).status == "completed"


@pytest.mark.django_db(transaction=True)
def test_a_decision_before_the_suspended_answer_is_cancelled_if_the_agent_completes(agent, acap, member_key):
    account = factories.account("fast", role="member")[0]

    def decide_then_complete(request):
        from django.test import Client

        token = request["body"]["invocation"]["run_token"]
        hold_id = (
            Client()
            .post(
                "/v0/holds",
                data=factories.ask_body(),
                content_type="application/json",
                headers={"x-agentos-run-token": token},
            )
            .json()["hold_id"]
        )
        services.hold_decide(
            hold_id=int(hold_id[2:]),
            actor=actor_for_account(account),
            body={"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]},
        )
        return 200, {"status": "completed", "output": {}}

    agent.script = [decide_then_complete]
    run = factories.start_run(acap)
    delivery.deliver(Invocation.objects.get(run=run).id)
    resume = Invocation.objects.get(run=run, kind="resume")
    assert resume.status == "cancelled"
    assert len(agent.requests) == 1


def test_410_parks_the_invocation_and_disables_the_endpoint_until_enabled(agent, acap):
    agent.script = [(410, b"gone")]
    first = Invocation.objects.get(run=factories.start_run(acap))
    assert delivery.deliver(first.id) == "parked"
    assert Capability.objects.get(pk=acap.pk).endpoint_disabled_at is not None
    second = Invocation.objects.get(run=factories.start_run(acap))
    assert delivery.deliver(second.id) == "not-due"
    assert Invocation.objects.get(pk=second.pk).status == "parked"
    assert len(agent.requests) == 1
    admin = factories.person("root", role="admin")
    services.capability_enable(capability_id=acap.pk, actor=factories.actor_for_user(admin))
    assert delivery.deliver(first.id) == "answered" and delivery.deliver(second.id) == "answered"
    assert Run.objects.filter(status="failed").count() == 0


def test_a_timeout_is_a_retry(agent, acap):
    import time

    def slow(request):
        time.sleep(2.5)
        return 200, {"status": "completed", "output": {}}

    agent.script = [slow]
    invocation = Invocation.objects.get(run=factories.start_run(acap))
    assert delivery.deliver(invocation.id) == "retry"
    assert "no answer within 2s" in Invocation.objects.get(pk=invocation.pk).last_error


def stall(acap, agent, *, answer_after: float, timeout: float = 0.3):
    """Sets the capability's timeout short and makes the agent's next answer come later than that."""
    import time

    def slow(request):
        time.sleep(answer_after)
        return 200, {"status": "completed", "output": {}}

    Capability.objects.filter(pk=acap.pk).update(timeout_seconds=timeout)
    agent.script = [slow]


def test_a_timeout_stalls_the_endpoint_until_it_answers_and_meanwhile_one_delivery_tries_it(agent, acap, settings):
    settings.RQ_STALLED_WAIT = 30
    stall(acap, agent, answer_after=0.6)
    first = Invocation.objects.get(run=factories.start_run(acap))
    assert delivery.deliver(first.id) == "retry"
    stalled_at = Capability.objects.get(pk=acap.pk).endpoint_stalled_at
    assert stalled_at is not None
    assert AuditEvent.objects.filter(kind="capability.endpoint_stalled", invocation_id_ref=first.id).count() == 1

    # Another delivery holds the probe: this one is not sent and waits, with no attempt counted.
    assert services.endpoint_take_probe(capability=Capability.objects.get(pk=acap.pk))
    second = Invocation.objects.get(run=factories.start_run(acap))
    before = timezone.now()
    assert delivery.deliver(second.id) == "deferred"
    second.refresh_from_db()
    assert (second.status, second.attempts, second.first_sent_at, second.lease_until) == ("pending", 0, None, None)
    assert before + dt.timedelta(seconds=24) <= second.next_attempt_at <= before + dt.timedelta(seconds=37)
    assert "another delivery is trying it" in second.last_error
    assert not DeliveryAttempt.objects.filter(invocation=second).exists() and len(agent.requests) == 1
    assert services.invocations_due() == []  # it is due again only after the wait

    # The probe's lease ran out (its worker died): the next delivery tries the endpoint, which answers.
    Capability.objects.filter(pk=acap.pk).update(endpoint_probe_until=timezone.now() - dt.timedelta(seconds=1))
    due_now(second.id)
    assert delivery.deliver(second.id) == "answered"
    cap = Capability.objects.get(pk=acap.pk)
    assert (cap.endpoint_stalled_at, cap.endpoint_probe_until) == (None, None)
    assert AuditEvent.objects.filter(kind="capability.endpoint_answering", invocation_id_ref=second.id).exists()
    # A second timeout while stalled keeps the first time it stalled.
    stall(acap, agent, answer_after=0.6)
    Capability.objects.filter(pk=acap.pk).update(endpoint_stalled_at=stalled_at)
    due_now(first.id)
    assert delivery.deliver(first.id) == "retry"
    assert Capability.objects.get(pk=acap.pk).endpoint_stalled_at == stalled_at
    assert AuditEvent.objects.filter(kind="capability.endpoint_stalled").count() == 1


def test_an_error_answer_also_ends_a_stall(agent, acap):
    Capability.objects.filter(pk=acap.pk).update(endpoint_stalled_at=timezone.now())
    agent.script = [(503, b"busy")]
    invocation = Invocation.objects.get(run=factories.start_run(acap))
    assert delivery.deliver(invocation.id) == "retry"  # it took the free probe and was sent
    assert Capability.objects.get(pk=acap.pk).endpoint_stalled_at is None and len(agent.requests) == 1


def deliver_at_once(ids) -> dict:
    """Delivers each invocation in its own thread on its own connection, all released together;
    returns the results by id."""
    import threading

    barrier, results = threading.Barrier(len(ids)), {}

    def one(invocation_id):
        try:
            barrier.wait()
            results[invocation_id] = delivery.deliver(invocation_id)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.mark.django_db(transaction=True)
def test_while_an_endpoint_is_stalled_concurrent_deliveries_send_one_at_a_time(agent, acap, settings):

    # The probe's attempt lasts two seconds, long enough for every thread to find it taken even on a
    # busy machine (when it times out the probe is freed, and a thread that late would send too).
    stall(acap, agent, answer_after=2.5, timeout=2.0)
    Capability.objects.filter(pk=acap.pk).update(endpoint_stalled_at=timezone.now())
    ids = [Invocation.objects.get(run=factories.start_run(acap)).id for _ in range(6)]
    results = deliver_at_once(ids)
    assert sorted(results.values()) == ["deferred"] * 5 + ["retry"]
    assert len(agent.requests) == 1
    assert DeliveryAttempt.objects.filter(invocation_id__in=ids).count() == 1


def _slow_endpoint_deliveries(agent, acap, settings, count: int, *, answered: bool = True):
    """`count` due start invocations of an agent that answers after 2.5 s (slow, not timing out),
    with a cap of two calls once one is slow (0.5 s); returns their ids, the results by id, and a
    function that makes a thread delivering one of them on its own connection (which notes when the
    delivery ended, by id, in `ended`). With `answered`, the
    endpoint has answered this process once already (a quick answer to another run)."""
    import threading
    import time

    settings.RQ_ENDPOINT_MAX_IN_FLIGHT, settings.RQ_SLOW_CALL, settings.RQ_BUSY_WAIT = 2, 0.5, 5
    settings.RQ_UNANSWERED_IN_FLIGHT = 2
    Capability.objects.filter(pk=acap.pk).update(timeout_seconds=10)
    if answered:
        assert delivery.deliver(Invocation.objects.get(run=factories.start_run(acap)).id) == "answered"
        agent.requests.clear()

    def slow(request):
        time.sleep(2.5)
        return 200, {"status": "completed", "output": {}}

    agent.default = slow
    ids = [Invocation.objects.get(run=factories.start_run(acap)).id for _ in range(count)]
    results, ended = {}, {}

    def one(invocation_id):
        try:
            results[invocation_id] = delivery.deliver(invocation_id)
            ended[invocation_id] = time.monotonic()
        finally:
            connection.close()

    return ids, results, ended, lambda invocation_id: threading.Thread(target=one, args=(invocation_id,))


@pytest.mark.django_db(transaction=True)
def test_one_endpoint_takes_at_most_its_share_of_a_workers_threads(agent, acap, settings):
    import time

    ids, results, ended, thread = _slow_endpoint_deliveries(agent, acap, settings, 6)
    # The endpoint has answered before. Three calls start together: none is slow yet, so all three go
    # out (no cap without a slow call). Once they have waited over RQ_SLOW_CALL, three more come: the
    # cap of two is passed, they wait.
    first = [thread(i) for i in ids[:3]]
    for t in first:
        t.start()
    time.sleep(1.2)
    later = [thread(i) for i in ids[3:]]
    for t in later:
        t.start()
    for t in first + later:
        t.join()
    assert [results[i] for i in ids] == ["answered"] * 3 + ["deferred"] * 3
    assert len(agent.requests) == 3 and delivery.calls_in_flight() == 0
    waiting = Invocation.objects.filter(pk__in=[i for i, r in results.items() if r == "deferred"])
    assert {(w.status, w.attempts, w.first_sent_at) for w in waiting} == {("pending", 0, None)}
    assert all(3.9 <= (w.next_attempt_at - w.created_at).total_seconds() <= 7.5 for w in waiting)
    assert {w.last_error for w in waiting} == {"deferred: 2 calls to this endpoint were in flight, one of them slow"}


@pytest.mark.django_db(transaction=True)
def test_once_a_call_is_slow_the_young_calls_to_its_endpoint_count_too(agent, acap, settings):
    import time

    ids, results, ended, thread = _slow_endpoint_deliveries(agent, acap, settings, 3)
    # One call, then (once it is slow) a second: one slow call alone is under the cap of two, so the
    # second goes out. The third finds two calls in flight, one of them slow: it waits, although only
    # one call is slow. Counting slow calls alone let every young call to a hanging agent through.
    threads = [thread(i) for i in ids]
    threads[0].start()
    time.sleep(1.0)
    threads[1].start()
    deadline = time.monotonic() + 5
    while len(agent.requests) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    threads[2].start()
    for t in threads:
        t.join()
    assert [results[i] for i in ids] == ["answered", "answered", "deferred"]
    assert len(agent.requests) == 2 and delivery.calls_in_flight() == 0


def test_the_relay_finds_what_publishing_lost(agent, acap, monkeypatch, django_capture_on_commit_callbacks):
    def broken_delay(*args, **kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr(tasks.deliver, "delay", broken_delay)
    with django_capture_on_commit_callbacks(execute=True):
        run = factories.start_run(acap)  # publishing fails after commit; the row stays due
    assert tasks.relay_due() == 1  # the broker is still down: the relay does not keep its lease
    sent = []
    monkeypatch.setattr(tasks.deliver, "delay", lambda invocation_id: sent.append(invocation_id))
    assert tasks.relay_due() == 1
    for invocation_id in sent:
        delivery.deliver(invocation_id)
    assert tasks.relay_due() == 0
    assert Run.objects.get(pk=run.pk).status == "completed" and len(agent.requests) == 1


def test_the_relay_publishes_a_row_again_only_after_its_lease_lapses(acap, monkeypatch):
    """1,000 due rows and two relay ticks make 1,000 messages, not 2,000: a row whose message may still
    be queued is not published again until its lease (RQ_RELAY_LEASE) runs out."""
    run = factories.start_run(acap)  # its start invocation is due too
    Invocation.objects.bulk_create(
        Invocation(
            id=new_invocation_id(),
            run=run,
            kind="start",
            seq=seq,
            status="pending",
            token_hash="x" * 64,
            next_attempt_at=timezone.now(),
        )
        for seq in range(2, 1001)
    )
    published = []
    monkeypatch.setattr(tasks, "publish", published.extend)
    assert tasks.relay_due() == 500 and tasks.relay_due() == 500  # two ticks, the relay's batch of 500 each
    assert tasks.relay_due() == 0
    assert len(published) == 1000 and len(set(published)) == 1000

    # The leased rows are still due: a worker's claim of one is not held back by the relay's lease.
    first = Invocation.objects.get(run=run, seq=1)
    assert services.invocation_claim(invocation_id=first.id) is not None
    # Once the lease has lapsed without a claim (the message was lost), the rows are published again.
    Invocation.objects.filter(status="pending").update(lease_until=timezone.now() - dt.timedelta(seconds=1))
    assert tasks.relay_due() == 500 and tasks.relay_due() == 499 and tasks.relay_due() == 0
    assert len(published) == 1999 and first.id not in published[1000:]


def test_the_relay_hands_out_a_claim_whose_lease_ran_out(agent, acap):
    invocation = Invocation.objects.get(run=factories.start_run(acap))
    claim = services.invocation_claim(invocation_id=invocation.id)  # a worker that then dies
    assert claim is not None and services.invocations_due() == []
    Invocation.objects.filter(pk=invocation.pk).update(lease_until=timezone.now() - dt.timedelta(seconds=1))
    assert services.invocations_due() == [invocation.id]
    assert delivery.deliver(invocation.id) == "answered"
    late = services.invocation_record(
        invocation_id=invocation.id, attempt=claim.attempt, outcome=services.Outcome(kind="retry", error="late")
    )
    assert late == "stale"


@pytest.mark.django_db(transaction=True)
def test_the_resume_token_lives_only_while_the_resume_is_delivered(agent, acap, member_key, api):
    run, hold = factories.held_hold(acap)
    old_token = run_token_for(Invocation.objects.get(run=run, kind="start").id)
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    api.post(f"/v0/holds/{hold.public_id}/decision", body, key=member_key)
    resume = Invocation.objects.get(hold=hold)
    new_token = run_token_for(resume.id)
    assert api.get(f"/v0/runs/{run.public_id}", token=new_token).status_code == 401  # not sent yet: held

    def check_tokens(request):
        assert request["body"]["invocation"]["run_token"] == new_token
        from django.test import Client

        ok = Client().get(f"/v0/runs/{run.public_id}", headers={"x-agentos-run-token": new_token})
        old = Client().get(f"/v0/runs/{run.public_id}", headers={"x-agentos-run-token": old_token})
        return 200, {"status": "completed", "output": {"codes": [ok.status_code, old.status_code]}}

    agent.script = [check_tokens]
    delivery.deliver(resume.id)
    run.refresh_from_db()
    assert run.output == {"codes": [200, 401]}
    assert api.get(f"/v0/runs/{run.public_id}", token=new_token).status_code == 401  # finished


def test_run_fail_by_system_is_refused(acap):
    run = factories.start_run(acap)
    with pytest.raises(Forbidden):
        services.run_fail(run_id=run.pk, actor=SYSTEM, reason="x")


def test_a_workers_threads_starting_together_share_one_http_client(monkeypatch):
    import threading
    import time

    built = []

    class SlowClient:
        def __init__(self, **kwargs):
            time.sleep(0.05)  # as loading the CA bundle does: wide enough for every thread to race
            built.append(self)

    monkeypatch.setattr(delivery, "_client", None)
    monkeypatch.setattr(delivery.httpx, "Client", SlowClient)
    start, got = threading.Barrier(16), []

    def worker():
        start.wait()
        got.append(delivery.shared_client())

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(built) == 1 and all(client is built[0] for client in got) and len(got) == 16


def test_a_worker_builds_its_http_client_before_its_first_task(monkeypatch):
    import weakref

    import httpx
    from celery.signals import worker_init

    from reviewqueue.celery import build_http_client

    receivers = [r() if isinstance(r, weakref.ReferenceType) else r for _, r in worker_init.receivers]
    assert build_http_client in receivers
    monkeypatch.setattr(delivery, "_client", None)
    build_http_client()
    assert isinstance(delivery._client, httpx.Client)
    delivery._client.close()


def test_three_failed_attempts_in_a_row_mark_the_endpoint_failing_until_it_answers(agent, acap, settings):
    settings.RQ_ENDPOINT_FAILING_AFTER = 3
    agent.script = [(500, {}), (503, b"busy"), (502, b"down"), (200, {"status": "completed", "output": {}})]
    invocation = Invocation.objects.get(run=factories.start_run(acap))
    for n in (1, 2, 3):
        assert delivery.deliver(invocation.id) == "retry"
        cap = Capability.objects.get(pk=acap.pk)
        assert cap.endpoint_failures == n and cap.endpoint_failing_since is not None
        assert cap.endpoint_failing(timezone.now()) is (n == 3)
        due_now(invocation.id)
    assert delivery.deliver(invocation.id) == "answered"
    cap = Capability.objects.get(pk=acap.pk)
    assert (cap.endpoint_failures, cap.endpoint_failing_since, cap.endpoint_failing(timezone.now())) == (0, None, False)


def test_one_failure_that_lasts_minutes_is_failing_too(acap, settings):
    settings.RQ_ENDPOINT_FAILING_MINUTES = 5
    now = timezone.now()
    Capability.objects.filter(pk=acap.pk).update(
        endpoint_failures=1, endpoint_failing_since=now - dt.timedelta(minutes=4)
    )
    assert not Capability.objects.get(pk=acap.pk).endpoint_failing(now)
    assert Capability.objects.get(pk=acap.pk).endpoint_failing(now + dt.timedelta(minutes=1))


@pytest.mark.django_db(transaction=True)
def test_an_endpoint_that_has_not_answered_gets_two_calls_at_once(agent, acap, settings):
    import time

    # A new endpoint that hangs: two calls go out, and the next two wait for the first answer only
    # until the oldest call is slow, then wait in the database. Before this cap, every delivery in the
    # first RQ_SLOW_CALL held a thread for the whole timeout (a burst: ten of a worker's sixteen).
    ids, results, ended, thread = _slow_endpoint_deliveries(agent, acap, settings, 4, answered=False)
    threads = [thread(i) for i in ids]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results.values()) == ["answered"] * 2 + ["deferred"] * 2
    assert len(agent.requests) == 2 and delivery.calls_in_flight() == 0
    deferred = Invocation.objects.filter(pk__in=[i for i, r in results.items() if r == "deferred"])
    assert {(d.status, d.attempts, d.first_sent_at) for d in deferred} == {("pending", 0, None)}
    assert {d.last_error for d in deferred} == {
        "deferred: 2 calls to this endpoint were in flight, and it has not answered"
    }
    # The deferred two were handed back once the oldest call was slow (0.5 s), not when it answered.
    took = {result: sorted(ended[i] - started for i in ids if results[i] == result) for result in set(results.values())}
    assert 0.4 <= took["deferred"][0] and took["deferred"][-1] < 2.0 <= took["answered"][0]


@pytest.mark.django_db(transaction=True)
def test_a_new_endpoints_first_answer_lets_the_waiting_deliveries_through(agent, acap, settings):
    import time

    settings.RQ_UNANSWERED_IN_FLIGHT, settings.RQ_SLOW_CALL = 2, 5.0

    def quick(request):
        time.sleep(0.2)  # a worker's first answer, which takes 0.1-0.2 s while it starts
        return 200, {"status": "completed", "output": {}}

    agent.default = quick
    ids = [Invocation.objects.get(run=factories.start_run(acap)).id for _ in range(6)]
    results = deliver_at_once(ids)
    assert list(results.values()) == ["answered"] * 6 and len(agent.requests) == 6


@pytest.mark.django_db(transaction=True)
def test_after_a_timeout_the_endpoint_gets_two_calls_again_and_no_wait(agent, acap, settings):
    import time

    ids, results, ended, thread = _slow_endpoint_deliveries(agent, acap, settings, 3)
    settings.RQ_SLOW_CALL = 5.0  # a wait for a first answer would now last until the slow calls end
    stall(acap, agent, answer_after=0.6)
    timed_out = Invocation.objects.get(run=factories.start_run(acap)).id
    assert delivery.deliver(timed_out) == "retry"
    # Another process's probe was answered: the stall is over in the database, not in this process.
    Capability.objects.filter(pk=acap.pk).update(endpoint_stalled_at=None, timeout_seconds=10)
    agent.requests.clear()
    threads = [thread(i) for i in ids]
    for t in threads[:2]:
        t.start()
    deadline = time.monotonic() + 5
    while len(agent.requests) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    threads[2].start()
    threads[2].join()
    assert results[ids[2]] == "deferred" and time.monotonic() - started < 1.0
    for t in threads[:2]:
        t.join()
    assert [results[i] for i in ids[:2]] == ["answered"] * 2 and len(agent.requests) == 2
