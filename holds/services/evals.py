"""Evals: datasets of recorded runs, experiments that replay them, and the ask an eval run may not make.

An eval run is an ordinary run (outbox, retries, signing) with `experiment` set. It never creates a hold:
its ask is refused with 409 eval_run and the run ends `asked_for_human` in the same transaction.
"""

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from .. import ratelimit
from ..auth import SYSTEM, Actor
from ..errors import Conflict, Invalid, NotFound, QuotaExceeded
from ..ids import DATASET_ITEM, EXPERIMENT, public_id
from ..models import (
    AuditEvent,
    AuditKind,
    Capability,
    Dataset,
    DatasetItem,
    Experiment,
    Hold,
    HoldItem,
    Invocation,
    Run,
)
from ..policy import may_record_evals, require
from ..schemas import schema_errors
from ..words import ActorKind
from . import ports
from .audit import audit
from .runs import finish_run, new_invocation
from .tokens import invocation_for_token

ASKED_FOR_HUMAN_ANSWER = {"status": "failed", "error": "asked_for_human"}


def dataset_create(*, name: str, capability_name: str, actor: Actor) -> Dataset:
    """A new, empty dataset of one capability. A second one of the same name is refused (422)."""
    capability = Capability.objects.filter(name=capability_name).first()
    if capability is None:
        raise Invalid([{"field": "capability", "message": f"no capability named '{capability_name}'"}])
    require(may_record_evals(actor, capability))
    try:
        with transaction.atomic():
            dataset = Dataset.objects.create(capability=capability, name=name, created_by=actor.label)
            audit(AuditKind.DATASET_CREATED, actor, dataset=dataset.public_id, name=name, capability=capability.name)
    except IntegrityError:
        message = f"{capability.name} has a dataset named '{name}' already"
        raise Invalid([{"field": "name", "message": message}]) from None
    return dataset


def dataset_item_add(*, dataset: Dataset, actor: Actor, input, recorded_holds: list, expected_output) -> DatasetItem:
    """An item written by hand; its input is checked against the capability's input schema."""
    require(may_record_evals(actor, dataset.capability))
    errors = schema_errors(dataset.capability.input_schema, input, "input")
    if errors:
        raise Invalid(errors)
    return _add_item(dataset, actor, input=input, recorded_holds=recorded_holds, expected_output=expected_output)


def _add_item(dataset: Dataset, actor: Actor, *, source_run: Run | None = None, **values) -> DatasetItem:
    """Within the caller's rate of added items and the dataset's size (its row locked, so that two
    adds cannot both take the last place)."""
    ratelimit.api_limit("dataset", actor)
    with transaction.atomic():
        Dataset.objects.select_for_update(no_key=True).filter(pk=dataset.pk).values_list("pk").first()
        if (
            DatasetItem.objects.filter(dataset=dataset, deleted_at__isnull=True).count()
            >= settings.RQ_DATASET_MAX_ITEMS
        ):
            raise QuotaExceeded("dataset_items", settings.RQ_DATASET_MAX_ITEMS, whose="this dataset")
        item = DatasetItem.objects.create(dataset=dataset, created_by=actor.label, source_run=source_run, **values)
        audit(
            AuditKind.DATASET_ITEM_ADDED,
            actor,
            run_id=source_run.pk if source_run else None,
            dataset=dataset.public_id,
            item=item.public_id,
            holds=len(values["recorded_holds"]),
        )
    return item


def run_recording(run: Run) -> dict:
    """What recording a finished run stores: its input, each hold in asking order (its ask, and the
    resume that was sent, or null when none was) and its final output as the expected output."""
    holds = list(Hold.objects.filter(run=run).order_by("pk"))
    items = {}
    for item in HoldItem.objects.filter(hold__in=holds).order_by("hold_id", "position"):
        wire = {"id": item.item_id, "title": item.title, "data": item.data}
        if item.confidence:
            wire["confidence"] = item.confidence
        items.setdefault(item.hold_id, []).append(wire)
    sent = dict(
        Invocation.objects.filter(hold__in=holds, kind=Invocation.Kind.RESUME, first_sent_at__isnull=False).values_list(
            "hold_id", "resume"
        )
    )
    recorded = []
    for hold in holds:
        ask = {"intent": hold.intent, "actions": hold.actions, "items": items.get(hold.pk, [])}
        if hold.details:
            ask["details"] = hold.details
        if hold.files:
            ask["files"] = hold.files
        recorded.append({"hold_id": hold.public_id, "ask": ask, "resume": sent.get(hold.pk)})
    return {"input": run.input, "recorded_holds": recorded, "expected_output": run.output}


def recordable_run_problem(run: Run, dataset_capability_id: int) -> str | None:
    """Why this run may not be recorded (None: it may): SPEC takes completed or failed non-eval runs."""
    if run.capability_id != dataset_capability_id:
        return f"run {run.public_id} is a run of another capability"
    if run.is_eval:
        return f"run {run.public_id} is an eval run"
    if run.status not in (Run.Status.COMPLETED, Run.Status.FAILED):
        return f"run {run.public_id} is {run.status}; only completed or failed runs are recorded"
    return None


def dataset_item_from_run(*, dataset: Dataset, run_pk: int | None, actor: Actor) -> DatasetItem:
    """Records a finished run of the dataset's capability as an item (SPEC `from_run`)."""
    require(may_record_evals(actor, dataset.capability))
    run = Run.objects.filter(pk=run_pk).first() if run_pk else None
    if run is None:
        raise Invalid([{"field": "from_run", "message": "no such run"}])
    problem = recordable_run_problem(run, dataset.capability_id)
    if problem:
        raise Invalid([{"field": "from_run", "message": problem}])
    return _add_item(dataset, actor, source_run=run, **run_recording(run))


