"""Fuzzing: schemathesis against /v0/openapi.json, and hypothesis against the ask validator.

schemathesis generates requests from the document (positive and negative data), sends them to
the Django WSGI app in-process with valid credentials, and checks each answer: never a 5xx, and
status, content type, headers and body as the document says. Seeds are fixed (derandomize), so a
failure reproduces; every case runs (no early stop) so one report lists every bad operation.
"""

import json
import re

import pytest
import schemathesis
from django.core.cache import cache
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.failures import FailureGroup

from holds import services
from holds.schemas import validate_ask
from tests import factories

EXAMPLES_PER_MODE = 200  # x 2 modes x 34 operations (10 evals, 1 extend, 7 rules and grants, 3 away) = 13,600 cases
OPERATIONS = 34
# The operations are split over shards (every fourth one each), so that pytest-xdist spreads the cases
# over its workers instead of one test running them all at the end of `make test`.
SHARDS = 4
FUZZ = settings(
    max_examples=EXAMPLES_PER_MODE,
    derandomize=True,  # a fixed seed: the same cases on every run
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
]


def credentials(operation, n: int, token: str, key: str) -> dict:
    """What the operation's security asks for; readers alternate between the token and the key."""
    schemes = {name for requirement in operation.definition.raw.get("security", []) for name in requirement}
    if schemes == {"runToken"}:
        return {"x-agentos-run-token": token}
    if "runToken" not in schemes:
        return {"authorization": f"Bearer {key}"}
    return {"x-agentos-run-token": token} if n % 2 else {"authorization": f"Bearer {key}"}


@pytest.fixture
def fuzz_world(cap, settings):
    # The limits are tested in test_security_ratelimit.py; here they would only answer 429.
    settings.RQ_RATE_ASK = settings.RQ_RATE_DECISION = "off"
    cache.clear()
    _, hold = factories.held_hold(cap)
    run = factories.start_run(cap)
    invocation, token = factories.deliver_now(run)
    factories.run_file(run, name="a.pdf", content=b"%PDF-1.4", content_type="application/pdf")
    services.run_state_put(run=run, key="progress", value={"step": 1}, actor=factories.SYSTEM)
    # A member's key: it reads and decides, but cannot fail the fuzzing run and kill its token.
    _, key = factories.account("fuzzer", role="member")
    return token, key


@pytest.fixture
def kept_connection():
    """The database connection kept from one case to the next, as a deployment with DB_CONN_MAX_AGE set
    keeps it: schemathesis calls the real WSGI handler, which with the default of 0 closes it after every
    request, and a new connection per case was a fifth of the fuzzing's time. Health checks replace a
    connection that an error left unusable, so one case still cannot poison the next."""
    from django.db import connection

    kept = ("CONN_MAX_AGE", "CONN_HEALTH_CHECKS")
    saved = {name: connection.settings_dict[name] for name in kept}
    connection.close()  # the next connection is made with these settings
    connection.settings_dict.update(CONN_MAX_AGE=None, CONN_HEALTH_CHECKS=True)
    yield
    connection.settings_dict.update(saved)
    connection.close()


