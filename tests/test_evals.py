"""Evals through the API and the services: datasets, items, experiments, the eval_run refusal, completion."""

import json
import threading

import pytest
from django.db import connections

from holds import delivery, services
from holds.auth import SYSTEM, actor_for_account
from holds.experiments import diff_lines, json_equal
from holds.models import AuditEvent, Experiment, Hold, Invocation, PendingCount, Run
from tests import factories

pytestmark = pytest.mark.django_db


def finished_run(cap, *, output=None, edit=True):
    """A run that asked, was decided (an edit) and completed with `output`."""
    run, hold = factories.held_hold(cap)
    items = [{"id": "INV-1", "action": "edit", "data": {"payee": "P", "amount": "1.00"}}] if edit else []
    items.append({"id": "INV-2", "action": "approve"})
    if not edit:
        items.insert(0, {"id": "INV-1", "action": "approve"})
    key = factories.account(f"decider-{run.pk}", role="admin")[0]
    services.hold_decide(hold_id=hold.pk, actor=actor_for_account(key), body={"items": items})
    invocation, _ = factories.deliver_now(run)
    factories.answer(invocation, {"status": "completed", "output": output if output is not None else {"ok": 1}})
    run.refresh_from_db()
    return run, hold


@pytest.fixture
def dataset(api, cap, member_key):
    answer = api.post("/v0/datasets", {"name": "regressions", "capability": cap.name}, key=member_key)
    assert answer.status_code == 201, answer.content
    return answer.json()["dataset_id"]


def add_item(api, dataset, key, **body):
    body = {"input": {"n": 1}, "recorded_holds": [], "expected_output": {"ok": 1}, **body}
    answer = api.post(f"/v0/datasets/{dataset}/items", body, key=key)
    assert answer.status_code == 201, answer.content
    return answer.json()["item_id"]


def start_experiment(api, dataset, key):
    answer = api.post("/v0/experiments", {"dataset": dataset}, key=key)
    assert answer.status_code == 201, answer.content
    return answer.json()


# --- matching -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        ({"a": 1, "b": [1, 2]}, {"b": [1, 2], "a": 1}, True),
        (1, 1.0, True),
        (True, 1, False),
        (False, 0, False),
        ({"x": True}, {"x": 1}, False),
        ([1, 2], [2, 1], False),
        (None, None, True),
        ({}, None, False),
        ("1", 1, False),
        (10**20, 1e20, True),
        ({"a": 1}, {"a": 1, "b": None}, False),
    ],
)
def test_matches_is_strict_json_equality(a, b, equal):
    assert json_equal(a, b) is equal
    assert json_equal(b, a) is equal


def test_a_diff_shows_what_was_expected_and_what_came_out():
    lines = diff_lines({"amount": "120.00", "payee": "Acme"}, {"amount": "240.00", "payee": "Acme"})
    assert ("del", '-  "amount": "120.00",') in lines and ("add", '+  "amount": "240.00",') in lines


# --- datasets ---------------------------------------------------------------------------------------


def test_it_writes_an_item_by_hand_and_reads_it_back(api, dataset, member_key, viewer):
    item_id = add_item(
        api,
        dataset,
        member_key,
        recorded_holds=[{"ask": {"intent": "Pay"}, "resume": None}],
        expected_output={"paid": [1, 2.5]},
    )
    read = api.get(f"/v0/datasets/{dataset}/items/{item_id}", key=member_key).json()
    assert read["recorded_holds"] == [{"hold_id": None, "ask": {"intent": "Pay"}, "resume": None}]
    assert read["expected_output"] == {"paid": [1, 2.5]} and read["source_run"] is None
    listed = api.get("/v0/datasets", key=member_key).json()
    assert listed["items"][0]["dataset_id"] == dataset and listed["items"][0]["items"] == 1


