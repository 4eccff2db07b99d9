"""Who reads what: files, run state and retries answer only those who may, and tell nobody else
whether something exists (issue 21, items 8, 9 and 10)."""

import pytest
from django.test import Client

from holds import services
from holds.models import Invocation, RunFile
from tests import factories

pytestmark = pytest.mark.django_db


def add_file(run, name="a.pdf") -> RunFile:
    return factories.run_file(run, name=name, content=b"%PDF-1.4 secret", content_type="application/pdf")


def session(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def refusal(response, file_id: str) -> tuple:
    """What a 404 tells: its status and its body, with the id asked for taken out."""
    body = response.json() if response["Content-Type"].startswith("application/json") else {}
    return response.status_code, {k: str(v).replace(file_id, "ID") for k, v in body.items()}


def test_a_file_on_no_hold_goes_to_its_runs_token_only(api, live, viewer, admin_user, member_key, admin_key):
    run, _, token = live
    unlisted = add_file(run)
    api_url, page_url = f"/v0/files/{unlisted.public_id}", f"/files/{unlisted.public_id}"
    assert api.get(api_url, token=token).status_code == 200
    for key in (member_key, admin_key):
        assert api.get(api_url, key=key).status_code == 404
    for person in (viewer, admin_user):
        assert session(person).get(page_url).status_code == 404
        assert session(person).get(api_url).status_code == 404


def test_a_file_that_a_hold_lists_goes_to_those_who_may_see_the_hold(api, cap, live, viewer, member_key):
    run, invocation, token = live
    listed = add_file(run)
    services.hold_ask(invocation=invocation, body=factories.ask_body(files=[listed.public_id]))
    other = factories.start_run(cap)
    _, other_token = factories.deliver_now(other)
    assert api.get(f"/v0/files/{listed.public_id}", key=member_key).status_code == 200
    assert session(viewer).get(f"/files/{listed.public_id}").status_code == 200
    assert api.get(f"/v0/files/{listed.public_id}", token=other_token).status_code == 404


def test_file_ids_tell_nothing_to_those_who_may_not_see_the_file(api, live, viewer, member_key):
    """Ids are sequential: the answer for a file that exists but is not yours is the one for no file."""
    run, _, token = live
    unlisted = add_file(run)
    missing = f"f_{unlisted.pk + 1000}"
    for file_id in (unlisted.public_id, missing):
        assert refusal(api.get(f"/v0/files/{file_id}", key=member_key), file_id) == (
            404,
            {"error": "not_found", "message": "file ID does not exist"},
        )
        assert session(viewer).get(f"/files/{file_id}").status_code == 404


def test_run_state_goes_to_its_token_and_to_admins_only(api, live, viewer, admin_user, member, admin_key, member_key):
    run, _, token = live
    url = f"/v0/runs/{run.public_id}/state/session"
    assert api.put(url, {"secret": "sk-live-123"}, token=token).status_code == 204
    assert api.get(url, token=token).json() == {"secret": "sk-live-123"}
    assert api.get(url, key=admin_key).json() == {"secret": "sk-live-123"}
    assert session(admin_user).get(url).json() == {"secret": "sk-live-123"}
    for response in (
        api.get(url, key=member_key),
        session(member).get(url),
        session(viewer).get(url),
        api.get(f"/v0/runs/{run.public_id}/state/no-such-key", key=member_key),  # the same, present or not
    ):
        assert response.status_code == 403 and response.json()["error"] == "forbidden"
    assert api.get(f"/v0/runs/{run.public_id}/state/no-such-key", key=admin_key).status_code == 404
    assert api.put(url, {"v": 2}, key=admin_key).status_code == 403  # admins read; only the token writes
    assert api.delete(url, key=admin_key).status_code == 403


def test_retry_answers_the_same_to_everyone_who_may_not_retry(api, cap, live, viewer, member, member_key, admin_key):
    run, invocation, _ = live
    _, token = factories.deliver_now(factories.start_run(cap))  # a live token of another run
    Invocation.objects.filter(pk=invocation.pk).update(status=Invocation.Status.UNDELIVERABLE)
    ids = [invocation.id, "inv_000000000000" + "0" * 16, "x"]
    refusals = set()
    for call in (
        lambda url: api.post(url, {}, key=member_key),
        lambda url: session(member).post(url),
        lambda url: session(viewer).post(url),
        lambda url: api.post(url, {}, token=token),
    ):
        for invocation_id in ids:
            response = call(f"/v0/invocations/{invocation_id}/retry")
            refusals.add((response.status_code, response.json()["error"], response.json()["message"]))
    assert refusals == {(403, "forbidden", "only admins may retry a delivery")}
    assert api.post(f"/v0/invocations/{ids[1]}/retry", {}, key=admin_key).status_code == 404
    assert api.post(f"/v0/invocations/{invocation.id}/retry", {}, key=admin_key).status_code == 200
