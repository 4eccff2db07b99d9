"""seeding.copy_run, which the benchmarks prepare their live tokens and held holds with: a copy is
the same rows as a run made through services.py, and behaves as one (it asks, it is decided, its
resume is claimed)."""

import json
import re

import pytest
from django.apps import apps

from bench import seeding
from holds import services
from holds.auth import actor_for_account, run_token_for, run_token_hash
from holds.models import AuditEvent, DeliveryAttempt, Hold, HoldItem, Invocation, Run
from holds.services import invocation_for_token
from tests import factories

pytestmark = [pytest.mark.django_db]

APPROVE_BOTH = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}


def live_run(cap):
    """What bench/ask.py copies: a started run whose start invocation a worker claimed."""
    run = factories.start_run(cap)
    factories.deliver_now(run)
    return run


def held_run(cap):
    """What bench/resume.py copies: tests.factories.held_hold."""
    return factories.held_hold(cap)[0]


def row_counts() -> dict[str, int]:
    return {model._meta.label: model.objects.count() for model in apps.get_models()}


def rows_of(run_id: int) -> str:
    """Every row that names run `run_id`, as text with its own ids and times replaced by placeholders,
    so that the rows of two runs compare equal when they are the same but for those."""
    run = Run.objects.get(pk=run_id)
    invocations = list(Invocation.objects.filter(run=run).order_by("seq"))
    holds = list(Hold.objects.filter(run=run).order_by("pk"))
    found = [run, *invocations, *holds]
    found += HoldItem.objects.filter(hold__in=holds).order_by("hold", "position")
    found += DeliveryAttempt.objects.filter(invocation__in=invocations).order_by("pk")
    found += AuditEvent.objects.filter(run_id_ref=run.pk).order_by("pk")
    refs = {"run_id": "r_", "run_id_ref": "r_", "hold_id": "h_", "hold_id_ref": "h_"}
    described = []
    for row in found:
        values = {"model": row._meta.label}
        for field in row._meta.concrete_fields:
            value = getattr(row, field.attname)
            if field.primary_key and field.attname == "id" and isinstance(value, int):
                continue
            if field.get_internal_type() == "DateTimeField":
                value = "a time" if value is not None else None
            elif field.attname == "token_hash":
                value = "the token's hash" if value == run_token_hash(row.pk) else value
            elif field.attname in refs and value is not None:
                value = refs[field.attname] + str(value)
            values[field.attname] = value
        described.append(values)
    text = json.dumps(described, sort_keys=True, default=str)
    # A resume's receipt signs its own ids and times (tests/test_receipts.py checks what it says).
    text = re.sub(r'(\\?"receipt\\?": \\?")[A-Za-z0-9_.-]+', r"\1a receipt", text)
    text = re.sub(rf"\br_{run.pk}\b", "r_RUN", text)
    for n, hold in enumerate(holds):
        text = re.sub(rf"\bh_{hold.pk}\b", f"h_HOLD{n}", text)
    for invocation in invocations:
        text = text.replace(invocation.id, f"INV{invocation.seq}")
    return text


@pytest.mark.parametrize("make", [live_run, held_run])
def test_a_copy_writes_the_rows_the_write_path_writes(cap, make):
    template = make(cap)
    before = row_counts()
    made = make(cap)
    by_services = {label: n - before[label] for label, n in row_counts().items()}
    before = row_counts()
    (copy,) = seeding.copy_run(template.pk, 1)
    by_copy = {label: n - before[label] for label, n in row_counts().items()}
    assert by_copy == by_services
    assert rows_of(copy.run_id) == rows_of(made.pk)
    assert rows_of(template.pk) == rows_of(made.pk)  # the original is left as it was


def test_a_copied_token_asks_as_the_original_does(api, cap):
    template = live_run(cap)
    copies = seeding.copy_run(template.pk, 3)
    for copy in copies:
        token = run_token_for(copy.invocation_id)
        assert invocation_for_token(token).run_id == copy.run_id
        response = api.post("/v0/holds", factories.ask_body(), token=token)
        assert response.status_code == 201, response.content
        assert Hold.objects.get(pk=int(response.json()["hold_id"][2:])).run_id == copy.run_id
    assert len({copy.invocation_id for copy in copies}) == 3
    response = api.post("/v0/holds", factories.ask_body(), token=run_token_for(copies[0].invocation_id))
    assert response.status_code == 409  # each copy is a run of its own, with its one open hold


def test_a_copied_held_hold_is_decided_and_resumed_as_the_factorys_is(cap):
    decider = actor_for_account(factories.account("robot", role="member")[0])
    template = held_run(cap)
    made = held_run(cap)
    (copy,) = seeding.copy_run(template.pk, 1)
    for run_id in (made.pk, copy.run_id):
        hold = Hold.objects.get(run_id=run_id)
        services.hold_decide(hold_id=hold.pk, actor=decider, body=APPROVE_BOTH)
        resume = Invocation.objects.get(hold=hold)
        assert resume.kind == "resume" and resume.status == "pending"
        claim = services.invocation_claim(invocation_id=resume.id)
        assert claim is not None and claim.invocation.run.status == "running"
    assert rows_of(copy.run_id) == rows_of(made.pk)
