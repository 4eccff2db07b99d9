"""The OpenAPI 3.1 document of /v0/, built from the pydantic models in schemas.py.

One source: the request models are the ones the API validates with, so the document cannot drift
from what the server accepts. Error answers follow SPEC's check order and codes.
"""

from functools import cache

from django.http import JsonResponse
from django.shortcuts import render

from . import schemas

TOKEN = [{"runToken": []}]
KEY = [{"serviceKey": []}]
SESSION = [{"session": []}]


def _ref(model) -> dict:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _json(model_or_schema, description: str) -> dict:
    schema = model_or_schema if isinstance(model_or_schema, dict) else _ref(model_or_schema)
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict:
    text = {
        400: "bad_json: the body is not JSON",
        401: "unauthorized: missing, unknown, superseded or finished token or key",
        403: "forbidden",
        404: "not_found",
        405: "method_not_allowed",
        409: "a conflict (hold_open, already_decided, expired, cancelled, eval_run, quota_exceeded, …)",
        413: "too_large: the raw body is over the limit",
        422: "invalid: every bad field by path (or idempotency_mismatch)",
        429: "rate_limited: over this caller's rate; Retry-After (and retry_after) says how many seconds to wait",
    }
    return {str(code): _json(schemas.InvalidOut if code == 422 else schemas.ErrorOut, text[code]) for code in codes}


def _op(summary, *, security, responses, body=None, params=(), raw_body=None) -> dict:
    op = {"summary": summary, "security": security, "responses": responses, "parameters": list(params)}
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(body)}}}
    if raw_body is not None:
        op["requestBody"] = raw_body
    return op


def _path_param(name: str, pattern: str) -> dict:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string", "pattern": pattern}}


