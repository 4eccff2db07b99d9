"""The evals pages: "Add to dataset…" from a hold (the last look, then the record), experiments, datasets."""

import re

import pytest

from holds import services
from holds.auth import actor_for_account
from holds.models import DatasetItem, Experiment
from tests import factories

pytestmark = pytest.mark.django_db


def decided_and_completed(cap):
    run, hold = factories.held_hold(cap)
    account = factories.account("decider", role="admin")[0]
    items = [{"id": "INV-1", "action": "edit", "data": {"payee": "Edited", "amount": "100.00"}}]
    items.append({"id": "INV-2", "action": "reject"})
    services.hold_decide(hold_id=hold.pk, actor=actor_for_account(account), body={"items": items, "comment": "no"})
    invocation, _ = factories.deliver_now(run)
    factories.answer(invocation, {"status": "completed", "output": {"paid": ["INV-1"]}})
    return run, hold


def test_a_decided_hold_offers_add_to_dataset_with_a_last_look(client, cap, member):
    run, hold = decided_and_completed(cap)
    client.force_login(member)
    page = client.get(f"/holds/{hold.public_id}").content.decode()
    assert f'href="/holds/{hold.public_id}/dataset"' in page and "Add to dataset…" in page
    look = client.get(f"/holds/{hold.public_id}/dataset")
    assert look.status_code == 200
    text = look.content.decode()
    assert "What will be stored" in text and "Edited" in text and "INV-1" in text and "Record it" in text
    recorded = client.post(f"/holds/{hold.public_id}/dataset", {"dataset": "new", "name": "from the page"})
    assert recorded.status_code == 303
    item = DatasetItem.objects.get()
    assert item.source_run_id == run.pk and item.expected_output == {"paid": ["INV-1"]}
    assert item.recorded_holds[0]["resume"]["items"][0]["data"] == {"payee": "Edited", "amount": "100.00"}
    dataset_page = client.get(recorded["Location"]).content.decode()
    assert item.public_id in dataset_page and "Start an experiment" in dataset_page
    started = client.post(recorded["Location"] + "/experiments")
    assert started.status_code == 303 and started["Location"] == f"/experiments/{Experiment.objects.get().public_id}"
    assert client.get(started["Location"]).status_code == 200
    listing = client.get("/experiments").content.decode()
    assert Experiment.objects.get().public_id in listing and "from the page" in listing


def test_a_pending_holds_run_cannot_be_recorded_yet_and_viewers_cannot_record(client, cap, member, viewer):
    run, hold = factories.held_hold(cap)
    client.force_login(member)
    refused = client.get(f"/holds/{hold.public_id}/dataset")
    assert refused.status_code == 409 and b"decided or expired" in refused.content
    _, decided = decided_and_completed(factories.capability(name="other"))
    client.force_login(viewer)
    assert client.get(f"/holds/{decided.public_id}/dataset").status_code == 409
    assert client.post(f"/holds/{decided.public_id}/dataset", {"dataset": "new", "name": "x"}).status_code == 409
    assert not DatasetItem.objects.exists()


def test_a_run_still_going_is_recorded_once_it_has_finished(client, cap, member):
    run, hold = factories.held_hold(cap)
    account = factories.account("decider", role="admin")[0]
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    services.hold_decide(hold_id=hold.pk, actor=actor_for_account(account), body=body)
    client.force_login(member)
    waiting = client.get(f"/holds/{hold.public_id}/dataset")
    assert waiting.status_code == 409 and b"once it has finished" in waiting.content
    services.run_fail(run_id=run.pk, actor=actor_for_account(account), reason="stopped")
    assert client.get(f"/holds/{hold.public_id}/dataset").status_code == 200


def test_pages_need_a_role(client, cap):
    user = factories.person("nobody", role="viewer")
    client.force_login(user)
    assert client.get("/experiments").status_code == 200
    assert client.get("/experiments/ex_1").status_code == 404
    assert client.get("/datasets/ds_1").status_code == 404
    client.logout()
    assert client.get("/experiments").status_code == 302


def test_recording_a_run_a_second_time_warns_before_and_says_where_it_is(client, cap, member):
    run, hold = decided_and_completed(cap)
    client.force_login(member)
    first = client.get(f"/holds/{hold.public_id}/dataset").content.decode()
    assert 'id="recorded-already"' not in first
    client.post(f"/holds/{hold.public_id}/dataset", {"dataset": "new", "name": "May"})
    item = DatasetItem.objects.get()
    again = client.get(f"/holds/{hold.public_id}/dataset")
    text = again.content.decode()
    assert again.status_code == 200 and 'id="recorded-already"' in text
    assert "This run is recorded already" in text and item.public_id in text and "“May”" in text
    # A warning, not a refusal: recording it again is still one press away.
    assert client.post(f"/holds/{hold.public_id}/dataset", {"dataset": item.dataset.public_id}).status_code == 303
    assert DatasetItem.objects.filter(source_run=run).count() == 2


def test_an_empty_name_for_a_new_dataset_is_an_error_at_the_field(client, cap, member):
    _, hold = decided_and_completed(cap)
    client.force_login(member)
    response = client.post(f"/holds/{hold.public_id}/dataset", {"dataset": "new", "name": "  "})
    text = response.content.decode()
    assert response.status_code == 422 and not DatasetItem.objects.exists()
    field = re.search(r'<input type="text" name="name" id="ds-new-name"[^>]*>', text).group(0)
    assert 'aria-invalid="true"' in field and 'aria-describedby="ds-new-name-error"' in field
    assert '<p class="error" id="ds-new-name-error">Name the new dataset.</p>' in text
    assert re.search(r'id="ds-new" value="new" checked', text)
    # A taken name is the same field's error, and what was typed stays.
    client.post(f"/holds/{hold.public_id}/dataset", {"dataset": "new", "name": "May"})
    taken = client.post(f"/holds/{hold.public_id}/dataset", {"dataset": "new", "name": "May"}).content.decode()
    assert 'id="ds-new-name-error">pay_invoices has a dataset named &#x27;May&#x27; already' in taken
    assert 'value="May"' in taken


def test_a_running_experiment_refreshes_itself_and_says_pending_until_it_finishes(client, cap, member):
    run, hold = decided_and_completed(cap)
    actor = actor_for_account(factories.account("eval-bot", role="admin")[0])
    dataset = services.dataset_create(name="May", capability_name=cap.name, actor=actor)
    services.dataset_item_from_run(dataset=dataset, run_pk=run.pk, actor=actor)
    experiment, [eval_run] = services.experiment_start(dataset=dataset, actor=actor)
    client.force_login(member)
    url = f"/experiments/{experiment.public_id}"
    page = client.get(url).content.decode()
    assert f'<div id="experiment-live" hx-get="{url}" hx-trigger="every 3s"' in page
    assert '<span class="match match-pending">Pending</span>' in page and "No expected output" not in page
    fragment = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert fragment.lstrip().startswith('<div id="experiment-live"') and "<html" not in fragment
    invocation, _ = factories.deliver_now(eval_run)
    factories.answer(invocation, {"status": "completed", "output": {"paid": ["INV-1"]}})
    services.experiments_finish()
    finished = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "hx-trigger" not in finished and "Pending" not in finished and ">Match</span>" in finished
