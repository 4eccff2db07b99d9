"""Faults with the real parts: a SIGKILLed Celery worker, and Redis stopped while people decide.

A private Redis server, real `celery worker` and `celery beat` processes, PostgreSQL, and an
agent over HTTP that deduplicates on webhook-id. Nothing is lost and nothing is applied twice.
"""

import threading
import time

import pytest
from django.db import connections

from holds import services
from holds.auth import actor_for_account
from holds.models import DeliveryAttempt, Hold, Invocation, Run
from tests import factories
from tests.agent_double import AgentDouble
from tests.processes import Processes, free_port, service_env, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_redis, pytest.mark.serial]

APPROVE = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}


@pytest.fixture
def procs(tmp_path, request):
    processes = Processes(tmp_path)
    yield processes
    processes.stop_all()
    if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
        for name in ("worker", "worker2", "beat", "redis"):
            print(f"--- {name}.log ---\n{processes.log(name)[-4000:]}")


class DedupingAgent(AgentDouble):
    """Applies each invocation once, by webhook-id; a repeat gets the first answer back."""

    def __init__(self, first_delay: float = 0.0):
        super().__init__()
        self.applied: dict[str, int] = {}
        self.lock = threading.Lock()
        self.first_delay = first_delay
        self.default = self.handle

    def handle(self, request):
        webhook_id = request["headers"].get("webhook-id") or request["headers"].get("Webhook-Id")
        with self.lock:
            first = webhook_id not in self.applied
            self.applied[webhook_id] = self.applied.get(webhook_id, 0) + (1 if first else 0)
        if first and self.first_delay:
            time.sleep(self.first_delay)  # the worker is mid-delivery here
        return 200, {"status": "completed", "output": {"applied": webhook_id}}


def test_a_sigkilled_worker_mid_delivery_is_redelivered_with_the_same_webhook_id(procs, member_key):
    # The kill comes within a poll (0.2 s) of the first request's arrival, well inside the agent's delay.
    agent = DedupingAgent(first_delay=2.0)
    try:
        # The timeout is longer than the agent's delay: only the kill can make this a redelivery. The
        # redelivery waits for the lease (timeout + RQ_LEASE_GRACE 1 s) to run out: 6 s, not 11 as with 10.
        cap = factories.capability(endpoint=agent.url, timeout_seconds=5.0)
        redis_url = procs.redis(free_port())
        env = service_env(redis_url=redis_url)
        procs.worker(env)
        procs.beat(env)
        run, hold = factories.held_hold(cap)
        account = factories.account("decider", role="member")[0]
        services.hold_decide(hold_id=hold.pk, actor=actor_for_account(account), body=APPROVE)
        resume = Invocation.objects.get(hold=hold)
        wait_until(lambda: len(agent.requests) >= 1, 30, "the first delivery to reach the agent")
        procs.kill("worker")  # SIGKILL to the worker and its pool, in the middle of the POST
        procs.worker(env, name="worker2")
        wait_until(lambda: Run.objects.get(pk=run.pk).status == "completed", 60, "the redelivered resume")
        ids = [r["headers"].get("webhook-id") or r["headers"].get("Webhook-Id") for r in agent.requests]
        assert ids.count(resume.id) >= 2, ids  # delivered again after the crash
        assert agent.applied[resume.id] == 1  # and applied once
        assert Run.objects.get(pk=run.pk).output == {"applied": resume.id}
        # The killed attempt recorded nothing; the lease ran out and attempt 2 delivered it.
        assert list(DeliveryAttempt.objects.filter(invocation_id=resume.id).values_list("number", "outcome")) == [
            (2, "answered")
        ]
    finally:
        agent.close()
        connections.close_all()


def test_redis_stopped_while_people_decide_loses_and_duplicates_nothing(procs, settings):
    from reviewqueue.celery import app

    agent = DedupingAgent()
    port = free_port()
    try:
        cap = factories.capability(endpoint=agent.url, timeout_seconds=5.0)
        redis_url = procs.redis(port)
        env = service_env(redis_url=redis_url)
        procs.worker(env)
        procs.beat(env)
        # This test process publishes to the same (soon stopped) Redis, as the web server would.
        old = app.conf.broker_url
        app.conf.broker_url, app._pool = redis_url, None
        app.amqp._producer_pool = None
        app.conf.broker_transport_options = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2}
        app.conf.task_publish_retry_policy = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2}
        pairs = [factories.held_hold(cap) for _ in range(20)]
        account = factories.account("decider", role="member")[0]
        procs.kill("redis")
        for _, hold in pairs:
            services.hold_decide(hold_id=hold.pk, actor=actor_for_account(account), body=APPROVE)
        time.sleep(2)
        assert all(Run.objects.get(pk=run.pk).status == "held" for run, _ in pairs)  # nothing was sent
        procs.redis(port)
        wait_until(
            lambda: Run.objects.filter(pk__in=[r.pk for r, _ in pairs], status="completed").count() == 20,
            90,
            "every resume after Redis came back",
        )
        resume_ids = set(Invocation.objects.filter(hold__in=[h for _, h in pairs]).values_list("pk", flat=True))
        assert len(resume_ids) == 20
        delivered = [r["headers"].get("webhook-id") or r["headers"].get("Webhook-Id") for r in agent.requests]
        assert sorted(delivered) == sorted(resume_ids)  # each exactly once: 0 lost, 0 duplicated
        assert all(agent.applied[i] == 1 for i in resume_ids)
        assert Hold.objects.filter(pk__in=[h.pk for _, h in pairs], status="decided").count() == 20
    finally:
        app.conf.broker_url, app._pool = old, None
        app.amqp._producer_pool = None
        agent.close()
        connections.close_all()
