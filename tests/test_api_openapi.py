"""The OpenAPI document matches what the server does."""

import jsonschema
import pytest

from holds import schemas
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def doc(client):
    return client.get("/v0/openapi.json").json()


def response_schema(doc, path, method, code):
    schema = doc["paths"][path][method]["responses"][str(code)]["content"]["application/json"]["schema"]
    return {**schema, "components": doc["components"]}


def check(doc, path, method, response):
    schema = response_schema(doc, path, method, response.status_code)
    resolver_doc = {"components": doc["components"], **schema}
    jsonschema.validate(response.json(), resolver_doc)


def test_it_is_openapi_3_1_with_every_endpoint(doc):
    assert doc["openapi"] == "3.1.0"
    assert {
        "/v0/holds",
        "/v0/holds/{hold_id}",
        "/v0/holds/{hold_id}/decision",
        "/v0/runs",
        "/v0/runs/{run_id}",
        "/v0/runs/{run_id}/state/{key}",
        "/v0/files",
        "/v0/files/{file_id}",
    } <= set(doc["paths"])


def test_the_ask_schema_is_the_one_the_server_validates_with(doc):
    expected = schemas.AskIn.model_json_schema(ref_template="#/components/schemas/{model}")
    defs = expected.pop("$defs")
    assert doc["components"]["schemas"]["AskIn"] == expected
    assert doc["components"]["schemas"]["ItemIn"] == defs["ItemIn"]
    assert expected["additionalProperties"] is False


def test_real_answers_match_the_document(api, client, doc, cap, member_key):
    run = factories.start_run(cap)
    invocation, token = factories.deliver_now(run)
    created = api.post("/v0/holds", factories.ask_body(), token=token)
    check(doc, "/v0/holds", "post", created)
    check(doc, "/v0/holds", "post", api.post("/v0/holds", factories.ask_body(), token=token))  # 409
    invalid = api.post("/v0/holds", {"intent": ""}, token="tok_x")
    check(doc, "/v0/holds", "post", invalid)  # 401
    hold_id = created.json()["hold_id"]
    check(doc, "/v0/holds/{hold_id}", "get", api.get(f"/v0/holds/{hold_id}", key=member_key))
    check(doc, "/v0/holds", "get", api.get("/v0/holds", key=member_key))
    factories.answer(invocation, {"status": "suspended", "hold_id": hold_id})
    bad = api.post(f"/v0/holds/{hold_id}/decision", {"items": [{"id": "INV-1", "action": "nope"}]}, key=member_key)
    check(doc, "/v0/holds/{hold_id}/decision", "post", bad)
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "reject"}]}
    check(doc, "/v0/holds/{hold_id}/decision", "post", api.post(f"/v0/holds/{hold_id}/decision", body, key=member_key))
    check(doc, "/v0/holds/{hold_id}", "get", api.get(f"/v0/holds/{hold_id}", key=member_key))
    check(doc, "/v0/runs/{run_id}", "get", api.get(f"/v0/runs/{run.public_id}", key=member_key))
    check(doc, "/v0/runs", "post", api.post("/v0/runs", {"capability": "pay_invoices"}, key=member_key))


def test_the_docs_page_lists_the_endpoints(client):
    page = client.get("/v0/docs")
    assert page.status_code == 200
    assert b"/v0/holds/{hold_id}/decision" in page.content and b"openapi.json" in page.content
