"""Issue 30's costs pinned by their internals: what an ask or a decision compiles, and when.

(Behaviour of the same findings: tests/test_security_costs.py.)
"""

import pytest

from holds import item_schemas
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def compiles(monkeypatch):
    """How many schemas were compiled (each draft's validator class, counted)."""
    counted = []

    def counting(cls):
        def build(*args, **kwargs):
            counted.append(args[0])
            return cls(*args, **kwargs)

        return build

    for draft, cls in list(item_schemas.DRAFTS.items()):
        monkeypatch.setitem(item_schemas.DRAFTS, draft, counting(cls))
    monkeypatch.setattr(item_schemas, "_cache", type(item_schemas._cache)())
    return counted


SCHEMA = {"type": "object", "properties": {"payee": {"type": "string", "pattern": "^[A-Z][a-z]+$"}}}


def schema_item(n: int, schema=SCHEMA) -> dict:
    return {"id": f"INV-{n}", "title": f"Invoice {n}", "data": {"payee": "Acme"}, "schema": schema}


def test_1_a_dead_token_compiles_nothing(api, cap, compiles):
    run = factories.start_run(cap)
    invocation, token = factories.deliver_now(run)
    factories.answer(invocation, {"status": "completed", "output": {}})  # the token was issued, and is dead now
    response = api.post("/v0/holds", factories.ask_body(items=[schema_item(1)]), token=token)
    assert response.status_code == 401
    assert compiles == []


def test_1_a_schema_is_compiled_once_for_every_item_and_every_edit(api, cap, member_key, compiles):
    _, token = factories.deliver_now(factories.start_run(cap))
    body = factories.ask_body(items=[schema_item(n) for n in range(1, 41)], actions=["approve", "edit", "reject"])
    response = api.post("/v0/holds", body, token=token)
    assert response.status_code == 201, response.content
    assert len(compiles) == 1
    hold_id = response.json()["hold_id"]
    for payee in ("Bob", "Carl", "1bad"):
        edit = [{"id": "INV-1", "action": "edit", "data": {"payee": payee}}]
        api.post(f"/v0/holds/{hold_id}/decision", {"items": edit}, key=member_key)
    assert len(compiles) == 1


def test_2_an_ask_of_62_emphasis_texts_renders_nothing_in_the_web_process(api, cap, monkeypatch, tmp_path):
    from holds import markup

    monkeypatch.setattr(markup, "SLOT_DIR", str(tmp_path))
    rendered_here = []
    real = markup.to_html
    monkeypatch.setattr(markup, "to_html", lambda text: rendered_here.append(text) or real(text))
    _, token = factories.deliver_now(factories.start_run(cap))
    items = [{"id": f"S{i}", "title": "t", "data": {"a": 1}, "details": f"{i} " + "*a" * 2000} for i in range(62)]
    response = api.post("/v0/holds", factories.ask_body(items=items), token=token)
    assert response.status_code == 201, response.content
    assert rendered_here == []
