"""How datasets and experiments read (API and pages): strict JSON matching, diffs, totals.

Reads only; every change goes through holds.services (evals). An experiment reads in a fixed number of
queries however many items it has: its runs with their items in one, the previous experiment's in one
more.
"""

import difflib
import json
from dataclasses import dataclass, field

from django.db.models import BooleanField, Count, ExpressionWrapper, F, JSONField, Q, Value
from django.db.models.functions import Cast, Coalesce, Length, Substr

from .ids import DATASET, DATASET_ITEM, RUN, public_id
from .models import Dataset, DatasetItem, Experiment, Run

COUNTED = (Run.Status.COMPLETED, Run.Status.FAILED, Run.Status.ASKED_FOR_HUMAN, Run.Status.RUNNING)


def iso(value):
    return value.isoformat() if value else None


def json_equal(a, b) -> bool:
    """Strict JSON equality (SPEC "Settled"): key order ignored, booleans never equal numbers, 1 == 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return a is None and b is None


def matches(run: Run, expected) -> bool | None:
    """null without an expected output, and while the run has not finished."""
    if expected is None or not run.finished:
        return None
    return json_equal(run.output, expected)


def pretty(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def diff_lines(expected, output) -> list[tuple[str, str]]:
    """A unified diff of the expected output against the output, as (kind, line) with kind one of
    `add`, `del`, `hunk`, `same`."""
    lines = []
    for line in difflib.unified_diff(
        pretty(expected).splitlines(), pretty(output).splitlines(), "expected", "output", lineterm="", n=2
    ):
        if line.startswith(("---", "+++")):
            continue
        kind = {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "same")
        lines.append((kind, line))
    return lines


@dataclass
class ItemResult:
    run: Run
    item_id: str | None
    expected: object
    matches: bool | None

    def wire(self) -> dict:
        return {
            "run_id": self.run.public_id,
            "dataset_item_id": self.item_id,
            "status": self.run.status,
            "output": self.run.output,
            "expected_output": self.expected,
            "matches": self.matches,
        }


def experiment_results(experiment: Experiment) -> tuple[list[ItemResult], dict]:
    """Each item's run (children of eval runs left out), in item order, and the totals."""
    runs = (
        Run.objects.filter(experiment=experiment, parent__isnull=True)
        .select_related("dataset_item")
        .order_by("dataset_item_id", "pk")
    )
    results, counts = [], dict.fromkeys(COUNTED, 0)
    for run in runs:
        item = run.dataset_item
        expected = item.expected_output if item else None
        result = ItemResult(
            run=run,
            item_id=public_id(DATASET_ITEM, run.dataset_item_id) if run.dataset_item_id else None,
            expected=expected,
            matches=matches(run, expected),
        )
        counts["running" if run.status in (Run.Status.RUNNING, Run.Status.HELD) else run.status] += 1
        results.append(result)
    return results, counts


def previous_experiment(experiment: Experiment) -> Experiment | None:
    return Experiment.objects.filter(dataset_id=experiment.dataset_id, pk__lt=experiment.pk).order_by("-pk").first()


def experiment_wire(experiment: Experiment) -> dict:
    results, counts = experiment_results(experiment)
    return {
        "experiment_id": experiment.public_id,
        "dataset": public_id(DATASET, experiment.dataset_id),
        "status": experiment.status,
        "counts": counts,
        "runs": [r.wire() for r in results],
        "created_at": iso(experiment.created_at),
        "finished_at": iso(experiment.finished_at),
    }


def experiment_brief(experiment: Experiment) -> dict:
    return {
        "experiment_id": experiment.public_id,
        "dataset": public_id(DATASET, experiment.dataset_id),
        "status": experiment.status,
        "created_at": iso(experiment.created_at),
        "finished_at": iso(experiment.finished_at),
    }


def dataset_wire(dataset: Dataset, item_count: int) -> dict:
    return {
        "dataset_id": dataset.public_id,
        "name": dataset.name,
        "capability": dataset.capability.name,
        "items": item_count,
        "created_by": dataset.created_by,
        "created_at": iso(dataset.created_at),
    }


def item_wire(item: DatasetItem) -> dict:
    return {
        "item_id": item.public_id,
        "dataset_id": public_id(DATASET, item.dataset_id),
        "input": item.input,
        "recorded_holds": item.recorded_holds,
        "expected_output": item.expected_output,
        "source_run": public_id(RUN, item.source_run_id) if item.source_run_id else None,
        "created_by": item.created_by,
        "created_at": iso(item.created_at),
    }


# --- the experiment page: one page of items, large values collapsed, totals in the database -----------

ITEMS_PER_PAGE = 20
# A value over this many bytes of JSON is shown collapsed (its start only) and not diffed: five
# 1 MiB expected outputs made one view 21.9 s and 35.6 MB.
SHOWN_BYTES = 16 * 1024


def _as_jsonb(column: str):
    return Cast(Coalesce(column, Value("null")), JSONField())