@pytest.mark.django_db(transaction=True)  # a database error in one case must not poison the next
@pytest.mark.parametrize("shard", range(SHARDS))
def test_it_answers_generated_requests_without_a_server_error_and_as_documented(fuzz_world, kept_connection, shard):
    token, key = fuzz_world
    schema = schemathesis.openapi.from_wsgi("/v0/openapi.json", get_wsgi_application())
    checks = [getattr(schemathesis.checks, name) for name in CHECKS]
    ran: dict[str, int] = {}
    failures: dict[str, list[str]] = {}

    def fuzz(operation, mode) -> None:
        label = f"{operation.label} ({mode.value})"

        @FUZZ
        @given(case=operation.as_strategy(generation_mode=mode))
        def one(case):
            n = ran[label] = ran.get(label, 0) + 1
            headers = credentials(operation, n, token, key)
            try:
                response = case.call(headers=headers)
                case.validate_response(response, checks=checks, headers=headers)
            except (Exception, FailureGroup) as exc:  # noqa: BLE001 - collected, reported together below
                failures.setdefault(label, []).append(f"{type(exc).__name__}: {str(exc)[:600]}")

        one()

    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == OPERATIONS  # a new operation is fuzzed too, once it is counted here
    mine = operations[shard::SHARDS]
    for operation in mine:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fuzz(operation, mode)

    total = sum(ran.values())
    print(f"schemathesis: {total} cases over {len(ran)} operation/mode pairs; unexpected failures in {len(failures)}")
    assert failures == {}, json.dumps({k: v[:2] for k, v in failures.items()}, indent=1)
    # Every pair ran, and at least 145 cases each on average (9,000 over the 62 pairs of last round).
    assert len(ran) == 2 * len(mine) and total >= 145 * len(ran), ran


# --- hypothesis: the ask validator never raises -------------------------------------------------


def json_values(text):
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | text
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=5) | st.dictionaries(text, inner, max_size=5),
        max_leaves=30,
    )


any_json = json_values(st.text(max_size=30))
# What JSON can carry over the wire as UTF-8 (lone surrogates get 400: test_security_bodies.py).
wire_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=30)
wire_json = json_values(wire_text)


def ask_shaped(text, values):
    item = (
        st.dictionaries(st.sampled_from(["id", "title", "data", "confidence", "schema", "x"]), values, max_size=5)
        | values
    )
    return st.fixed_dictionaries(
        {},
        optional={
            "intent": text | values,
            "items": st.lists(item, max_size=4) | values,
            "actions": st.lists(st.sampled_from(["approve", "edit", "reject", "feedback", "x"]), max_size=5) | values,
            "details": text | values,
            "expires_in": st.integers() | values,
            "files": st.lists(text, max_size=3) | values,
            "extra": values,
        },
    )


ask_like = ask_shaped(st.text(max_size=600), any_json)
wire_ask = ask_shaped(wire_text, wire_json)


def assert_accepted_or_field_errors(body) -> None:
    ask, errors = validate_ask(body)
    if ask is not None:
        assert errors == []
        return
    assert errors, "a refusal names at least one field"
    for error in errors:
        assert set(error) == {"field", "message"}
        assert isinstance(error["field"], str) and error["field"]
        assert isinstance(error["message"], str) and error["message"]


@settings(max_examples=1500, derandomize=True, deadline=None, database=None)
@given(body=any_json)
def test_it_accepts_or_names_fields_for_any_json_and_never_raises(body):
    assert_accepted_or_field_errors(body)


@settings(max_examples=1500, derandomize=True, deadline=None, database=None)
@given(body=ask_like)
def test_it_accepts_or_names_fields_for_any_ask_shaped_json_and_never_raises(body):
    assert_accepted_or_field_errors(body)


@given(
    items=st.lists(
        st.fixed_dictionaries(
            {"id": st.text(min_size=1, max_size=20), "title": st.text(min_size=1, max_size=20), "data": any_json},
            optional={"confidence": st.dictionaries(st.text(max_size=5), st.floats(-1, 2) | any_json, max_size=3)},
        ),
        min_size=1,
        max_size=4,
    )
)
@settings(max_examples=1500, derandomize=True, deadline=None, database=None)
def test_it_accepts_every_well_formed_ask_and_names_the_exact_bad_field_otherwise(items):
    ask, errors = validate_ask({"intent": "x", "items": items})
    well_formed = all(
        isinstance(i["data"], dict)
        and all(
            k in i["data"] and isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 1
            for k, v in (i.get("confidence") or {}).items()
        )
        and isinstance(i.get("confidence", {}), dict)
        for i in items
    ) and len({i["id"] for i in items}) == len(items)
    assert (ask is not None) == well_formed, errors
    assert all(e["field"].startswith("items[") for e in errors), errors


