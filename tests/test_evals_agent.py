"""Evals end to end: the real API (a live server), a real agent process (agentos.Server over HTTP),
deliveries through the ordinary outbox path (holds.delivery.deliver, as a worker runs it)."""

import time

import agentos
import httpx
import pytest
from django.core import mail
from django.db import connection
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext

from holds import delivery, services
from holds.models import (
    AuditEvent,
    DeliveryAttempt,
    Experiment,
    Hold,
    Notification,
    PendingCount,
    Run,
)
from tests import factories

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.serial]

INVOICE = {"id": "INV-1", "title": "Acme · 120.00", "data": {"payee": "Acme", "amount": "120.00"}}


def pay_from(decision) -> dict:
    return {"paid": [{"id": d.id, **d.data} for d in decision.approved], "rejected": [d.id for d in decision.rejected]}


def pay_invoices(inv: agentos.Invocation):
    """The agent as its docs say: in an eval run it continues from the recorded decision."""
    if inv.eval is not None:
        return pay_from(inv.eval.recorded_holds[0].resume)
    if inv.resume is None:
        inv.ask("Pay 1 invoice", [INVOICE], actions=["approve", "edit", "reject"])
    return pay_from(inv.resume)


def pump(seconds: float = 60) -> None:
    """Delivers every due invocation, as the worker would, until none is due."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        due = services.invocations_due(limit=1000)
        if not due:
            return
        for invocation_id in due:
            delivery.deliver(invocation_id)
    raise AssertionError(f"deliveries still due after {seconds}s")


class Agent:
    """An agentos.Server whose handler a test may swap (a changed agent), recording what it received."""

    def __init__(self, handler):
        self.handler = handler
        self.received = []
        self.server = agentos.Server({"pay_invoices": self._handle}, port=0, secret=factories.SECRET).start()

    def _handle(self, inv):
        self.received.append(inv)
        return self.handler(inv)


@pytest.fixture
def agent():
    agents = []

    def start(handler=pay_invoices):
        agents.append(Agent(handler))
        return agents[-1]

    yield start
    for a in agents:
        a.server.stop()


@pytest.fixture
def world(live_server, settings, agent):
    """The service at a live URL, the capability at a real agent, and an approver's client."""
    settings.RQ_PUBLIC_URL = live_server.url
    running = agent()
    cap = factories.capability(endpoint=running.server.url, notify={"email": True})
    key = factories.account("eval-bot", role="member")[1]
    client = httpx.Client(base_url=live_server.url, headers={"authorization": f"Bearer {key}"}, timeout=30)
    yield {"cap": cap, "agent": running, "client": client, "url": live_server.url}
    client.close()


def ok(response, status=200):
    assert response.status_code == status, response.text
    return response.json()


def record_edited_run(world) -> tuple[str, str, dict]:
    """A real run whose hold a person edited, recorded into a new dataset: (dataset_id, item_id, run)."""
    client = world["client"]
    run_id = ok(client.post("/v0/runs", json={"capability": "pay_invoices", "input": {"batch": 7}}), 201)["run_id"]
    pump()
    held = ok(client.get(f"/v0/runs/{run_id}"))
    assert held["status"] == "held"
    hold_id = held["holds"][0]["hold_id"]
    edited = {"payee": "Acme Corp", "amount": "120.00"}
    decision = {"items": [{"id": "INV-1", "action": "edit", "data": edited}], "comment": "the full name"}
    ok(client.post(f"/v0/holds/{hold_id}/decision", json=decision))
    pump()
    run = ok(client.get(f"/v0/runs/{run_id}"))
    assert run["status"] == "completed"
    dataset_id = ok(client.post("/v0/datasets", json={"name": "paid", "capability": "pay_invoices"}), 201)["dataset_id"]
    item_id = ok(client.post(f"/v0/datasets/{dataset_id}/items", json={"from_run": run_id}), 201)["item_id"]
    return dataset_id, item_id, run