def _page_runs(experiment: Experiment):
    """The experiment's item runs, each with `matched` computed by the database (jsonb equality: key
    order ignored, 1 equals 1.0, booleans never numbers, as json_equal) and the sizes of its output and
    expected output, without loading either."""
    finished = [Run.Status.COMPLETED, Run.Status.FAILED, Run.Status.ASKED_FOR_HUMAN]
    return (
        Run.objects.filter(experiment=experiment, parent__isnull=True)
        .alias(out_json=_as_jsonb("output"), expected_json=_as_jsonb("dataset_item__expected_output"))
        .annotate(
            output_bytes=Coalesce(Length("output"), 0),
            expected_bytes=Coalesce(Length("dataset_item__expected_output"), 0),
            has_expected=ExpressionWrapper(
                Q(dataset_item__expected_output__isnull=False, status__in=finished), output_field=BooleanField()
            ),
            matched=ExpressionWrapper(Q(out_json=F("expected_json")), output_field=BooleanField()),
        )
    )


def experiment_totals(experiment: Experiment) -> tuple[dict, int, int]:
    """(runs by outcome, matched, mismatched), counted by the database in one query."""
    counts = dict.fromkeys(COUNTED, 0)
    matched = mismatched = 0
    finished = [Run.Status.COMPLETED, Run.Status.FAILED, Run.Status.ASKED_FOR_HUMAN]
    rows = (
        Run.objects.filter(experiment=experiment, parent__isnull=True)
        .alias(out_json=_as_jsonb("output"), expected_json=_as_jsonb("dataset_item__expected_output"))
        .values("status")
        .annotate(
            n=Count("pk"),
            same=Count(
                "pk",
                filter=Q(dataset_item__expected_output__isnull=False, status__in=finished)
                & Q(out_json=F("expected_json")),
            ),
            judged=Count("pk", filter=Q(dataset_item__expected_output__isnull=False, status__in=finished)),
        )
        .order_by()
    )
    for row in rows:
        status = row["status"]
        counts["running" if status in (Run.Status.RUNNING, Run.Status.HELD) else status] += row["n"]
        matched += row["same"]
        mismatched += row["judged"] - row["same"]
    return counts, matched, mismatched


@dataclass
class ShownResult:
    """One item of the experiment page; each value is shown whole, or collapsed past SHOWN_BYTES."""

    run: Run
    item_id: str | None
    matches: bool | None
    output_text: str
    expected_text: str
    output_bytes: int
    expected_bytes: int
    diff: list = field(default_factory=list)

    @property
    def collapsed(self) -> bool:
        return self.output_bytes > SHOWN_BYTES or self.expected_bytes > SHOWN_BYTES

    @property
    def pending(self) -> bool:
        """Still running (or held): no match is known yet, whether or not an output is expected."""
        return self.run.status in (Run.Status.RUNNING, Run.Status.HELD)


def _shown(text: str | None, size: int) -> str:
    if text is None:
        return "null"
    if size > SHOWN_BYTES:
        return text  # the start of the JSON as stored; the page says it is cut
    return pretty(json.loads(text))


def experiment_page(experiment: Experiment, page: int) -> tuple[list[ShownResult], bool]:
    """One page of the experiment's items (ITEMS_PER_PAGE), and whether another follows. Two queries:
    the page's runs with sizes and matches, then the start of each value (whole when small)."""
    start = (page - 1) * ITEMS_PER_PAGE
    runs = list(
        _page_runs(experiment)
        .defer("output", "input", "error")
        .order_by("dataset_item_id", "pk")[start : start + ITEMS_PER_PAGE + 1]
    )
    more = len(runs) > ITEMS_PER_PAGE
    runs = runs[:ITEMS_PER_PAGE]
    heads = {
        pk: (out, expected, error)
        for pk, out, expected, error in Run.objects.filter(pk__in=[r.pk for r in runs])
        .annotate(
            out_head=Substr("output", 1, SHOWN_BYTES),
            expected_head=Substr("dataset_item__expected_output", 1, SHOWN_BYTES),
            error_head=Substr("error", 1, 2000),
        )
        .values_list("pk", "out_head", "expected_head", "error_head")
    }
    results = []
    for run in runs:
        out, expected, error = heads.get(run.pk, (None, None, ""))
        run.error = error or ""
        result = ShownResult(
            run=run,
            item_id=public_id(DATASET_ITEM, run.dataset_item_id) if run.dataset_item_id else None,
            matches=run.matched if run.has_expected else None,
            output_text=_shown(out, run.output_bytes),
            expected_text=_shown(expected, run.expected_bytes),
            output_bytes=run.output_bytes,
            expected_bytes=run.expected_bytes,
        )
        if result.matches is False and not result.collapsed:
            result.diff = diff_lines(json.loads(expected) if expected else None, json.loads(out) if out else None)
        results.append(result)
    return results, more
