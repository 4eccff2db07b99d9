"""The calibration page (/calibration) and its CSV: stated confidence against what reviewers kept.

Anyone signed in may read it. Thin: holds/calibration.py computes; the chart's geometry is here and
its drawing in the template (an SVG: the diagonal a calibrated agent would follow, one line per field).
"""

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_GET

from .. import calibration, rollup, spreadsheet
from ..auth import actor_for_user
from ..models import Capability

# The plot's square in SVG units, inside margins for the axes' labels.
SIZE, LEFT, TOP = 240, 44, 12
ROWS_PER_PAGE = 50
COLOURS = ("#1d4ed8", "#b45309", "#047857", "#7c3aed", "#be123c", "#0e7490", "#4d7c0f", "#a21caf")


def _point(confidence: float, kept: float) -> tuple[float, float]:
    return round(LEFT + confidence * SIZE, 1), round(TOP + (1 - kept) * SIZE, 1)


def chart(rows: list[calibration.FieldRow]) -> dict:
    """Per field, its buckets with decisions as points (x: mean stated confidence, y: share kept)."""
    series = []
    for n, row in enumerate(rows):
        points = [
            (*_point(cell.mean_confidence, cell.kept), cell)
            for cell in row.cells
            if cell.decisions and cell.mean_confidence is not None
        ]
        if points:
            series.append(
                {
                    "row": row,
                    "colour": COLOURS[n % len(COLOURS)],
                    "points": points,
                    "path": " ".join(f"{x},{y}" for x, y, _ in points),
                }
            )
    return {
        "series": series,
        # x: the buckets' bounds; y: even quarters.
        "x_ticks": [(round(LEFT + t * SIZE, 1), f"{t:g}") for t in (0, 0.5, 0.7, 0.8, 0.9, 1)],
        "y_ticks": [(round(TOP + (1 - t) * SIZE, 1), f"{t:g}") for t in (0, 0.25, 0.5, 0.75, 1)],
        "left": LEFT,
        "top": TOP,
        "right": LEFT + SIZE,
        "bottom": TOP + SIZE,
        "width": LEFT + SIZE + 16,
        "height": TOP + SIZE + 40,
        "x_label": TOP + SIZE + 34,
        "mid": LEFT + SIZE / 2,
        "size": SIZE,
    }


def _filter(request) -> tuple[list[Capability], Capability | None]:
    capabilities = list(Capability.objects.order_by("name"))
    chosen = request.GET.get("capability", "")
    return capabilities, next((c for c in capabilities if c.name == chosen), None)


def _report(capability: Capability | None) -> list:
    """Calibration's sealed totals and the live tail from where the ops rollup left off."""
    return calibration.report(
        capability=capability, tail_start=rollup.live_since(rollup.sealed_until(), timezone.now())
    )


@require_GET
@login_required
def calibration_page(request):
    capabilities, capability = _filter(request)
    every = _report(capability)
    # The table and chart show a page of rows (the CSV has them all).
    page = _page_number(request.GET.get("page"), len(every))
    rows = every[(page - 1) * ROWS_PER_PAGE : page * ROWS_PER_PAGE]
    query = {"capability": capability.name} if capability else {}
    context = {
        "rows": rows,
        "flagged": [row for row in every if row.flagged],
        "chart": chart(rows),
        "page_number": page,
        "prev_url": "?" + urlencode({**query, "page": page - 1}) if page > 1 else "",
        "next_url": "?" + urlencode({**query, "page": page + 1}) if page * ROWS_PER_PAGE < len(every) else "",
        "buckets": [label for _, label in calibration.BUCKETS],
        "capabilities": capabilities,
        "capability": capability,
        "flag_rate": int(calibration.FLAG_RATE * 100),
        "flag_min": calibration.FLAG_MIN_DECISIONS,
        "role": actor_for_user(request.user).role,
        "nav": "calibration",
    }
    return render(request, "holds/calibration.html", context)


def _page_number(text, rows: int) -> int:
    last = max(1, -(-rows // ROWS_PER_PAGE))
    return min(int(text), last) if text and text.isdigit() and 0 < len(text) < 7 and int(text) > 0 else 1


@require_GET
@login_required
def calibration_csv(request):
    capabilities, capability = _filter(request)
    rows = _report(capability)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="calibration.csv"'
    writer = spreadsheet.writer(response)
    writer.writerow(
        ["capability", "field", "bucket", "decisions", "edited_or_rejected", "rate", "mean_confidence", "flagged"]
    )
    for row in rows:
        for cell in row.cells:
            writer.writerow(
                [
                    spreadsheet.safe_cell(row.capability),
                    spreadsheet.safe_cell(row.field),
                    cell.label.replace("–", "-"),
                    cell.decisions,
                    cell.edited,
                    "" if cell.rate is None else f"{cell.rate:.4f}",
                    "" if cell.mean_confidence is None else f"{cell.mean_confidence:.4f}",
                    "yes" if row.flagged and cell is row.cells[-1] else "",
                ]
            )
    return response