@cache
def document() -> dict:
    models = [
        schemas.AskIn,
        schemas.DecisionIn,
        schemas.ExtendIn,
        schemas.RunStartIn,
        schemas.ErrorOut,
        schemas.InvalidOut,
        schemas.HoldCreatedOut,
        schemas.HoldOut,
        schemas.HoldListOut,
        schemas.DecisionOut,
        schemas.RunCreatedOut,
        schemas.RunOut,
        schemas.FileOut,
        schemas.InvocationRetryOut,
        schemas.DatasetIn,
        schemas.DatasetItemIn,
        schemas.DatasetItemFromRunIn,
        schemas.ExperimentIn,
        schemas.DatasetCreatedOut,
        schemas.DatasetOut,
        schemas.DatasetListOut,
        schemas.DatasetItemCreatedOut,
        schemas.DatasetItemOut,
        schemas.DatasetItemListOut,
        schemas.ExperimentCreatedOut,
        schemas.ExperimentOut,
        schemas.ExperimentListOut,
        schemas.RulesIn,
        schemas.RuleSetOut,
        schemas.RuleSetSavedOut,
        schemas.BacktestIn,
        schemas.BacktestOut,
        schemas.GrantIn,
        schemas.GrantOut,
        schemas.GrantCreatedOut,
        schemas.GrantListOut,
        schemas.AwayIn,
        schemas.AwayOut,
    ]
    components: dict = {}
    for model in models:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, definition in schema.pop("$defs", {}).items():
            components[name] = definition
        components[model.__name__] = schema
    reader = TOKEN + KEY + SESSION
    hold_id = _path_param("hold_id", "^h_[0-9]+$")
    run_id = _path_param("run_id", "^r_[0-9]+$")
    dataset_id = _path_param("dataset_id", "^ds_[0-9]+$")
    item_id = _path_param("item_id", "^di_[0-9]+$")
    capability = _path_param("name", "^[A-Za-z0-9_.-]{1,100}$")
    grant_id = _path_param("grant_id", "^grt_[0-9]+$")
    key_param = {"name": "key", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
    any_json = {"description": "the stored JSON value", "content": {"application/json": {"schema": {}}}}
    paths = {
        "/v0/holds": {
            "post": _op(
                "Ask: open a hold for the token's run",
                security=TOKEN,
                body=schemas.AskIn,
                responses={
                    "201": _json(schemas.HoldCreatedOut, "the hold"),
                    **_errors(400, 401, 403, 409, 413, 422, 429),
                },
            ),
            "get": _op(
                "List holds the caller may see (newest first, keyset pages)",
                security=reader,
                params=[
                    {"name": n, "in": "query", "required": False, "schema": {"type": "string"}}
                    for n in ("status", "capability", "cursor")
                ],
                responses={"200": _json(schemas.HoldListOut, "a page"), **_errors(401, 403, 422)},
            ),
        },
        "/v0/holds/{hold_id}": {
            "get": _op(
                "Read a hold",
                security=reader,
                params=[hold_id],
                responses={"200": _json(schemas.HoldOut, "the hold"), **_errors(401, 403, 404)},
            ),
        },
        "/v0/holds/{hold_id}/decision": {
            "post": _op(
                "Decide a hold, once",
                security=KEY + SESSION,
                params=[hold_id],
                body=schemas.DecisionIn,
                responses={
                    "200": _json(schemas.DecisionOut, "decided"),
                    **_errors(400, 401, 403, 404, 409, 413, 422, 429),
                },
            ),
        },
        "/v0/holds/{hold_id}/extend": {
            "post": _op(
                "Extend a pending hold's expiry: expires_at = now() + expires_in, with a reason",
                security=KEY + SESSION,
                params=[hold_id],
                body=schemas.ExtendIn,
                responses={
                    "200": _json(schemas.HoldOut, "the hold with its new expires_at"),
                    **_errors(400, 401, 403, 404, 409, 413, 422, 429),
                },
            ),
        },
        "/v0/runs": {
            "post": _op(
                "Start a run (a child run with a run token)",
                security=reader,
                body=schemas.RunStartIn,
                params=[
                    {
                        "name": "Idempotency-Key",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string", "maxLength": 200},
                    }
                ],
                responses={
                    "201": _json(schemas.RunCreatedOut, "started"),
                    "200": _json(schemas.RunCreatedOut, "the run this Idempotency-Key started"),
                    **_errors(400, 401, 403, 413, 422, 429),
                },
            ),
        },
        "/v0/runs/{run_id}": {
            "get": _op(
                "Read a run",
                security=reader,
                params=[run_id],
                responses={"200": _json(schemas.RunOut, "the run"), **_errors(401, 403, 404)},
            ),
        },
        "/v0/runs/{run_id}/fail": {
            "post": _op(
                "Fail a run (admins); its pending hold is cancelled",
                security=KEY + SESSION,
                params=[run_id],
                raw_body={
                    "required": False,
                    "content": {
                        "application/json": {"schema": {"type": "object", "properties": {"reason": {"type": "string"}}}}
                    },
                },
                responses={"200": _json(schemas.RunOut, "the failed run"), **_errors(400, 401, 403, 404, 409, 413)},
            ),
        },
        "/v0/runs/{run_id}/state/{key}": {
            "get": _op(
                "Read a run-state value",
                security=reader,
                params=[run_id, key_param],
                responses={"200": any_json, **_errors(401, 403, 404)},
            ),
            "put": _op(
                "Write a run-state value (raw JSON, at most 1 MiB)",
                security=TOKEN,
                params=[run_id, key_param],
                raw_body={"required": True, "content": {"application/json": {"schema": {}}}},
                responses={"204": {"description": "stored"}, **_errors(400, 401, 403, 404, 409, 413)},
            ),
            "delete": _op(
                "Delete a run-state value",
                security=TOKEN,
                params=[run_id, key_param],
                responses={"204": {"description": "deleted"}, **_errors(401, 403, 404)},
            ),
        },
        "/v0/files": {
            "post": _op(
                "Upload a file of the token's run (raw body, at most 25 MiB)",
                security=TOKEN,
                params=[
                    {
                        "name": "x-filename",
                        "in": "header",
                        "required": True,
                        "schema": {"type": "string", "minLength": 1, "maxLength": 255},
                    },
                    {
                        "name": "Idempotency-Key",
                        "in": "header",
                        "required": False,
                        "description": "a repeat with the same key and file returns the first file",
                        "schema": {"type": "string", "maxLength": 200},
                    },
                ],
                raw_body={
                    "required": True,
                    "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
                },
                responses={"201": _json(schemas.FileOut, "stored"), **_errors(401, 403, 409, 413, 422)},
            ),
        },
        "/v0/files/{file_id}": {
            "get": _op(
                "Download a file",
                security=reader,
                params=[_path_param("file_id", "^f_[0-9]+$")],
                responses={
                    "200": {
                        "description": "the file, typed from our record (images and PDFs inline, the rest attached)",
                        "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
                    },
                    **_errors(401, 403, 404),
                },
            ),
        },
        "/v0/datasets": {
            "post": _op(
                "Create a dataset of one capability (its approvers)",
                security=KEY + SESSION,
                body=schemas.DatasetIn,
                responses={
                    "201": _json(schemas.DatasetCreatedOut, "created"),
                    **_errors(400, 401, 403, 413, 422),
                },
            ),
            "get": _op(
                "List datasets (newest first, keyset pages)",
                security=KEY + SESSION,
                params=[
                    {"name": n, "in": "query", "required": False, "schema": {"type": "string"}}
                    for n in ("capability", "cursor")
                ],
                responses={"200": _json(schemas.DatasetListOut, "a page"), **_errors(401, 403, 422)},
            ),
        },
        "/v0/datasets/{dataset_id}": {
            "get": _op(
                "Read a dataset",
                security=KEY + SESSION,
                params=[dataset_id],
                responses={"200": _json(schemas.DatasetOut, "the dataset"), **_errors(401, 403, 404)},
            ),
        },
        "/v0/datasets/{dataset_id}/items": {
            "post": _op(
                "Add an item: written by hand, or `from_run` (a completed or failed run of the capability)",
                security=KEY + SESSION,
                params=[dataset_id],
                raw_body={
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {"oneOf": [_ref(schemas.DatasetItemIn), _ref(schemas.DatasetItemFromRunIn)]}
                        }
                    },
                },
                responses={
                    "201": _json(schemas.DatasetItemCreatedOut, "recorded"),
                    **_errors(400, 401, 403, 404, 413, 422),
                },
            ),
            "get": _op(
                "List a dataset's items (newest first, keyset pages)",
                security=KEY + SESSION,
                params=[dataset_id, {"name": "cursor", "in": "query", "required": False, "schema": {"type": "string"}}],
                responses={"200": _json(schemas.DatasetItemListOut, "a page"), **_errors(401, 403, 404, 422)},
            ),
        },
        "/v0/datasets/{dataset_id}/items/{item_id}": {
            "get": _op(
                "Read a dataset item",
                security=KEY + SESSION,
                params=[dataset_id, item_id],
                responses={"200": _json(schemas.DatasetItemOut, "the item"), **_errors(401, 403, 404)},
            ),
            "delete": _op(
                "Delete a dataset item (approvers; audited)",
                security=KEY + SESSION,
                params=[dataset_id, item_id],
                responses={"204": {"description": "deleted"}, **_errors(401, 403, 404)},
            ),
        },
        "/v0/experiments": {
            "post": _op(
                "Start an experiment: one eval run per item of the dataset (approvers)",
                security=KEY + SESSION,
                body=schemas.ExperimentIn,
                responses={
                    "201": _json(schemas.ExperimentCreatedOut, "started"),
                    **_errors(400, 401, 403, 404, 413, 422, 429),
                },
            ),
            "get": _op(
                "List experiments (newest first, keyset pages)",
                security=KEY + SESSION,
                params=[{"name": "cursor", "in": "query", "required": False, "schema": {"type": "string"}}],
                responses={
                    "200": _json(schemas.ExperimentListOut, "a page"),
                    **_errors(401, 403, 422),
                },
            ),
        },
        "/v0/experiments/{experiment_id}": {
            "get": _op(
                "Read an experiment: each item's run, output, expected output and whether they match",
                security=KEY + SESSION,
                params=[_path_param("experiment_id", "^ex_[0-9]+$")],
                responses={"200": _json(schemas.ExperimentOut, "the experiment"), **_errors(401, 403, 404)},
            ),
        },
        "/v0/capabilities/{name}/rules": {
            "get": _op(
                "Read a capability's current rules",
                security=KEY + SESSION,
                params=[capability],
                responses={"200": _json(schemas.RuleSetOut, "the current version"), **_errors(401, 403, 404)},
            ),
            "put": _op(
                "Save the rules as a new version (admins), answered with their backtest",
                security=KEY + SESSION,
                params=[capability],
                body=schemas.RulesIn,
                responses={
                    "200": _json(schemas.RuleSetSavedOut, "the new version"),
                    **_errors(400, 401, 403, 404, 413, 422),
                },
            ),
        },
        "/v0/capabilities/{name}/backtest": {
            "post": _op(
                "Replay rules or a grant's expression over the last 90 days of human decisions",
                security=KEY + SESSION,
                params=[capability],
                body=schemas.BacktestIn,
                responses={"200": _json(schemas.BacktestOut, "the backtest"), **_errors(400, 401, 403, 404, 413, 422)},
            ),
        },
        "/v0/capabilities/{name}/grants": {
            "get": _op(
                "List a capability's standing grants with their uses (newest first)",
                security=KEY + SESSION,
                params=[capability],
                responses={"200": _json(schemas.GrantListOut, "the grants"), **_errors(401, 403, 404)},
            ),
            "post": _op(
                "Create a standing grant (approvers of the capability), answered with its backtest",
                security=KEY + SESSION,
                params=[capability],
                body=schemas.GrantIn,
                responses={
                    "201": _json(schemas.GrantCreatedOut, "the grant"),
                    **_errors(400, 401, 403, 404, 413, 422),
                },
            ),
        },
        "/v0/grants/{grant_id}": {
            "get": _op(
                "Read a standing grant",
                security=KEY + SESSION,
                params=[grant_id],
                responses={"200": _json(schemas.GrantOut, "the grant"), **_errors(401, 403, 404)},
            ),
        },
        "/v0/grants/{grant_id}/revoke": {
            "post": _op(
                "Revoke a standing grant (approvers of its capability, or admins)",
                security=KEY + SESSION,
                params=[grant_id],
                responses={"200": _json(schemas.GrantOut, "the revoked grant"), **_errors(401, 403, 404)},
            ),
        },
        "/v0/me/away": {
            "get": _op(
                "Read your out-of-office window and delegate (a signed-in person; keys and tokens name nobody)",
                security=SESSION,
                responses={"200": _json(schemas.AwayOut, "the window, or nulls"), **_errors(401, 403)},
            ),
            "put": _op(
                "Set your out-of-office: notifications and escalations go to the delegate, 'acting for' you",
                security=SESSION,
                body=schemas.AwayIn,
                responses={"200": _json(schemas.AwayOut, "the window"), **_errors(400, 401, 403, 413, 422)},
            ),
            "delete": _op(
                "End your out-of-office now",
                security=SESSION,
                responses={"200": _json(schemas.AwayOut, "nulls"), **_errors(401, 403)},
            ),
        },
        "/v0/invocations/{invocation_id}/retry": {
            "post": _op(
                "Send an undeliverable invocation again (admins)",
                security=KEY + SESSION,
                params=[_path_param("invocation_id", "^inv_[0-9a-f]+$")],
                responses={"200": _json(schemas.InvocationRetryOut, "due again"), **_errors(401, 403, 404, 409)},
            ),
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Review Queue API",
            "version": "0",
            "description": "Agents ask for decisions (holds); reviewers decide; the service resumes the agent.",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "runToken": {"type": "apiKey", "in": "header", "name": "x-agentos-run-token"},
                "serviceKey": {"type": "http", "scheme": "bearer"},
                "session": {"type": "apiKey", "in": "cookie", "name": "sessionid"},
            },
        },
    }


def openapi_json(request):
    return JsonResponse(document())


def docs(request):
    operations = [
        {"method": method.upper(), "path": path, **op}
        for path, methods in document()["paths"].items()
        for method, op in methods.items()
    ]
    return render(request, "api/docs.html", {"operations": operations, "schemas": document()["components"]["schemas"]})
