"""The calibration page (/calibration) and its CSV: stated confidence against what reviewers kept.

Anyone signed in may read it. Thin: holds/calibration.py computes; the chart's geometry is here and
its drawing in the template (an SVG: the diagonal a calibrated agent would follow, one line per field,
in the table's words: the share changed or turned down, by stated confidence).
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

# The plot in SVG units, inside margins for the axes' ticks and names. The SVG is as wide as its panel
# (up to CSS's max-width), so these are proportions; CSS enlarges the text and marks on phones.
WIDTH, HEIGHT, LEFT, TOP, RIGHT, BOTTOM = 560, 340, 120, 16, 24, 76
ROWS_PER_PAGE = 50
COLOURS = ("#1d4ed8", "#b45309", "#047857", "#7c3aed", "#be123c", "#0e7490", "#4d7c0f", "#a21caf")
# Series are told apart without colour too: each of eight has its own mark, and neighbours their own
# dash; a style and a colour always come together.
MARKS = ("circle", "square", "triangle", "diamond", "down", "ring", "box", "hollow-diamond")
DASHES = ("", "9 4", "2 4", "9 3 2 3", "", "9 4", "2 4", "9 3 2 3")
MARK_SIZE = 6


def _point(confidence: float, changed: float) -> tuple[float, float]:
    return round(LEFT + confidence * WIDTH, 1), round(TOP + (1 - changed) * HEIGHT, 1)


def mark(kind: str, x: float, y: float, r: float = MARK_SIZE) -> dict:
    """One series' mark at (x, y): its outline as path data, and whether it is drawn hollow."""
    solid = {"ring": "circle", "box": "square", "hollow-diamond": "diamond"}.get(kind)
    shape = solid or kind
    if shape == "circle":
        d = f"M{x - r:g},{y:g}a{r:g},{r:g} 0 1,0 {2 * r:g},0a{r:g},{r:g} 0 1,0 {-2 * r:g},0z"
    elif shape == "square":
        d = f"M{x - r:g},{y - r:g}h{2 * r:g}v{2 * r:g}h{-2 * r:g}z"
    elif shape == "diamond":
        k = round(r * 1.35, 1)
        d = f"M{x:g},{y - k:g}L{x + k:g},{y:g}L{x:g},{y + k:g}L{x - k:g},{y:g}z"
    else:  # a triangle, pointing up or down
        k, sign = round(r * 1.25, 1), -1 if shape == "triangle" else 1
        d = f"M{x:g},{round(y + sign * k, 1):g}L{x + k:g},{round(y - sign * k * 0.8, 1):g}"
        d += f"L{x - k:g},{round(y - sign * k * 0.8, 1):g}z"
    return {"d": d, "hollow": solid is not None}


def chart(rows: list[calibration.FieldRow]) -> dict:
    """Per field, its buckets with decisions as points (x: mean stated confidence, y: the share changed
    or turned down, the table's figure), each series with its colour, mark and dash."""
    series, table = [], []
    for n, row in enumerate(rows):
        style = n % len(COLOURS)
        points = [
            (*_point(cell.mean_confidence, cell.rate), cell)
            for cell in row.cells
            if cell.decisions and cell.mean_confidence is not None
        ]
        shown = None
        if points:
            shown = {
                "row": row,
                "colour": COLOURS[style],
                "dash": DASHES[style],
                "points": [(x, y, cell, mark(MARKS[style], x, y)) for x, y, cell in points],
                "path": " ".join(f"{x},{y}" for x, y, _ in points),
                # The legend's and the table's sample: a stretch of line with the mark in its middle.
                "sample": mark(MARKS[style], 20, 9, 5),
            }
            series.append(shown)
        # The table shows each row with its series' sample beside it (none for a row with no point).
        table.append((row, shown))
    right, bottom = LEFT + WIDTH, TOP + HEIGHT
    return {
        "series": series,
        "table": table,
        # x: the buckets' bounds, as the table's columns name them; y: quarters, in % as the table.
        "x_ticks": [(round(LEFT + t * WIDTH, 1), f"{t:g}") for t in (0, 0.5, 0.7, 0.8, 0.9, 1)],
        "y_ticks": [(round(TOP + (1 - t) * HEIGHT, 1), f"{t * 100:g} %") for t in (0, 0.25, 0.5, 0.75, 1)],
        "left": LEFT,
        "top": TOP,
        "right": right,
        "bottom": bottom,
        "plot_width": WIDTH,
        "plot_height": HEIGHT,
        "width": right + RIGHT,
        "height": bottom + BOTTOM,
        "x_name": bottom + BOTTOM - 10,
        "x_mid": LEFT + WIDTH / 2,
        "y_mid": TOP + HEIGHT / 2,
        "tick_below": bottom + 30,
        "tick_left": LEFT - 10,
        # Above the diagonal is changed more often than stated: the table's "overconfident" side.
        "over_x": LEFT + WIDTH * 0.62,
        "over_y": TOP + HEIGHT * 0.12,
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