def test_it_records_a_run_whose_hold_was_edited(world):
    dataset_id, item_id, run = record_edited_run(world)
    item = ok(world["client"].get(f"/v0/datasets/{dataset_id}/items/{item_id}"))
    assert item["input"] == {"batch": 7}
    assert item["expected_output"] == {
        "paid": [{"id": "INV-1", "payee": "Acme Corp", "amount": "120.00"}],
        "rejected": [],
    }
    assert item["expected_output"] == run["output"]
    assert item["source_run"] == run["run_id"]
    [recorded] = item["recorded_holds"]
    assert recorded["ask"]["intent"] == "Pay 1 invoice"
    assert recorded["ask"]["items"] == [INVOICE]
    assert recorded["resume"]["resolved_by"] == "human"
    assert recorded["resume"]["items"] == [
        {
            "id": "INV-1",
            "action": "edit",
            "data": {"payee": "Acme Corp", "amount": "120.00"},
            "comment": "the full name",
        }
    ]
    listed = ok(world["client"].get(f"/v0/datasets/{dataset_id}/items"))
    assert [i["item_id"] for i in listed["items"]] == [item_id] and listed["next_cursor"] is None
    assert AuditEvent.objects.filter(kind="dataset.item_added", data__item=item_id).count() == 1


def test_an_experiment_continues_from_the_recorded_decision_and_matches(world):
    dataset_id, item_id, run = record_edited_run(world)
    client = world["client"]
    started = ok(client.post("/v0/experiments", json={"dataset": dataset_id}), 201)
    assert len(started["runs"]) == 1
    pump()
    experiment = ok(client.get(f"/v0/experiments/{started['experiment_id']}"))
    assert experiment["status"] == "finished"
    assert experiment["counts"] == {"completed": 1, "failed": 0, "asked_for_human": 0, "running": 0}
    [result] = experiment["runs"]
    assert result["dataset_item_id"] == item_id and result["run_id"] == started["runs"][0]
    assert result["output"] == run["output"] and result["matches"] is True
    # What the agent received: an ordinary signed invocation that carries `eval`.
    inv = world["agent"].received[-1]
    assert inv.run_id == started["runs"][0]
    assert inv.eval.experiment_id == started["experiment_id"] and inv.eval.dataset_item_id == item_id
    resume = inv.eval.recorded_holds[0].resume
    assert type(resume) is agentos.Resume and resume.edited[0].data["payee"] == "Acme Corp"
    assert inv.eval.recorded_holds[0].ask["intent"] == "Pay 1 invoice"


def test_an_agent_that_asks_anyway_ends_asked_for_human_and_reaches_nobody(world, client):
    dataset_id, _, _ = record_edited_run(world)
    asked_before = Hold.objects.count()
    pending_before = PendingCount.objects.aggregate(n=Sum("delta"))["n"]
    notified_before, mails_before = Notification.objects.count(), len(mail.outbox)
    outcomes = []

    def asks_anyway(inv):
        try:
            inv.ask("Pay 1 invoice", [INVOICE], suspend=False)
        except BaseException as exc:  # noqa: BLE001 - the SDK's signal, caught as a careless handler would
            outcomes.append(type(exc).__name__)
            return {"paid": "anyway"}

    world["agent"].handler = asks_anyway
    started = ok(world["client"].post("/v0/experiments", json={"dataset": dataset_id}), 201)
    pump()
    assert outcomes == ["AskedForHuman"]
    [run_id] = started["runs"]
    run = ok(world["client"].get(f"/v0/runs/{run_id}"))
    assert run["status"] == "asked_for_human" and run["holds"] == [] and run["output"] is None
    experiment = ok(world["client"].get(f"/v0/experiments/{started['experiment_id']}"))
    assert experiment["status"] == "finished"
    assert experiment["counts"] == {"completed": 0, "failed": 0, "asked_for_human": 1, "running": 0}
    # No hold, nothing pending, nobody notified, nothing in the queue.
    assert Hold.objects.count() == asked_before
    assert PendingCount.objects.aggregate(n=Sum("delta"))["n"] == pending_before
    assert Notification.objects.count() == notified_before and len(mail.outbox) == mails_before
    client.force_login(factories.person("quinn", role="member"))
    queue = client.get("/")
    assert queue.status_code == 200 and run_id.encode() not in queue.content
    # The agent's later answer (failed: asked_for_human) was recorded as stale and changed nothing.
    attempt = DeliveryAttempt.objects.get(invocation__run__pk=int(run_id[2:]))
    assert attempt.outcome == "stale"
    assert Run.objects.get(pk=int(run_id[2:])).error == "the agent asked for a person in an eval run"
    assert AuditEvent.objects.filter(kind="run.asked_for_human", run_id_ref=int(run_id[2:])).count() == 1
    assert AuditEvent.objects.filter(kind="run.stale_answer", run_id_ref=int(run_id[2:])).count() == 1