def dataset_item_delete(*, item: DatasetItem, actor: Actor) -> None:
    """Hides an item from its dataset (later experiments); experiments that ran it still show it."""
    require(may_record_evals(actor, item.dataset.capability))
    with transaction.atomic():
        hidden = DatasetItem.objects.filter(pk=item.pk, deleted_at__isnull=True).update(deleted_at=timezone.now())
        if not hidden:
            raise NotFound(f"dataset item {item.public_id} does not exist")
        audit(AuditKind.DATASET_ITEM_DELETED, actor, dataset=item.dataset.public_id, item=item.public_id)


def experiment_start(*, dataset: Dataset, actor: Actor) -> tuple[Experiment, list[Run]]:
    """One ordinary run per item of the dataset, each with its start invocation (the outbox row), in one
    transaction; each invocation carries `eval` (holds/delivery.py builds it from the run).

    Whatever the door (API or page): the experiment counts once against the caller's run-start rate
    (SPEC) and each of its runs against the caller's budget of experiment runs (issue 30.3)."""
    capability = dataset.capability
    require(may_record_evals(actor, capability))
    live = DatasetItem.objects.filter(dataset=dataset, deleted_at__isnull=True).order_by("pk")
    items = list(live[: settings.RQ_DATASET_MAX_ITEMS])
    if not items:
        raise Invalid([{"field": "dataset", "message": f"dataset {dataset.public_id} has no items"}])
    ratelimit.api_limit("run_start", actor)
    ratelimit.api_limit("experiment_runs", actor, cost=len(items))
    with transaction.atomic():
        experiment = Experiment.objects.create(dataset=dataset, started_by=actor.label)
        runs = Run.objects.bulk_create(
            [
                Run(
                    capability=capability,
                    version=capability.version,
                    endpoint=capability.endpoint,
                    input=item.input,
                    seq=1,
                    experiment=experiment,
                    dataset_item=item,
                    started_by_user=actor.user if actor.kind == ActorKind.USER else None,
                    started_by_account=actor.account if actor.kind == ActorKind.ACCOUNT else None,
                )
                for item in items
            ]
        )
        invocations = Invocation.objects.bulk_create(
            [
                new_invocation(run=run, kind=Invocation.Kind.START, seq=1, status=Invocation.Status.PENDING)
                for run in runs
            ]
        )
        now = timezone.now()
        AuditEvent.objects.bulk_create(
            [
                AuditEvent(
                    at=now,
                    kind=AuditKind.RUN_STARTED,
                    actor=actor.label,
                    run_id_ref=run.pk,
                    invocation_id_ref=invocation.id,
                    data={"capability": capability.name, "experiment": experiment.public_id},
                )
                for run, invocation in zip(runs, invocations, strict=True)
            ]
        )
        audit(
            AuditKind.EXPERIMENT_STARTED,
            actor,
            experiment=experiment.public_id,
            dataset=dataset.public_id,
            runs=len(runs),
        )
        ports.publish_on_commit([invocation.id for invocation in invocations])
    return experiment, runs


def eval_field(run: Run) -> dict | None:
    """The invocation body's `eval`: null outside experiments; a child of an eval run replays nothing."""
    if run.experiment_id is None:
        return None
    recorded = []
    if run.parent_id is None and run.dataset_item_id is not None:
        recorded = DatasetItem.objects.filter(pk=run.dataset_item_id).values_list("recorded_holds", flat=True).first()
    return {
        "experiment_id": public_id(EXPERIMENT, run.experiment_id),
        "dataset_item_id": public_id(DATASET_ITEM, run.dataset_item_id) if run.dataset_item_id else None,
        "recorded_holds": recorded or [],
    }


# --- the ask of an eval run ----------------------------------------------------------------------


def eval_ask_refusal(*, token: str) -> None:
    """Refuses an eval run's ask (409 eval_run), whatever its body. Returns quietly when the token is
    not live or its run is no eval run: the ordinary ask goes on."""
    invocation = invocation_for_token(token)
    if invocation is not None:
        eval_ask_refusal_for_invocation(invocation)


def eval_ask_refusal_for_invocation(invocation: Invocation) -> None:
    """eval_ask_refusal for a live invocation looked up already: the run ends `asked_for_human` and the
    invocation is closed in one transaction; no hold, no notification, no pending count. Safe to run
    twice: the second finds the run finished and refuses nothing (its token is dead by then)."""
    if invocation.run.experiment_id is None:
        return
    with transaction.atomic():
        run = Run.objects.select_for_update(no_key=True).filter(pk=invocation.run_id).first()
        if run.status != Run.Status.RUNNING:
            return
        closed = Invocation.objects.filter(pk=invocation.pk, status=Invocation.Status.DELIVERING).update(
            status=Invocation.Status.FAILED,
            lease_until=None,
            last_error="an eval run asked for a person",
            answered_at=timezone.now(),
        )
        if not closed:
            return
        finish_run(
            run,
            status=Run.Status.ASKED_FOR_HUMAN,
            actor=SYSTEM,
            error="the agent asked for a person in an eval run",
        )
    raise Conflict(
        f"run {run.public_id} is an eval run: it never reaches a person, and it ended asked_for_human",
        code="eval_run",
        run_id=run.public_id,
    )
