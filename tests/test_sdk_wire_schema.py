"""agentos.testing checks asks and decisions with the JSON Schema the service publishes: the copy shipped in
the SDK (sdk/agentos/wire_schema.json, written by scripts/sdk-wire-schema) equals the service's document."""

import importlib.machinery
import importlib.util
import json
import pathlib

from agentos import testing

from holds.openapi import document

ROOT = pathlib.Path(__file__).resolve().parent.parent


def generator():
    loader = importlib.machinery.SourceFileLoader("sdk_wire_schema", str(ROOT / "scripts" / "sdk-wire-schema"))
    spec = importlib.util.spec_from_loader("sdk_wire_schema", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_the_shipped_schema_is_the_services_published_one():
    gen = generator()
    published = gen.text(gen.wire_schema(document()["components"]["schemas"]))
    assert testing.WIRE_SCHEMA.read_text() == published, "run .venv/bin/python scripts/sdk-wire-schema"


def test_a_changed_document_would_differ(monkeypatch):
    gen = generator()
    components = json.loads(json.dumps(document()["components"]["schemas"]))
    components["ItemIn"]["properties"]["title"]["maxLength"] = 5
    assert testing.WIRE_SCHEMA.read_text() != gen.text(gen.wire_schema(components))


def test_the_fake_refuses_what_the_schema_refuses_with_the_services_paths():
    ok = {"intent": "Pay", "items": [{"id": "I-1", "title": "Acme", "data": {"a": 1}}]}
    assert testing.validate_ask(ok, set()) == []
    fields = lambda body: [e["field"] for e in testing.validate_ask(body, set())]  # noqa: E731
    assert fields({"items": ok["items"]}) == ["intent"]
    assert fields({**ok, "colour": "red"}) == ["colour"]
    assert fields({**ok, "items": [{**ok["items"][0], "title": "x" * 1001}]}) == ["items[0].title"]
    assert fields({**ok, "expires_in": 59}) == ["expires_in"]
    assert fields({**ok, "items": ok["items"] * 2}) == ["items[1].id"]
    assert testing.schema_errors("DecisionIn", {"items": [{"id": "I-1", "action": "maybe"}]})[0]["field"] == (
        "items[0].action"
    )