# NUL (PostgreSQL refuses it in text) and lone surrogates (not characters in UTF-8).
UNSTORABLE = re.compile("\\\\u0000|[\\ud800-\\udfff]")


@pytest.mark.django_db
@settings(max_examples=150, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(body=wire_ask)
def test_the_ask_endpoint_answers_any_json_with_201_or_422_never_500(api, cap, body):
    run = factories.start_run(cap)
    _, token = factories.deliver_now(run)
    response = api.post("/v0/holds", body, token=token)
    if UNSTORABLE.search(json.dumps(body, ensure_ascii=False)):
        # NUL and lone surrogates cannot be stored as text: refused before validation, as bad JSON.
        assert response.status_code == 400 and response.json()["error"] == "bad_json", response.content
        return
    assert response.status_code in (201, 422), response.content
    if response.status_code == 422:
        assert response.json()["error"] == "invalid" and response.json()["errors"]


# --- NUL through the address: every route, every path parameter, every query parameter ----------

# PostgreSQL refuses NUL in text, so a NUL that reaches a query is a 500. These came from the review.
NUL_REQUESTS = [
    ("GET", "/v0/runs/{run}/state/a%00b"),
    ("PUT", "/v0/runs/{run}/state/a%00b"),
    ("DELETE", "/v0/runs/{run}/state/a%00b"),
    ("POST", "/v0/invocations/inv_%00/retry"),
    ("GET", "/v0/holds?cursor=a%00b"),
    ("GET", "/v0/holds?capability=a%00b"),
    ("GET", "/?q=a%00b"),
    ("GET", "/history?q=a%00b"),
    ("GET", "/audit?actor=%00"),
    ("GET", "/audit?kind=a%00"),
    ("GET", "/audit.csv?actor=%00"),
    ("POST", "/ops/invocations/inv_%00/retry"),
]
# Every query parameter a page or the API reads.
QUERY_NAMES = [
    "q",
    "capability",
    "after",
    "seen",
    "status",
    "cursor",
    "actor",
    "kind",
    "run",
    "hold",
    "before",
    "page",
    "%00",
]


def routes() -> list[str]:
    """Every route of the URLconf, its converters still in place (`runs/<str:run_id>/fail`)."""
    from django.urls import URLPattern, URLResolver, get_resolver

    found = []

    def walk(patterns, prefix):
        for entry in patterns:
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, prefix + str(entry.pattern))
            elif isinstance(entry, URLPattern) and not str(entry.pattern).startswith("^"):
                found.append(prefix + str(entry.pattern))

    walk(get_resolver().url_patterns, "/")
    return [r for r in found if not r.startswith("/admin/") and not r.startswith("/bench/")]


@pytest.fixture
def nul_world(cap, admin_user, settings):
    settings.RQ_RATE_ASK = settings.RQ_RATE_DECISION = settings.RQ_RATE_LOGIN = "off"
    _, hold = factories.held_hold(cap)
    run = factories.start_run(cap)
    invocation, token = factories.deliver_now(run)
    _, key = factories.account("nul-admin", role="admin")
    filled = {"hold_id": hold.public_id, "run_id": run.public_id, "invocation_id": invocation.id, "key": "k"}
    return {"token": token, "key": key, "user": admin_user, "run": run.public_id, "filled": filled}


def callers(world) -> list:
    from django.test import Client

    session = Client(raise_request_exception=False)
    session.force_login(world["user"])
    plain = Client(raise_request_exception=False)
    return [
        (session, {}),
        (plain, {"x-agentos-run-token": world["token"]}),
        (plain, {"authorization": f"Bearer {world['key']}"}),
        (plain, {}),
    ]


def assert_refused_with_4xx(response, method, url):
    assert 400 <= response.status_code < 500, (method, url, response.status_code)
    if url.startswith("/v0/"):
        assert response["Content-Type"].startswith("application/json"), (method, url)
        assert response.json()["error"] and response.json()["message"], (method, url)