def test_viewers_read_datasets_but_only_approvers_write_them(api, client, dataset, cap, member_key, viewer):
    viewer_key = factories.account("viewer-bot", role="viewer")[1]
    assert api.get(f"/v0/datasets/{dataset}", key=viewer_key).status_code == 200
    assert api.post(f"/v0/datasets/{dataset}/items", {"input": {}}, key=viewer_key).status_code == 403
    assert api.post("/v0/datasets", {"name": "x", "capability": cap.name}, key=viewer_key).status_code == 403
    assert api.post("/v0/experiments", {"dataset": dataset}, key=viewer_key).status_code == 403
    # Approvers are the capability's: a member is not one of [admin].
    services.capability_set_approvers(capability_id=cap.pk, approvers=["admin"], self_approval=True, actor=SYSTEM)
    assert api.post(f"/v0/datasets/{dataset}/items", {"input": {}}, key=member_key).status_code == 403
    # A run token reads and writes neither.
    run = factories.start_run(cap)
    _, token = factories.deliver_now(run)
    assert api.get("/v0/datasets", token=token).status_code == 403
    assert api.get("/v0/datasets", key="rqk_nope").status_code == 401


def test_item_bodies_are_validated_field_by_field(api, dataset, member_key):
    answer = api.post(f"/v0/datasets/{dataset}/items", {"input": [], "recorded_holds": [{"x": 1}]}, key=member_key)
    assert answer.status_code == 422
    fields = {e["field"] for e in answer.json()["errors"]}
    assert {"input", "recorded_holds[0].ask", "recorded_holds[0].x"} <= fields
    assert api.post(f"/v0/datasets/{dataset}/items", raw="{", key=member_key).status_code == 400
    assert api.post("/v0/datasets/ds_999/items", {"input": {}}, key=member_key).status_code == 404


def test_from_run_takes_finished_non_eval_runs_of_the_capability(api, cap, dataset, member_key):
    run, hold = finished_run(cap, output={"paid": ["INV-1"]})
    item_id = api.post(f"/v0/datasets/{dataset}/items", {"from_run": run.public_id}, key=member_key).json()["item_id"]
    item = api.get(f"/v0/datasets/{dataset}/items/{item_id}", key=member_key).json()
    [recorded] = item["recorded_holds"]
    assert recorded["hold_id"] == hold.public_id and recorded["ask"]["intent"] == "Pay 2 invoices"
    assert recorded["ask"]["items"][0]["confidence"] == {"amount": 0.68}
    assert [i["action"] for i in recorded["resume"]["items"]] == ["edit", "approve"]
    assert item["expected_output"] == {"paid": ["INV-1"]}

    running = factories.start_run(cap)
    other = factories.capability(name="other")
    foreign = factories.start_run(other)
    run_id_errors = {
        running.public_id: "running",
        foreign.public_id: "another capability",
        "r_999999": "no such run",
        "h_1": "no such run",
    }
    for run_id, message in run_id_errors.items():
        answer = api.post(f"/v0/datasets/{dataset}/items", {"from_run": run_id}, key=member_key)
        assert answer.status_code == 422, run_id
        assert message in answer.json()["errors"][0]["message"]


def test_a_resume_never_sent_is_recorded_as_null(api, cap, dataset, member_key, admin_key):
    run, hold = factories.held_hold(cap)
    api.post(f"/v0/runs/{run.public_id}/fail", {"reason": "gave up"}, key=admin_key)
    item_id = api.post(f"/v0/datasets/{dataset}/items", {"from_run": run.public_id}, key=member_key).json()["item_id"]
    item = api.get(f"/v0/datasets/{dataset}/items/{item_id}", key=member_key).json()
    assert item["recorded_holds"][0]["resume"] is None and item["expected_output"] is None