def test_a_changed_agent_shows_matches_false_with_the_diff(world, client):
    dataset_id, _, _ = record_edited_run(world)

    def pays_twice(inv):
        out = pay_from(inv.eval.recorded_holds[0].resume)
        out["paid"][0]["amount"] = "240.00"
        return out

    world["agent"].handler = pays_twice
    started = ok(world["client"].post("/v0/experiments", json={"dataset": dataset_id}), 201)
    pump()
    experiment = ok(world["client"].get(f"/v0/experiments/{started['experiment_id']}"))
    [result] = experiment["runs"]
    assert result["matches"] is False and result["output"]["paid"][0]["amount"] == "240.00"
    client.force_login(factories.person("quinn", role="viewer"))
    page = client.get(f"/experiments/{started['experiment_id']}").content.decode()
    assert '<ins class="diff-add">+' in page and "240.00" in page
    assert '<del class="diff-del">-' in page and "120.00" in page
    assert "Mismatch" in page


def test_an_experiment_of_200_items_finishes_and_its_page_stays_flat(world, client, django_assert_num_queries):
    client.force_login(factories.person("quinn", role="viewer"))
    dataset_id, item_id, _ = record_edited_run(world)
    recorded = ok(world["client"].get(f"/v0/datasets/{dataset_id}/items/{item_id}"))

    def items(n, name):
        ds = ok(world["client"].post("/v0/datasets", json={"name": name, "capability": "pay_invoices"}), 201)
        for i in range(n):
            body = {
                "input": {"batch": i},
                "recorded_holds": recorded["recorded_holds"],
                # Every seventh expects something else, so the page shows diffs too.
                "expected_output": recorded["expected_output"] if i % 7 else {"paid": [], "rejected": []},
            }
            ok(world["client"].post(f"/v0/datasets/{ds['dataset_id']}/items", json=body), 201)
        return ds["dataset_id"]

    small, large = items(10, "ten"), items(200, "two hundred")
    pages = {}
    # Twice each: the second of each sits beside the first, so both pages read the previous totals.
    for dataset in (small, small, large, large):
        started = ok(world["client"].post("/v0/experiments", json={"dataset": dataset}), 201)
        pump(120)
        experiment = ok(world["client"].get(f"/v0/experiments/{started['experiment_id']}"))
        assert experiment["status"] == "finished"
        n = len(started["runs"])
        assert experiment["counts"]["completed"] == n
        assert sum(r["matches"] is False for r in experiment["runs"]) == len(range(0, n, 7))
        pages[dataset] = started["experiment_id"]
    with CaptureQueriesContext(connection) as small_page:
        assert client.get(f"/experiments/{pages[small]}").status_code == 200
    # The last one sits beside the previous experiment on the same dataset, and reads in as many queries.
    with django_assert_num_queries(len(small_page.captured_queries)):
        page = client.get(f"/experiments/{pages[large]}")
    # One page of items (issue 30.6), the rest a link away.
    assert page.status_code == 200 and page.content.count(b'<li class="experiment-item') == 20
    assert b'rel="next"' in page.content
    assert Experiment.objects.filter(status="finished").count() == 4


def test_the_demo_dataset_replays_with_the_demo_agent_and_matches(world, client):
    """`seed_holds --demo-runs` records two runs that it decides; an experiment with the demo agent
    (examples/pay_invoices.py) replays their decisions, pays nothing, and matches."""
    import importlib.util
    import io
    import pathlib

    from holds import demo

    path = pathlib.Path(__file__).resolve().parent.parent / "examples" / "pay_invoices.py"
    spec = importlib.util.spec_from_file_location("example_pay_invoices_evals", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    world["agent"].handler = example.pay_invoices
    factories.person("admin", role="admin")
    out = io.StringIO()
    recorded = demo.dataset(stdout=out, settle=lambda check: pump() or check())
    assert recorded is not None, out.getvalue()
    assert demo.dataset(stdout=out).pk == recorded.pk  # once
    paid_before = len(example.PAYMENTS)
    assert paid_before == 2  # INV-21 as edited and INV-22; INV-23 was rejected
    started = ok(world["client"].post("/v0/experiments", json={"dataset": recorded.public_id}), 201)
    pump()
    experiment = ok(world["client"].get(f"/v0/experiments/{started['experiment_id']}"))
    assert experiment["counts"]["completed"] == 2 and [r["matches"] for r in experiment["runs"]] == [True, True]
    assert experiment["runs"][0]["output"]["paid"] == [{"id": "INV-21", "payee": "Hooli XYZ", "amount": "410.00"}]
    assert len(example.PAYMENTS) == paid_before  # an eval run never pays
