"""The Python SDK verifies decision receipts against the running service's JWKS (`inv.receipt`,
`agentos.verify_receipt`): online, offline with a key set it holds, an unknown kid fetched once then
failing, a changed byte failing, and a resume whose data differs from what was signed refused."""

import base64
import copy
import json

import agentos
import pytest
from agentos import receipts as sdk_receipts
from django.core.management import call_command

from holds import delivery
from holds.auth import actor_for_account
from holds.models import Invocation
from holds.services import hold_decide
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)

BODY = {
    "items": [
        {"id": "INV-1", "action": "edit", "data": {"payee": "Ünal", "amount": "1.50"}},
        {"id": "INV-2", "action": "reject"},
    ]
}


@pytest.fixture
def decided(live_server, settings):
    """A decided hold's resume body as the agent receives it, with the service at live_server."""
    settings.RQ_PUBLIC_URL = live_server.url
    sdk_receipts.forget_keys()
    cap = factories.capability()
    robot = actor_for_account(factories.account("bot", role="member")[0])

    def one():
        _, hold = factories.held_hold(cap)
        hold_decide(hold_id=hold.pk, actor=robot, body=BODY)
        return delivery.invocation_body(Invocation.objects.get(hold=hold, kind="resume"))

    yield one
    sdk_receipts.forget_keys()


@pytest.fixture
def fetches(monkeypatch):
    urls = []
    real = sdk_receipts._fetch

    def counted(url, timeout):
        urls.append(url)
        return real(url, timeout)

    monkeypatch.setattr(sdk_receipts, "_fetch", counted)
    return urls


def test_inv_receipt_is_the_verified_claims(decided, live_server, fetches):
    body = decided()
    inv = agentos.Invocation(body["invocation"], body["resume"])
    claims = inv.receipt
    assert claims["hold_id"] == body["resume"]["hold_id"] and claims["run_id"] == body["invocation"]["run_id"]
    assert [i["action"] for i in claims["items"]] == ["edit", "reject"]
    assert claims["items"][0]["decided_sha256"] == sdk_receipts.sha256({"payee": "Ünal", "amount": "1.50"})
    assert inv.resume.receipt == body["resume"]["receipt"]
    assert fetches == [live_server.url + "/.well-known/jwks.json"]
    # A second resume signed with the same key verifies from the cache, without a fetch.
    again = decided()
    assert agentos.Invocation(again["invocation"], again["resume"]).receipt["hold_id"] == again["resume"]["hold_id"]
    assert len(fetches) == 1
    inv.close()


def test_offline_with_a_key_set_held_locally(decided, client, fetches):
    token = decided()["resume"]["receipt"]
    jwks = client.get("/.well-known/jwks.json").json()
    assert agentos.verify_receipt(token, jwks=jwks)["resolved_by"] == "human"
    assert fetches == []


def test_a_rotated_key_is_fetched_once_and_an_unknown_kid_then_fails(decided, live_server, fetches):
    url = live_server.url + "/.well-known/jwks.json"
    old = decided()["resume"]["receipt"]
    agentos.verify_receipt(old, jwks_url=url)
    call_command("rotate_receipt_key", stdout=open("/dev/null", "w"))
    new = decided()["resume"]["receipt"]
    assert agentos.verify_receipt(new, jwks_url=url)["items"]  # the new kid: one more fetch
    assert agentos.verify_receipt(old, jwks_url=url)["items"]  # the old key is still published
    assert len(fetches) == 2
    header, payload, signature = new.split(".")
    forged_header = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    forged_header["kid"] = "not-a-key"
    unknown = base64.urlsafe_b64encode(json.dumps(forged_header).encode()).rstrip(b"=").decode()
    with pytest.raises(agentos.ReceiptError, match="unknown key 'not-a-key'"):
        agentos.verify_receipt(f"{unknown}.{payload}.{signature}", jwks_url=url)
    assert len(fetches) == 3  # fetched once for it, then failed


def test_a_changed_byte_fails(decided, client):
    token = decided()["resume"]["receipt"]
    jwks = client.get("/.well-known/jwks.json").json()
    header, payload, signature = token.split(".")
    for changed in (
        f"{header}.{payload[:-2]}{'A' if payload[-2] != 'A' else 'B'}{payload[-1]}.{signature}",
        f"{header}.{payload}.{'A' if signature[0] != 'A' else 'B'}{signature[1:]}",
    ):
        with pytest.raises(agentos.ReceiptError):
            agentos.verify_receipt(changed, jwks=jwks)
    for garbage in ("", "a.b", "x.y.z", None):
        with pytest.raises(agentos.ReceiptError):
            agentos.verify_receipt(garbage, jwks=jwks)


def test_a_resume_whose_data_differs_from_the_receipt_is_refused(decided):
    body = decided()
    resume = copy.deepcopy(body["resume"])
    resume["items"][0]["data"]["amount"] = "1000.00"
    inv = agentos.Invocation(body["invocation"], resume)
    with pytest.raises(agentos.ReceiptError, match="INV-1"):
        _ = inv.receipt
    missing = {k: v for k, v in body["resume"].items() if k != "receipt"}
    with pytest.raises(agentos.ReceiptError, match="no receipt"):
        _ = agentos.Invocation(body["invocation"], missing).receipt
    assert agentos.Invocation(body["invocation"]).receipt is None  # a start has none
    inv.close()