def test_deleting_an_item_hides_it_and_is_audited(api, dataset, member_key):
    keep, gone = add_item(api, dataset, member_key), add_item(api, dataset, member_key)
    viewer_key = factories.account("viewer-bot", role="viewer")[1]
    assert api.delete(f"/v0/datasets/{dataset}/items/{gone}", key=viewer_key).status_code == 403
    assert api.delete(f"/v0/datasets/{dataset}/items/{gone}", key=member_key).status_code == 204
    assert api.delete(f"/v0/datasets/{dataset}/items/{gone}", key=member_key).status_code == 404
    assert [i["item_id"] for i in api.get(f"/v0/datasets/{dataset}/items", key=member_key).json()["items"]] == [keep]
    assert AuditEvent.objects.filter(kind="dataset.item_deleted", data__item=gone).count() == 1
    started = start_experiment(api, dataset, member_key)
    assert len(started["runs"]) == 1


# --- experiments ------------------------------------------------------------------------------------


def test_an_experiment_of_an_empty_or_missing_dataset_is_refused(api, dataset, member_key):
    assert api.post("/v0/experiments", {"dataset": dataset}, key=member_key).status_code == 422
    assert api.post("/v0/experiments", {"dataset": "ds_404"}, key=member_key).status_code == 404
    assert api.post("/v0/experiments", {}, key=member_key).status_code == 422


def test_each_invocation_carries_eval_and_a_child_run_replays_nothing(api, cap, dataset, member_key):
    recorded = [{"ask": {"intent": "Pay"}, "resume": {"hold_id": "h_1", "resolved_by": "expired", "items": []}}]
    item_id = add_item(api, dataset, member_key, recorded_holds=recorded)
    started = start_experiment(api, dataset, member_key)
    run = Run.objects.get(pk=int(started["runs"][0][2:]))
    invocation, token = factories.deliver_now(run)
    body = delivery.invocation_body(invocation)
    assert body["invocation"]["eval"] == {
        "experiment_id": started["experiment_id"],
        "dataset_item_id": item_id,
        "recorded_holds": [{"hold_id": None, **recorded[0]}],
    }
    child = api.post("/v0/runs", {"capability": cap.name, "input": {}}, token=token).json()["run_id"]
    child_run = Run.objects.get(pk=int(child[2:]))
    child_invocation, _ = factories.deliver_now(child_run)
    assert delivery.invocation_body(child_invocation)["invocation"]["eval"] == {
        "experiment_id": started["experiment_id"],
        "dataset_item_id": item_id,
        "recorded_holds": [],
    }
    # An ordinary run carries null.
    plain, _ = factories.deliver_now(factories.start_run(cap))
    assert delivery.invocation_body(plain)["invocation"]["eval"] is None


@pytest.mark.parametrize(
    "raw",
    [
        json.dumps(factories.ask_body()),
        "{not json",
        json.dumps({"intent": ""}),
        json.dumps(factories.ask_body(files=["f_1"])),
        "x" * (1024 * 1024 + 1),
    ],
    ids=["good", "bad_json", "invalid", "files", "too_large"],
)
def test_an_eval_runs_ask_is_409_eval_run_whatever_its_body(api, cap, dataset, member_key, raw):
    add_item(api, dataset, member_key)
    started = start_experiment(api, dataset, member_key)
    run = Run.objects.get(pk=int(started["runs"][0][2:]))
    invocation, token = factories.deliver_now(run)
    pending_before = sum(PendingCount.objects.values_list("delta", flat=True))
    answer = api.post("/v0/holds", raw=raw, token=token)
    assert answer.status_code == 409, answer.content
    assert answer.json()["error"] == "eval_run" and answer.json()["message"]
    run.refresh_from_db()
    invocation.refresh_from_db()
    assert run.status == "asked_for_human" and run.finished_at is not None
    assert invocation.status == "failed"
    assert not Hold.objects.filter(run=run).exists()
    assert sum(PendingCount.objects.values_list("delta", flat=True)) == pending_before
    # The token died with the run; a bad token is still 401 first.
    assert api.post("/v0/holds", factories.ask_body(), token=token).status_code == 401
    assert api.post("/v0/holds", raw=raw, token="tok_inv_0.x").status_code == 401
    # The beat's completion (in a test transaction, the run's own after-commit attempt never runs).
    assert services.experiments_finish() == [run.experiment_id]
    events = AuditEvent.objects.filter(run_id_ref=run.pk).values_list("kind", flat=True)
    assert "run.asked_for_human" in events


