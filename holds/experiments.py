"""How datasets and experiments read (API and pages): strict JSON matching, diffs, totals.

Reads only; every change goes through holds.services (evals). An experiment reads in a fixed number of
queries however many items it has: its runs with their items in one, the previous experiment's in one
more.
"""

import difflib
import json
from dataclasses import dataclass, field

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
    diff: list = field(default_factory=list)

    @property
    def output_text(self) -> str:
        return pretty(self.run.output)

    @property
    def expected_text(self) -> str:
        return pretty(self.expected)

    def wire(self) -> dict:
        return {
            "run_id": self.run.public_id,
            "dataset_item_id": self.item_id,
            "status": self.run.status,
            "output": self.run.output,
            "expected_output": self.expected,
            "matches": self.matches,
        }


def experiment_results(experiment: Experiment, *, with_diffs: bool = False) -> tuple[list[ItemResult], dict]:
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
        if with_diffs and result.matches is False:
            result.diff = diff_lines(expected, run.output)
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
