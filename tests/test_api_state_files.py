"""Run state and files: a token reaches only its own run."""

import hashlib
import io

import pytest

from holds.models import RunFile
from tests import factories

pytestmark = pytest.mark.django_db
MIB = 1024 * 1024


@pytest.fixture
def two_runs(cap):
    a, b = factories.start_run(cap), factories.start_run(cap)
    _, token_a = factories.deliver_now(a)
    _, token_b = factories.deliver_now(b)
    return (a, token_a), (b, token_b)


def test_it_puts_gets_and_deletes_raw_json_values(api, two_runs):
    (run, token), _ = two_runs
    url = f"/v0/runs/{run.public_id}/state/progress"
    assert api.get(url, token=token).status_code == 404
    assert api.put(url, {"step": "asked", "n": 12345678901234567890}, token=token).status_code == 204
    assert api.get(url, token=token).json() == {"step": "asked", "n": 12345678901234567890}
    assert api.put(url, None, raw="[1, 2]", token=token).status_code == 204
    assert api.get(url, token=token).json() == [1, 2]
    assert api.put(url, None, raw='"text"', token=token).status_code == 204
    assert api.get(url, token=token).json() == "text"
    assert api.delete(url, token=token).status_code == 204
    assert api.get(url, token=token).json()["error"] == "not_found"


def test_it_refuses_bad_json_and_values_over_1_mib(api, two_runs):
    (run, token), _ = two_runs
    url = f"/v0/runs/{run.public_id}/state/k"
    assert api.put(url, None, raw="{bad", token=token).status_code == 400
    assert api.put(url, None, raw='"' + "x" * (1024 * 1024) + '"', token=token).status_code == 413
    assert api.put(url, None, raw='"' + "x" * 70000 + '"', token=token).status_code == 204


def test_a_token_cannot_reach_another_runs_state(api, two_runs):
    (a, token_a), (b, token_b) = two_runs
    api.put(f"/v0/runs/{b.public_id}/state/secret", {"v": 1}, token=token_b)
    assert api.get(f"/v0/runs/{b.public_id}/state/secret", token=token_a).status_code == 404
    assert api.put(f"/v0/runs/{b.public_id}/state/secret", {"v": 2}, token=token_a).status_code == 404
    assert api.delete(f"/v0/runs/{b.public_id}/state/secret", token=token_a).status_code == 404
    assert api.get(f"/v0/runs/{b.public_id}/state/secret", token=token_b).json() == {"v": 1}


def upload(client, token, content=b"%PDF-1.4 hello", name="invoice.pdf", content_type="application/pdf"):
    return client.post(
        "/v0/files", data=content, content_type=content_type, headers={"x-agentos-run-token": token, "x-filename": name}
    )


def test_it_uploads_a_file_with_its_sha256(client, two_runs):
    (run, token), _ = two_runs
    response = upload(client, token)
    assert response.status_code == 201
    body = response.json()
    assert body["file_id"].startswith("f_") and body["name"] == "invoice.pdf" and body["size"] == 14
    assert body["content_type"] == "application/pdf"
    assert RunFile.objects.get().sha256 == hashlib.sha256(b"%PDF-1.4 hello").hexdigest()


def test_an_upload_repeated_with_its_idempotency_key_is_the_first_file(client, two_runs):
    (run, token), (other_run, other_token) = two_runs

    def send(key, content=b"%PDF-1.4 hello", tok=token):
        return client.post(
            "/v0/files",
            data=content,
            content_type="application/pdf",
            headers={"x-agentos-run-token": tok, "x-filename": "invoice.pdf", "idempotency-key": key},
        )

    first, again = send("r:invoice"), send("r:invoice")
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()
    assert RunFile.objects.filter(run=run).count() == 1
    refused = send("r:invoice", content=b"%PDF-1.4 other")
    assert refused.status_code == 422 and refused.json()["error"] == "idempotency_mismatch"
    assert send("r:invoice", tok=other_token).json()["file_id"] != first.json()["file_id"]  # keys are per run
    assert send("x" * 201).status_code == 422


def test_it_refuses_files_over_25_mib_and_bad_names(client, two_runs):
    (run, token), _ = two_runs
    assert upload(client, token, content=b"x" * (25 * MIB + 1)).status_code == 413
    assert upload(client, token, name="../etc/passwd").status_code == 422
    assert upload(client, token, name="").status_code == 422
    assert not RunFile.objects.exists()


def test_it_takes_files_up_to_25_mib_streamed_past_the_2_mib_form_limit(client, two_runs, settings):
    """request.body refuses past DATA_UPLOAD_MAX_MEMORY_SIZE (2 MiB): uploads from there to 25 MiB were 500."""
    (run, token), _ = two_runs
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE == 2 * MIB
    for size in (2 * MIB + 1, 25 * MIB):
        content = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
        response = upload(client, token, content=content, name=f"scan-{size}.bin")
        assert response.status_code == 201, response.content
        assert response.json()["size"] == size
        stored = RunFile.objects.get(pk=int(response.json()["file_id"][2:]))
        assert stored.sha256 == hashlib.sha256(content).hexdigest() and stored.size == size
        with stored.file.open("rb") as f:
            assert f.read() == content
    too_big = upload(client, token, content=b"x" * (25 * MIB + 1))
    assert too_big.status_code == 413 and too_big.json()["error"] == "too_large"
    assert RunFile.objects.count() == 2