def test_a_later_answer_for_a_run_an_admin_failed_is_stale(api, cap, admin_key):
    run = factories.start_run(cap)
    invocation, _ = factories.deliver_now(run)
    assert api.post(f"/v0/runs/{run.public_id}/fail", {"reason": "stop"}, key=admin_key).status_code == 200
    assert factories.answer(invocation, {"status": "completed", "output": {"late": True}}) == "stale"
    run.refresh_from_db()
    assert (run.status, run.output, run.error) == ("failed", None, "stop")
    assert AuditEvent.objects.filter(kind="run.stale_answer", run_id_ref=run.pk).count() == 1


def test_an_undeliverable_eval_invocation_fails_its_run_and_the_experiment_finishes(
    api, cap, dataset, member_key, settings
):
    settings.RQ_RETRY_SCHEDULE = [0]
    add_item(api, dataset, member_key)
    started = start_experiment(api, dataset, member_key)
    run = Run.objects.get(pk=int(started["runs"][0][2:]))
    claim = services.invocation_claim(invocation_id=Invocation.objects.get(run=run).id)
    outcome = services.Outcome(kind="retry", error="connection refused")
    assert services.invocation_record(invocation_id=claim.invocation.id, attempt=claim.attempt, outcome=outcome) == (
        "failed"
    )
    run.refresh_from_db()
    assert run.status == "failed" and "undeliverable" in run.error
    assert not Invocation.objects.filter(status="undeliverable").exists()
    services.experiments_finish()
    assert api.get(f"/v0/experiments/{started['experiment_id']}", key=member_key).json()["status"] == "finished"


def test_a_parked_eval_invocation_fails_its_run(api, cap, dataset, member_key):
    add_item(api, dataset, member_key)
    add_item(api, dataset, member_key)
    started = start_experiment(api, dataset, member_key)
    first, second = (Run.objects.get(pk=int(r[2:])) for r in started["runs"])
    claim = services.invocation_claim(invocation_id=Invocation.objects.get(run=first).id)
    gone = services.Outcome(kind="gone", status_code=410, error="410 Gone")
    services.invocation_record(invocation_id=claim.invocation.id, attempt=claim.attempt, outcome=gone)
    # The endpoint is disabled now: the next eval invocation is parked at its claim, and fails its run.
    assert services.invocation_claim(invocation_id=Invocation.objects.get(run=second).id) is None
    statuses = set(Run.objects.filter(pk__in=[first.pk, second.pk]).values_list("status", flat=True))
    assert statuses == {"failed"}
    assert services.experiments_finish() == [Experiment.objects.get().pk]


