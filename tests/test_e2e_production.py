"""The production shape end to end: gunicorn, a Celery worker and beat, PostgreSQL, Redis, and
the example agent (examples/pay_invoices.py, on the agentos SDK) as its own process over HTTP."""

from datetime import timedelta

import pytest
from django.db import connections

from holds.ids import HOLD, parse_public_id
from holds.models import Capability, Hold
from tests import factories
from tests.processes import Processes, free_port, service_client, service_env, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_redis, pytest.mark.serial]


@pytest.fixture
def procs(tmp_path):
    processes = Processes(tmp_path)
    yield processes
    processes.stop_all()
    connections.close_all()


def test_ask_decide_complete_and_expire_without_anyone_acting(procs):
    web_port, agent_port = free_port(), free_port()
    web = f"http://127.0.0.1:{web_port}"
    cap = factories.capability(endpoint=f"http://127.0.0.1:{agent_port}", timeout_seconds=10.0)
    key = factories.account("ci-bot", role="member")[1]
    env = service_env(redis_url=procs.redis(free_port()), public_url=web)
    procs.gunicorn(env, web_port)
    procs.worker(env)
    procs.beat(env)
    procs.agent({"AGENTOS_SECRET": Capability.objects.get(pk=cap.pk).secret}, agent_port)
    client = service_client(web, key, timeout=10)

    def run_of(run_id):
        return client.get(f"/v0/runs/{run_id}").json()

    expiring = client.post("/v0/runs", json={"capability": "pay_invoices", "input": {"expires_in": 60}})
    assert expiring.status_code == 201, expiring.text
    started = client.post("/v0/runs", json={"capability": "pay_invoices", "input": {}})
    run_id = started.json()["run_id"]

    held = wait_until(lambda: (r := run_of(run_id))["status"] == "held" and r, 60, "the agent to ask and suspend")
    hold_id = held["holds"][0]["hold_id"]
    hold = client.get(f"/v0/holds/{hold_id}").json()
    assert hold["status"] == "pending" and [i["id"] for i in hold["items"]] == ["INV-1", "INV-2", "INV-3"]
    decision = {
        "items": [
            {"id": "INV-1", "action": "edit", "data": {"payee": "Aksa Lojistik A.Ş.", "amount": "18400.00"}},
            {"id": "INV-2", "action": "approve"},
            {"id": "INV-3", "action": "reject"},
        ],
        "comment": "INV-3 was paid last week",
    }
    assert client.post(f"/v0/holds/{hold_id}/decision", json=decision).status_code == 200

    done = wait_until(lambda: (r := run_of(run_id))["status"] == "completed" and r, 60, "the resumed agent")
    paid = {p["id"]: p for p in done["output"]["paid"]}
    assert paid["INV-1"]["payee"] == "Aksa Lojistik A.Ş." and set(paid) == {"INV-1", "INV-2"}
    assert done["output"]["rejected"] == ["INV-3"]
    assert done["seq"] == 2

    # Its deadline, 60 s from the ask (SPEC's shortest), is moved to now rather than waited for: the
    # beat's sweep (every RQ_SWEEP_INTERVAL, 10 s) and the worker still do everything after it.
    expired_id = expiring.json()["run_id"]
    waiting = wait_until(lambda: (r := run_of(expired_id))["status"] == "held" and r, 60, "the other run's ask")
    hold = Hold.objects.get(pk=parse_public_id(waiting["holds"][0]["hold_id"], HOLD))
    assert timedelta(seconds=59) < hold.expires_at - hold.created_at <= timedelta(seconds=61)
    factories.past_due(hold.pk)
    finished = wait_until(lambda: (r := run_of(expired_id))["status"] == "completed" and r, 60, "the expiry")
    assert finished["holds"][0]["status"] == "expired"
    assert finished["output"] == {"paid": [], "rejected": []}
    resume = client.get(f"/v0/holds/{finished['holds'][0]['hold_id']}").json()["resume"]
    assert resume.pop("receipt").count(".") == 2  # a compact JWS (tests/test_receipts.py verifies them)
    assert resume == {
        "hold_id": finished["holds"][0]["hold_id"],
        "resolved_by": "expired",
        "items": [],
        "comment": None,
    }
