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
from django.core.files.base import ContentFile
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.failures import FailureGroup

from holds import services
from holds.schemas import validate_ask
from tests import factories

EXAMPLES_PER_MODE = 200  # x 2 modes x 13 operations = 5,200 cases
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
    services.run_file_add(
        run=run,
        name="a.pdf",
        content_type="application/pdf",
        content=ContentFile(b"%PDF-1.4"),
        size=8,
        sha256="0" * 64,
        actor=factories.SYSTEM,
    )
    services.run_state_put(run=run, key="progress", value={"step": 1}, actor=factories.SYSTEM)
    # A member's key: it reads and decides, but cannot fail the fuzzing run and kill its token.
    _, key = factories.account("fuzzer", role="member")
    return token, key


@pytest.mark.django_db(transaction=True)  # a database error in one case must not poison the next
def test_it_answers_5000_generated_requests_without_a_server_error_and_as_documented(fuzz_world):
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

    for result in schema.get_all_operations():
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fuzz(result.ok(), mode)

    total = sum(ran.values())
    print(f"schemathesis: {total} cases over {len(ran)} operation/mode pairs; unexpected failures in {len(failures)}")
    assert failures == {}, json.dumps({k: v[:2] for k, v in failures.items()}, indent=1)
    assert len(ran) == 26 and total >= 5000, ran


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
    item = st.dictionaries(st.sampled_from(["id", "title", "data", "confidence", "x"]), values, max_size=5) | values
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
