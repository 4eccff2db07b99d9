"""The evals API under /v0/ (SPEC "Evals"): datasets, their items, experiments. Thin: parse ->
service -> serialise; visible to who may see holds, changed by the capability's approvers.
"""

from django.db.models import Count, Q
from django.http import HttpResponse, JsonResponse

from .. import experiments, services
from ..auth import (
    Actor,
)
from ..errors import Invalid, NotFound
from ..ids import DATASET, DATASET_ITEM, EXPERIMENT, RUN, parse_public_id
from ..models import Dataset, DatasetItem, Experiment
from ..paging import decode_cursor, encode_cursor, read_page
from ..policy import (
    may_read_evals,
    may_record_evals,
    require,
)
from ..schemas import (
    MAX_ASK_BYTES,
    validate_dataset,
    validate_dataset_item,
    validate_experiment,
)
from .common import (
    caller,
    endpoint,
    read_json,
)

# --- evals: datasets and experiments (SPEC "Evals") ----------------------------------------------

# A dataset item holds a run's input, its holds and its output: as much as an ask and a run together.
MAX_DATASET_ITEM_BYTES = 4 * MAX_ASK_BYTES


def eval_reader(actor: Actor) -> Actor:
    """Datasets and experiments are visible to those who may see the capability's holds; never to a run."""
    require(may_read_evals(actor))
    return actor


def get_dataset(actor: Actor, dataset_id: str) -> Dataset:
    pk = parse_public_id(dataset_id, DATASET)
    dataset = Dataset.objects.select_related("capability").filter(pk=pk).first() if pk else None
    if dataset is None:
        raise NotFound(f"dataset {dataset_id} does not exist")
    require(may_read_evals(actor))
    return dataset


def cursor_filter(rows, params):
    if params.get("cursor"):
        last = decode_cursor(params["cursor"], 1)
        if last is None:
            raise Invalid([{"field": "cursor", "message": "not a cursor this server gave out"}])
        rows = rows.filter(pk__lt=last[0])
    return rows


def page_wire(rows, wire) -> dict:
    page, more = read_page(rows)
    return {"items": [wire(row) for row in page], "next_cursor": encode_cursor([page[-1].pk]) if more else None}


@endpoint("GET", "POST")
def datasets(request):
    actor = caller(request)
    if request.method == "GET":
        eval_reader(actor)
        rows = Dataset.objects.select_related("capability").order_by("-pk")
        if request.GET.get("capability"):
            rows = rows.filter(capability__name=request.GET["capability"])
        rows = cursor_filter(rows, request.GET).annotate(
            live_items=Count("items", filter=Q(items__deleted_at__isnull=True))
        )
        return JsonResponse(page_wire(rows, lambda d: experiments.dataset_wire(d, d.live_items)))
    body = read_json(request, MAX_ASK_BYTES)
    require(may_record_evals(actor, None))
    start, errors = validate_dataset(body)
    if errors:
        raise Invalid(errors)
    dataset = services.dataset_create(name=start.name, capability_name=start.capability, actor=actor)
    return JsonResponse({"dataset_id": dataset.public_id}, status=201)


@endpoint("GET")
def dataset_detail(request, dataset_id: str):
    actor = caller(request)
    dataset = get_dataset(actor, dataset_id)
    count = DatasetItem.objects.filter(dataset=dataset, deleted_at__isnull=True).count()
    return JsonResponse(experiments.dataset_wire(dataset, count))


@endpoint("GET", "POST")
def dataset_items(request, dataset_id: str):
    actor = caller(request)
    if request.method == "GET":
        dataset = get_dataset(actor, dataset_id)
        rows = cursor_filter(DatasetItem.objects.filter(dataset=dataset, deleted_at__isnull=True), request.GET)
        return JsonResponse(page_wire(rows.order_by("-pk"), experiments.item_wire))
    body = read_json(request, MAX_DATASET_ITEM_BYTES)
    dataset = get_dataset(actor, dataset_id)
    require(may_record_evals(actor, dataset.capability))
    parsed, errors = validate_dataset_item(body)
    if errors:
        raise Invalid(errors)
    if hasattr(parsed, "from_run"):
        item = services.dataset_item_from_run(
            dataset=dataset, run_pk=parse_public_id(parsed.from_run, RUN), actor=actor
        )
    else:
        item = services.dataset_item_add(
            dataset=dataset,
            actor=actor,
            input=parsed.input,
            recorded_holds=[h.model_dump(exclude_none=False) for h in parsed.recorded_holds],
            expected_output=parsed.expected_output,
        )
    return JsonResponse({"item_id": item.public_id}, status=201)


@endpoint("GET", "DELETE")
def dataset_item(request, dataset_id: str, item_id: str):
    actor = caller(request)
    dataset = get_dataset(actor, dataset_id)
    pk = parse_public_id(item_id, DATASET_ITEM)
    item = DatasetItem.objects.filter(pk=pk, dataset=dataset, deleted_at__isnull=True).first() if pk else None
    if item is None:
        raise NotFound(f"dataset item {item_id} does not exist in {dataset.public_id}")
    if request.method == "GET":
        return JsonResponse(experiments.item_wire(item))
    require(may_record_evals(actor, dataset.capability))
    item.dataset = dataset
    services.dataset_item_delete(item=item, actor=actor)
    return HttpResponse(status=204)


@endpoint("GET", "POST")
def experiments_list(request):
    actor = caller(request)
    if request.method == "GET":
        eval_reader(actor)
        rows = cursor_filter(Experiment.objects.order_by("-pk"), request.GET)
        return JsonResponse(page_wire(rows, experiments.experiment_brief))
    body = read_json(request, MAX_ASK_BYTES)
    require(may_record_evals(actor, None))
    dataset_id = body.get("dataset") if isinstance(body, dict) else None
    dataset = get_dataset(actor, dataset_id) if isinstance(dataset_id, str) and dataset_id else None
    if dataset is not None:
        require(may_record_evals(actor, dataset.capability))
    _, errors = validate_experiment(body)
    if errors:
        raise Invalid(errors)
    # Counted in the service (the run-start rate once, each run against the experiment-run budget).
    experiment, runs = services.experiment_start(dataset=dataset, actor=actor)
    return JsonResponse({"experiment_id": experiment.public_id, "runs": [run.public_id for run in runs]}, status=201)


@endpoint("GET")
def experiment_detail(request, experiment_id: str):
    eval_reader(caller(request))
    pk = parse_public_id(experiment_id, EXPERIMENT)
    experiment = Experiment.objects.filter(pk=pk).first() if pk else None
    if experiment is None:
        raise NotFound(f"experiment {experiment_id} does not exist")
    return JsonResponse(experiments.experiment_wire(experiment))