@pytest.mark.django_db
def test_it_answers_nul_in_the_reviewed_addresses_with_4xx(nul_world):
    for method, url in NUL_REQUESTS:
        url = url.format(run=nul_world["run"])
        for client, headers in callers(nul_world):
            assert_refused_with_4xx(client.generic(method, url, headers=headers), method, url)


@pytest.mark.django_db  # the first 500 fails the test at once, so no later request runs in a broken transaction
def test_it_answers_nul_in_any_path_parameter_or_query_parameter_of_any_route_with_4xx(nul_world):
    """A small fuzz run over the URLconf: each route with NUL in all its path parameters, and with its
    parameters filled in and NUL in each query parameter, by every kind of caller (GET and POST for
    the path; GET for the query, so that no write runs with the parameters filled in)."""
    import re

    converter = re.compile(r"<(?:(\w+):)?(\w+)>")
    everyone = callers(nul_world)
    sent = 0
    for route in routes():
        nul_path = converter.sub(lambda m: "1" if m.group(1) == "int" else "a%00b", route)
        good_path = converter.sub(
            lambda m: "1" if m.group(1) == "int" else nul_world["filled"].get(m.group(2), "x"), route
        )
        cases = (
            [(nul_path, method, caller) for method in ("GET", "POST") for caller in everyone]
            if "%00" in nul_path  # a route of integers only has no text to put a NUL in
            else []
        )
        cases += [(f"{good_path}?{name}=a%00b", "GET", caller) for name in QUERY_NAMES for caller in everyone[:3]]
        for url, method, (client, headers) in cases:
            response = client.generic(method, url, headers=headers)
            assert response.status_code < 500, (method, url, list(headers), response.status_code)
            if "%00" in url.partition("?")[0] or url.endswith("?%00=a%00b"):
                assert_refused_with_4xx(response, method, url)
            sent += 1
    assert sent > 600, sent


@pytest.mark.django_db
def test_it_answers_nul_in_a_header_or_a_cookie_with_400(nul_world, client):
    url = f"/v0/runs/{nul_world['run']}"
    key = {"authorization": f"Bearer {nul_world['key']}"}
    response = client.post(
        "/v0/runs",
        data='{"capability": "pay_invoices", "input": {}}',
        content_type="application/json",
        headers={**key, "idempotency-key": "a\x00b"},
    )
    assert response.status_code == 400 and response.json()["error"] == "bad_request"
    # Django unquotes "\\000" in a quoted cookie into NUL; as a session key it would reach the database.
    client.cookies["sessionid"] = "abcdefgh\x00ijkl"
    assert client.get(url, headers=key).status_code == 400
    assert client.get("/").status_code == 400


@pytest.mark.django_db
def test_it_answers_401_before_404_when_a_nul_comes_without_credentials(nul_world, client):
    for url in (f"/v0/runs/{nul_world['run']}/state/a%00b", "/v0/holds?cursor=%00"):
        response = client.get(url)
        assert response.status_code == 401 and response.json()["error"] == "unauthorized"
    response = client.get("/v0/holds?cursor=%00&status=a%00", headers={"authorization": f"Bearer {nul_world['key']}"})
    assert response.status_code == 422
    assert {e["field"] for e in response.json()["errors"]} == {"cursor", "status"}
    response = client.get("/v0/holds/h_%00", headers={"x-agentos-run-token": nul_world["token"]})
    assert response.status_code == 404 and response.json()["error"] == "not_found"


# Issue 30: crafted paging cursors (any JSON, base64url) on the reviewer's lists: 200 or 400, never 500.
def _cursor(value) -> str:
    import base64

    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.mark.django_db
@settings(max_examples=200, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(value=st.lists(any_json, max_size=7) | any_json, path=st.sampled_from(["/", "/history", "/calibration"]))
def test_crafted_cursors_and_pages_answer_200_or_400_never_500(client, member, value, path):
    client.raise_request_exception = False
    client.force_login(member)
    response = client.get(path, {"after": _cursor(value), "page": str(value)[:20]})
    assert response.status_code in (200, 400), (path, value, response.status_code)
