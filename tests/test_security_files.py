"""Files served safely: nosniff, our recorded type, only safe types inline, and only to who may see the hold."""

import pytest
from django.test import Client

from holds import services
from holds.models import RunFile
from tests import factories

pytestmark = pytest.mark.django_db

INLINE = ["image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf"]
ATTACHMENT = [
    "image/svg+xml",
    "text/html",
    "application/xhtml+xml",
    "text/xml",
    "application/xml",
    "text/javascript",
    "application/javascript",
    "text/plain",
    "text/css",
    "application/octet-stream",
    "multipart/x-mixed-replace",
    "IMAGE/PNG",  # not the exact type we list: no guessing
    "image/png, text/html",
    "",
]
SVG = b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(2)</script></svg>'


def add_file(run, content_type: str, name="f.bin", content=SVG) -> RunFile:
    return factories.run_file(run, name=name, content=content, content_type=content_type)


def shown(run, *file_ids: str) -> None:
    """The run asks a hold listing these files: reviewers may fetch a file that a hold lists (SPEC)."""
    services.hold_ask(invocation=run.invocations.get(), body=factories.ask_body(files=list(file_ids)))


@pytest.fixture
def run_with_token(cap):
    run = factories.start_run(cap)
    _, token = factories.deliver_now(run)
    return run, token


@pytest.fixture
def reviewer(client, viewer):
    client.force_login(viewer)
    return client


def routes(run_file, token):
    """The same file through the agent API (its token) and the reviewer route (a session)."""
    return [f"/v0/files/{run_file.public_id}", f"/files/{run_file.public_id}"]


@pytest.mark.parametrize("content_type", INLINE)
def test_it_opens_only_safe_images_and_pdf_inline_with_nosniff(api, reviewer, run_with_token, content_type):
    run, token = run_with_token
    run_file = add_file(run, content_type, name="scan.bin")
    shown(run, run_file.public_id)
    for response in (
        api.get(f"/v0/files/{run_file.public_id}", token=token),
        reviewer.get(f"/files/{run_file.public_id}"),
    ):
        assert response.status_code == 200
        assert response["Content-Type"] == content_type
        assert response["X-Content-Type-Options"] == "nosniff"
        assert not response.get("Content-Disposition", "").startswith("attachment")
        assert "sandbox" in response["Content-Security-Policy"]


@pytest.mark.parametrize("content_type", ATTACHMENT)
def test_it_downloads_everything_else_as_an_attachment_under_a_sandbox(api, reviewer, run_with_token, content_type):
    run, token = run_with_token
    run_file = add_file(run, content_type, name="page.svg")
    shown(run, run_file.public_id)
    for response in (
        api.get(f"/v0/files/{run_file.public_id}", token=token),
        reviewer.get(f"/files/{run_file.public_id}"),
    ):
        assert response.status_code == 200
        assert response["Content-Type"] == "application/octet-stream"
        assert response["Content-Disposition"].startswith("attachment;")
        assert response["Content-Security-Policy"] == "sandbox"
        assert response["X-Content-Type-Options"] == "nosniff"
        assert b"".join(response.streaming_content) == SVG  # the bytes, untouched


def test_the_type_comes_from_our_record_never_from_the_request(api, reviewer, client, run_with_token):
    run, token = run_with_token
    # Uploaded as a PNG; what it holds is HTML. The record says PNG, nosniff stops the browser guessing.
    uploaded = client.post(
        "/v0/files",
        data=b"<html><script>alert(1)</script></html>",
        content_type="image/png",
        headers={"x-agentos-run-token": token, "x-filename": "x.html"},
    ).json()
    svg = add_file(run, "image/svg+xml", name="x.png")  # a .png name does not make an SVG inline
    shown(run, uploaded["file_id"], svg.public_id)
    asks = {"HTTP_ACCEPT": "text/html", "QUERY_STRING": "content_type=text/html&format=html"}
    response = reviewer.get(f"/files/{uploaded['file_id']}", **asks)
    assert response["Content-Type"] == "image/png" and response["X-Content-Type-Options"] == "nosniff"
    response = reviewer.get(f"/files/{svg.public_id}", HTTP_ACCEPT="image/png")
    assert response["Content-Type"] == "application/octet-stream"
    assert response["Content-Disposition"].startswith("attachment;")


def test_only_who_may_see_the_hold_fetches_the_file(api, cap, run_with_token, viewer, member_key):
    run, token = run_with_token
    run_file = add_file(run, "application/pdf", name="a.pdf")
    services.hold_ask(invocation=run.invocations.get(), body=factories.ask_body(files=[run_file.public_id]))
    api_url, page_url = f"/v0/files/{run_file.public_id}", f"/files/{run_file.public_id}"

    other = factories.start_run(cap)
    _, other_token = factories.deliver_now(other)
    account, revoked_key = factories.account("gone", role="admin")
    services.service_account_revoke(
        account_id=account.pk, actor=factories.actor_for_user(factories.person("root", role="admin"))
    )

    assert api.get(api_url, token=token).status_code == 200  # its own run
    assert api.get(api_url, key=member_key).status_code == 200  # a reviewer's key
    assert api.get(api_url, token=other_token).status_code == 404  # another run: not there
    assert api.get(api_url).status_code == 401
    assert api.get(api_url, key=revoked_key).status_code == 401
    assert api.get(api_url, token="tok_inv_x.y").status_code == 401

    anonymous = Client()
    assert anonymous.get(page_url).status_code == 302
    assert anonymous.get(api_url).status_code == 401
    signed_in = Client()
    signed_in.force_login(viewer)
    assert signed_in.get(page_url).status_code == 200 and signed_in.get(api_url).status_code == 200
    viewer.is_active = False
    viewer.save()
    assert signed_in.get(page_url).status_code == 302  # a deactivated person is signed out
    assert signed_in.get(api_url).status_code == 401


def test_it_answers_404_for_unknown_and_malformed_file_ids(api, reviewer, member_key):
    for file_id in ("f_999999", "f_", "x_1", "f_1x", "f_" + "9" * 40, "../settings.py"):
        assert api.get(f"/v0/files/{file_id}", key=member_key).status_code == 404
        assert reviewer.get(f"/files/{file_id}").status_code == 404


def test_it_never_puts_a_bidi_control_into_a_download_name(reviewer, run_with_token):
    run, _ = run_with_token
    run_file = add_file(run, "application/octet-stream", name="invoice\u202egpj.exe")
    shown(run, run_file.public_id)
    disposition = reviewer.get(f"/files/{run_file.public_id}")["Content-Disposition"]
    assert "%E2%80%AE" not in disposition.upper() and "\u202e" not in disposition
