"""Evals pages: experiments (list and one), datasets (list and one), and "Add to dataset…" from a hold.

Thin: parse -> service -> render. Visible to those who may see holds (viewers included); recording,
deleting and starting are for approvers of the capability, through holds.services.
"""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q
from django.http import Http404
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from .. import experiments, services
from ..auth import Actor, actor_for_user
from ..errors import Invalid, ServiceError
from ..ids import DATASET, DATASET_ITEM, EXPERIMENT, HOLD, parse_public_id
from ..models import Dataset, DatasetItem, Experiment, Hold, Run
from ..paging import decode_cursor, encode_cursor, read_page
from ..policy import may_read_evals, may_record_evals
from ..responses import see_other
from .common import forbid, service_errors

RUN_COUNTS = {
    name: Count("runs", filter=Q(runs__parent__isnull=True, runs__status=status))
    for name, status in (
        ("n_completed", Run.Status.COMPLETED),
        ("n_failed", Run.Status.FAILED),
        ("n_asked", Run.Status.ASKED_FOR_HUMAN),
    )
}


def _reader(request) -> Actor:
    actor = actor_for_user(request.user)
    forbid(may_read_evals(actor))
    return actor


def _after(request) -> int | None:
    last = decode_cursor(request.GET.get("after", ""), 1)
    return last[0] if last else None


def _newest_first(request, rows, url_name: str) -> tuple[list, dict]:
    """One page of `rows` newest first, after the request's cursor, and the paging links of the list."""
    after = _after(request)
    if after is not None:
        rows = rows.filter(pk__lt=after)
    page, more = read_page(rows)
    first = reverse(url_name)
    return page, {
        "page": {"cursor": after},
        "next_url": first + "?after=" + encode_cursor([page[-1].pk]) if more else "",
        "first_url": first,
        "nav": "experiments",
    }


@require_GET
@login_required
def experiment_list(request):
    actor = _reader(request)
    rows = (
        Experiment.objects.select_related("dataset__capability")
        .annotate(n_runs=Count("runs", filter=Q(runs__parent__isnull=True)), **RUN_COUNTS)
        .order_by("-pk")
    )
    page, context = _newest_first(request, rows, "experiments")
    return render(request, "holds/experiments.html", {**context, "experiments": page, "role": actor.role})


@require_GET
@login_required
def experiment_page(request, experiment_id: str):
    """A page of items: status, output, expected, match and a diff (values past SHOWN_BYTES collapsed);
    totals beside the last experiment on the same dataset. A fixed number of queries however many items
    (tests/test_evals_agent.py pins it)."""
    actor = _reader(request)
    pk = parse_public_id(experiment_id, EXPERIMENT)
    experiment = Experiment.objects.select_related("dataset__capability").filter(pk=pk).first() if pk else None
    if experiment is None:
        raise Http404(f"experiment {experiment_id} does not exist")
    page = request.GET.get("page", "1")
    page = int(page) if page.isdigit() and 0 < len(page) < 6 and int(page) > 0 else 1
    # One page of items, large values collapsed; the totals are counted by the database.
    results, more = experiments.experiment_page(experiment, page)
    counts, matched, mismatched = experiments.experiment_totals(experiment)
    previous = experiments.previous_experiment(experiment)
    previous_counts, previous_matched, previous_mismatched = (
        experiments.experiment_totals(previous) if previous else (None, 0, 0)
    )
    context = {
        "experiment": experiment,
        "dataset": experiment.dataset,
        "results": results,
        "counts": counts,
        "matched": matched,
        "mismatched": mismatched,
        "previous": previous,
        "previous_counts": previous_counts,
        "previous_matched": previous_matched,
        "previous_mismatched": previous_mismatched,
        "page_number": page,
        "prev_url": f"?page={page - 1}" if page > 1 else "",
        "next_url": f"?page={page + 1}" if more else "",
        "shown_bytes": experiments.SHOWN_BYTES,
        "nav": "experiments",
        "role": actor.role,
    }
    # A running experiment's page polls for its own live part (htmx); the rest of the page stays.
    return render(request, "holds/experiment.html" + ("#experiment-live" if request.htmx else ""), context)


@require_GET
@login_required
def dataset_list(request):
    actor = _reader(request)
    datasets = (
        Dataset.objects.select_related("capability")
        .annotate(n_items=Count("items", filter=Q(items__deleted_at__isnull=True)))
        .order_by("-pk")
    )
    page, context = _newest_first(request, datasets, "datasets")
    return render(request, "holds/datasets.html", {**context, "datasets": page, "role": actor.role})


def _dataset(dataset_id: str) -> Dataset:
    pk = parse_public_id(dataset_id, DATASET)
    dataset = Dataset.objects.select_related("capability").filter(pk=pk).first() if pk else None
    if dataset is None:
        raise Http404(f"dataset {dataset_id} does not exist")
    return dataset