def test_it_measures_a_chunked_upload_as_it_streams(client, two_runs):
    (run, token), _ = two_runs
    headers = {"x-agentos-run-token": token, "x-filename": "big.bin"}

    def chunked(raw: bytes):
        meta = {"wsgi.input": io.BytesIO(raw), "HTTP_TRANSFER_ENCODING": "chunked", "CONTENT_LENGTH": ""}
        return client.generic("POST", "/v0/files", data=b"", content_type="application/pdf", headers=headers, **meta)

    assert chunked(b"y" * (3 * MIB)).status_code == 201
    assert chunked(b"y" * (25 * MIB + 1)).status_code == 413
    assert RunFile.objects.get().size == 3 * MIB


def test_an_upload_keeps_specs_order_413_before_403(client, two_runs, member_key):
    (run, token), _ = two_runs
    big = client.post(
        "/v0/files",
        data=b"x" * (25 * MIB + 1),
        content_type="application/pdf",
        headers={"authorization": f"Bearer {member_key}", "x-filename": "a.pdf"},
    )
    assert big.status_code == 413
    small = client.post(
        "/v0/files",
        data=b"x",
        content_type="application/pdf",
        headers={"authorization": f"Bearer {member_key}", "x-filename": "a.pdf"},
    )
    assert small.status_code == 403
    assert not RunFile.objects.exists()


def test_files_are_served_to_their_run_and_to_reviewers_of_a_hold_that_lists_them(api, client, two_runs, member_key):
    (a, token_a), (b, token_b) = two_runs
    file_id = upload(client, token_b).json()["file_id"]
    assert api.get(f"/v0/files/{file_id}", token=token_a).status_code == 404
    own = api.get(f"/v0/files/{file_id}", token=token_b)
    assert own.status_code == 200 and b"".join(own.streaming_content) == b"%PDF-1.4 hello"
    assert own["X-Content-Type-Options"] == "nosniff"
    assert api.get(f"/v0/files/{file_id}", key=member_key).status_code == 404  # on no hold yet
    assert api.post("/v0/holds", factories.ask_body(files=[file_id]), token=token_b).status_code == 201
    assert api.get(f"/v0/files/{file_id}", key=member_key).status_code == 200


def test_unsafe_types_download_as_attachments(api, client, two_runs, member_key):
    (run, token), _ = two_runs
    file_id = upload(
        client, token, content=b"<svg onload=alert(1)>", name="x.svg", content_type="image/svg+xml"
    ).json()["file_id"]
    assert api.post("/v0/holds", factories.ask_body(files=[file_id]), token=token).status_code == 201
    response = api.get(f"/v0/files/{file_id}", key=member_key)
    assert response["Content-Type"] == "application/octet-stream"
    assert response["Content-Disposition"].startswith("attachment")
    assert response["Content-Security-Policy"] == "sandbox"


def test_an_ask_may_list_only_its_own_runs_files(api, client, two_runs):
    (a, token_a), (b, token_b) = two_runs
    mine = upload(client, token_a).json()["file_id"]
    theirs = upload(client, token_b).json()["file_id"]
    response = api.post("/v0/holds", factories.ask_body(files=[mine, theirs, "f_999999"]), token=token_a)
    assert response.status_code == 422
    assert {e["field"] for e in response.json()["errors"]} == {"files[1]", "files[2]"}
    assert api.post("/v0/holds", factories.ask_body(files=[mine]), token=token_a).status_code == 201


def test_a_runs_state_stays_within_its_key_and_byte_quotas(api, two_runs, settings):
    settings.RQ_RUN_MAX_STATE_KEYS, settings.RQ_RUN_MAX_STATE_BYTES = 3, 100
    (run, token), (other, other_token) = two_runs
    url = f"/v0/runs/{run.public_id}/state/"
    for key in ("a", "b", "c"):
        assert api.put(url + key, "x" * 10, token=token).status_code == 204
    refused = api.put(url + "d", 1, token=token)
    assert refused.status_code == 409
    assert refused.json() == {
        "error": "quota_exceeded",
        "message": refused.json()["message"],
        "quota": "state_keys",
        "limit": 3,
    }
    assert api.put(url + "a", "y" * 20, token=token).status_code == 204  # replacing a key is not a new key
    big = api.put(url + "b", "z" * 80, token=token)
    assert big.status_code == 409 and big.json()["quota"] == "state_bytes"
    assert api.get(url + "b", token=token).json() == "x" * 10  # nothing was written
    assert api.delete(url + "c", token=token).status_code == 204
    assert api.put(url + "d", 1, token=token).status_code == 204  # room again
    # Quotas are per run: another run starts empty.
    assert api.put(f"/v0/runs/{other.public_id}/state/a", "x" * 90, token=other_token).status_code == 204


def test_a_runs_files_stay_within_their_count_and_byte_quotas(client, two_runs, settings):
    settings.RQ_RUN_MAX_FILES, settings.RQ_RUN_MAX_FILE_BYTES = 2, 30
    (run, token), (other, other_token) = two_runs
    assert upload(client, token, b"0123456789").status_code == 201
    too_big = upload(client, token, b"x" * 21)
    assert too_big.status_code == 409 and too_big.json()["quota"] == "file_bytes"
    assert upload(client, token, b"0123456789").status_code == 201
    third = upload(client, token, b"1")
    assert third.status_code == 409 and third.json() == {
        "error": "quota_exceeded",
        "message": third.json()["message"],
        "quota": "files",
        "limit": 2,
    }
    assert RunFile.objects.filter(run=run).count() == 2
    assert upload(client, other_token, b"0123456789").status_code == 201


def test_run_starts_are_rate_limited_per_caller(api, cap, member_key, admin_key, settings):
    settings.RQ_RATE_RUN_START = "2/m"
    body = {"capability": cap.name, "input": {}}
    assert [api.post("/v0/runs", body, key=member_key).status_code for _ in range(3)] == [201, 201, 429]
    assert api.post("/v0/runs", body, key=admin_key).status_code == 201  # another caller has its own budget