@pytest.mark.django_db(transaction=True)
def test_it_finishes_an_experiment_once_when_two_beats_race(cap):
    key = factories.account("eval-bot", role="member")[0]
    actor = actor_for_account(key)
    dataset = services.dataset_create(name="race", capability_name=cap.name, actor=actor)
    services.dataset_item_add(dataset=dataset, actor=actor, input={}, recorded_holds=[], expected_output=None)
    experiment, [run] = services.experiment_start(dataset=dataset, actor=actor)
    # The run finishes without its own completion attempt (as when two last runs finish at once).
    Run.objects.filter(pk=run.pk).update(status="completed")
    barrier, finished = threading.Barrier(2), []

    def beat():
        try:
            barrier.wait()
            finished.extend(services.experiments_finish())
        finally:
            connections.close_all()

    threads = [threading.Thread(target=beat) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert finished == [experiment.pk]
    assert AuditEvent.objects.filter(kind="experiment.finished").count() == 1
    assert services.experiments_finish() == []


def test_the_experiment_reads_as_spec_says(api, cap, dataset, member_key):
    add_item(api, dataset, member_key, expected_output={"ok": 1})
    add_item(api, dataset, member_key, expected_output=None)
    started = start_experiment(api, dataset, member_key)
    first, second = (Run.objects.get(pk=int(r[2:])) for r in started["runs"])
    for run, output in ((first, {"ok": 1.0}), (second, {"ok": 2})):
        invocation, _ = factories.deliver_now(run)
        factories.answer(invocation, {"status": "completed", "output": output})
    services.experiments_finish()
    read = api.get(f"/v0/experiments/{started['experiment_id']}", key=member_key).json()
    assert read["status"] == "finished" and read["dataset"] == dataset
    assert read["counts"] == {"completed": 2, "failed": 0, "asked_for_human": 0, "running": 0}
    assert [r["matches"] for r in read["runs"]] == [True, None]
    listed = api.get("/v0/experiments", key=member_key).json()
    assert [e["experiment_id"] for e in listed["items"]] == [started["experiment_id"]]
    assert api.get("/v0/experiments/ex_0", key=member_key).status_code == 404
    assert api.get("/v0/experiments?cursor=zz", key=member_key).status_code == 422
    events = set(AuditEvent.objects.values_list("kind", flat=True))
    assert {"dataset.created", "dataset.item_added", "experiment.started", "experiment.finished"} <= events


def test_the_openapi_document_describes_the_evals_answers(api, client, cap, dataset, member_key):
    import jsonschema

    doc = client.get("/v0/openapi.json").json()
    assert {
        "/v0/datasets",
        "/v0/datasets/{dataset_id}",
        "/v0/datasets/{dataset_id}/items",
        "/v0/datasets/{dataset_id}/items/{item_id}",
        "/v0/experiments",
        "/v0/experiments/{experiment_id}",
    } <= set(doc["paths"])

    def check(path, method, response):
        content = doc["paths"][path][method]["responses"][str(response.status_code)]["content"]
        schema = content["application/json"]["schema"]
        jsonschema.validate(response.json(), {"components": doc["components"], **schema})

    item_id = add_item(api, dataset, member_key, recorded_holds=[{"ask": {"intent": "x"}, "resume": None}])
    check("/v0/datasets", "get", api.get("/v0/datasets", key=member_key))
    check("/v0/datasets/{dataset_id}", "get", api.get(f"/v0/datasets/{dataset}", key=member_key))
    check("/v0/datasets/{dataset_id}/items", "get", api.get(f"/v0/datasets/{dataset}/items", key=member_key))
    item = api.get(f"/v0/datasets/{dataset}/items/{item_id}", key=member_key)
    check("/v0/datasets/{dataset_id}/items/{item_id}", "get", item)
    started = api.post("/v0/experiments", {"dataset": dataset}, key=member_key)
    check("/v0/experiments", "post", started)
    check("/v0/experiments", "get", api.get("/v0/experiments", key=member_key))
    read = api.get(f"/v0/experiments/{started.json()['experiment_id']}", key=member_key)
    check("/v0/experiments/{experiment_id}", "get", read)
    check("/v0/experiments", "post", api.post("/v0/experiments", {"dataset": 1}, key=member_key))  # 422
    assert client.get("/v0/docs").status_code == 200


def test_an_experiment_counts_once_against_the_run_start_rate(api, cap, dataset, member_key, settings):
    # SPEC: the run-start rate counts POST /v0/runs per caller; an experiment counts once, however
    # many runs it starts.
    settings.RQ_RATE_RUN_START = "2/m"
    for _ in range(3):
        add_item(api, dataset, member_key)
    assert len(start_experiment(api, dataset, member_key)["runs"]) == 3
    assert api.post("/v0/runs", {"capability": cap.name, "input": {}}, key=member_key).status_code == 201
    refused = api.post("/v0/experiments", {"dataset": dataset}, key=member_key)
    assert refused.status_code == 429 and refused.json()["error"] == "rate_limited"