@require_GET
@login_required
def dataset_page(request, dataset_id: str):
    actor = _reader(request)
    dataset = _dataset(dataset_id)
    items = DatasetItem.objects.filter(dataset=dataset, deleted_at__isnull=True).order_by("pk")
    after = _after(request)
    if after is not None:
        items = items.filter(pk__gt=after)
    page, more = read_page(items)
    context = {
        "dataset": dataset,
        "items": page,
        "page": {"cursor": after},
        "next_url": reverse("dataset", args=[dataset.public_id]) + "?after=" + encode_cursor([page[-1].pk])
        if more
        else "",
        "first_url": reverse("dataset", args=[dataset.public_id]),
        "experiments": Experiment.objects.filter(dataset=dataset).order_by("-pk")[:10],
        "may_record": may_record_evals(actor, dataset.capability) is None,
        "nav": "experiments",
        "role": actor.role,
    }
    return render(request, "holds/dataset.html", context)


def _back_to_dataset(dataset_id: str, item_id: str = "") -> str:
    return reverse("dataset", args=[dataset_id])


@require_POST
@login_required
@service_errors(_back_to_dataset, forbidden_message=True)
def experiment_start(request, dataset_id: str):
    actor = _reader(request)
    dataset = _dataset(dataset_id)
    experiment, _ = services.experiment_start(dataset=dataset, actor=actor)
    return see_other(reverse("experiment", args=[experiment.public_id]))


@require_POST
@login_required
@service_errors(_back_to_dataset, forbidden_message=True)
def dataset_item_delete(request, dataset_id: str, item_id: str):
    actor = _reader(request)
    dataset = _dataset(dataset_id)
    item = DatasetItem.objects.filter(pk=parse_public_id(item_id, DATASET_ITEM) or 0, dataset=dataset).first()
    if item is None:
        raise Http404("no such item")
    item.dataset = dataset
    services.dataset_item_delete(item=item, actor=actor)
    messages.success(request, f"Deleted {item.public_id}.")
    return see_other(reverse("dataset", args=[dataset.public_id]))


@require_http_methods(["GET", "POST"])
@login_required
def hold_add_to_dataset(request, hold_id: str):
    """ "Add to dataset…" on a decided or expired hold: a last look at what will be stored (the run's
    input, each of its holds with the resume that was sent, its output), then one POST records it."""
    actor = _reader(request)
    pk = parse_public_id(hold_id, HOLD)
    hold = Hold.objects.select_related("run", "capability").filter(pk=pk).first() if pk else None
    if hold is None:
        raise Http404(f"hold {hold_id} does not exist")
    run, capability = hold.run, hold.capability
    datasets = list(Dataset.objects.filter(capability=capability).order_by("name"))
    problem = None
    if hold.status not in (Hold.Status.DECIDED, Hold.Status.EXPIRED):
        problem = "Only a decided or expired hold's run is recorded."
    elif may_record_evals(actor, capability) is not None:
        problem = f"Only approvers of {capability.name} add to its datasets."
    else:
        problem = services.recordable_run_problem(run, capability.pk)
        if problem and run.status in (Run.Status.RUNNING, Run.Status.HELD):
            problem = f"Run {run.public_id} is still {run.status}: it can be recorded once it has finished."
    name_error, status = "", 200 if problem is None else 409
    if request.method == "POST" and problem is None:
        try:
            dataset = _chosen_dataset(request, datasets, capability, actor)
            item = services.dataset_item_from_run(dataset=dataset, run_pk=run.pk, actor=actor)
        except ServiceError as exc:
            errors = exc.extra.get("errors", [])
            # The new dataset's name is the one field of this form: its error is shown at it.
            name_error = "; ".join(e["message"] for e in errors if e.get("field") == "name")
            details = [e["message"] for e in errors if e.get("field") != "name"]
            if details or not name_error:
                messages.error(request, "; ".join(details) or exc.message)
            status = 422
        else:
            messages.success(request, f"Recorded {run.public_id} as {item.public_id} in “{dataset.name}”.")
            return see_other(reverse("dataset", args=[dataset.public_id]))
    context = {
        "hold": hold,
        "run": run,
        "datasets": datasets,
        "problem": problem,
        "recording": services.run_recording(run) if problem is None else None,
        # Recording a run again adds a second item with the same content: said before, not refused.
        "recorded_already": list(
            DatasetItem.objects.filter(source_run=run, deleted_at__isnull=True).select_related("dataset").order_by("pk")
        )
        if problem is None
        else [],
        "chosen": request.POST.get("dataset", "") if request.method == "POST" else "",
        "new_name": request.POST.get("name", "")[:200] if request.method == "POST" else "",
        "name_error": name_error,
        "nav": "history",
        "role": actor.role,
    }
    return render(request, "holds/add_to_dataset.html", context, status=status)


def _chosen_dataset(request, datasets: list[Dataset], capability, actor: Actor) -> Dataset:
    chosen = request.POST.get("dataset", "")
    if chosen == "new" or not datasets:
        name = request.POST.get("name", "").strip()[:200]
        if not name:
            raise Invalid([{"field": "name", "message": "Name the new dataset."}], "name the new dataset")
        return services.dataset_create(name=name, capability_name=capability.name, actor=actor)
    for dataset in datasets:
        if dataset.public_id == chosen:
            return dataset
    raise Http404("no such dataset")
