"""Builders for test data. They go through services.py, as production does."""

import hashlib
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.files.base import ContentFile
from django.utils import timezone

from holds import services
from holds.auth import SYSTEM, actor_for_account, actor_for_user, run_token_for
from holds.config import CapabilitySpec
from holds.models import Capability, Hold, Invocation, Run

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def capability(name="pay_invoices", endpoint="http://127.0.0.1:9", **values) -> Capability:
    spec = CapabilitySpec(name=name, values={"endpoint": endpoint, "secret": SECRET, **values})
    services.capabilities_sync(specs=[spec], actor=SYSTEM)
    return Capability.objects.get(name=name)


def person(username, role="member", password="pw-for-tests-1"):
    services.person_add(username=username, role=role, password=password, actor=SYSTEM)
    return get_user_model().objects.get(username=username)


def account(name, role="member"):
    account, key = services.service_account_create(name=name, role=role, actor=SYSTEM)
    return account, key


def start_run(cap: Capability, input=None, actor=SYSTEM) -> Run:
    run, _ = services.run_start(capability_name=cap.name, input=input or {}, actor=actor)
    return run


def deliver_now(run: Run) -> tuple[Invocation, str]:
    """Claims the run's due invocation as a worker would, so its token is live. Returns (inv, token)."""
    invocation = Invocation.objects.filter(run=run, status=Invocation.Status.PENDING).order_by("-seq").first()
    claim = services.invocation_claim(invocation_id=invocation.id)
    assert claim is not None, "the invocation was not due"
    return claim.invocation, run_token_for(invocation.id)


def run_file(run: Run, name="a.pdf", content=b"%PDF-1.4", content_type="application/pdf"):
    """A file of the run's environment, stored through services.run_file_add as an upload is."""
    return services.run_file_add(
        run=run,
        name=name,
        content_type=content_type,
        content=ContentFile(content),
        size=len(content),
        sha256=hashlib.sha256(content).hexdigest(),
        actor=SYSTEM,
    )


def answer(invocation: Invocation, body: dict) -> str:
    invocation.refresh_from_db()
    return services.invocation_record(
        invocation_id=invocation.id,
        attempt=invocation.attempts,
        outcome=services.Outcome(kind="answer", answer=body, status_code=200),
    )


def ask_body(n_items=2, **overrides) -> dict:
    body = {
        "intent": "Pay 2 invoices",
        "actions": ["approve", "edit", "reject", "feedback"],
        "items": [
            {
                "id": f"INV-{i + 1}",
                "title": f"Payee {i + 1} · {100 + i}.00",
                "data": {"payee": f"Payee {i + 1}", "amount": f"{100 + i}.00"},
                "confidence": {"amount": 0.68},
            }
            for i in range(n_items)
        ],
        "details": "Approve to pay as shown.",
        "expires_in": 86400,
    }
    body.update(overrides)
    return body


def past_due(hold_id: int) -> None:
    """The hold's deadline passes now: the next sweep batch expires it."""
    assert Hold.objects.filter(pk=hold_id).update(expires_at=timezone.now() - timedelta(seconds=1)) == 1


def held_hold(cap: Capability, body=None):
    """A run that asked and answered suspended: (run, hold)."""
    run = start_run(cap)
    invocation, _ = deliver_now(run)
    hold = services.hold_ask(invocation=invocation, body=body or ask_body())
    answer(invocation, {"status": "suspended", "hold_id": hold.public_id})
    run.refresh_from_db()
    return run, hold


__all__ = ["actor_for_account", "actor_for_user"]
