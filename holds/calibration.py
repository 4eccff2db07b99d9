"""Calibration's read model: does the agent's stated confidence mean anything?

Per capability and data field, items decided by a person are counted in confidence buckets against
how often the reviewer changed that field or turned the item down (reject and feedback count against
every confidence field of the item). Expiries are not decisions; items that approve-by-confidence set
(listed in the decision's audit event as `by_confidence`) and items a rule or grant decided say nothing
about the agent and are left out.

Kept like the ops sums (holds/rollup.py): each span of the audit log that the ops rollup seals is
tallied here in the same transaction into CalibrationTotal, and a request adds only the live tail
since the last seal (at most rollup.LIVE_LIMIT of decisions), so the page does not grow with history.

One hold may state confidence for thousands of keys (20,000 made the page 6.9 s and 16.2 MB for
everyone, for good once sealed), so a capability keeps at most MAX_FIELDS fields: the sealed ones
first, then new ones as they come; what comes past them is counted under OTHER_FIELDS.
"""

import threading
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, F, Max

from .models import Action, AuditEvent, AuditKind, CalibrationTotal, Capability, HoldItem
from .schemas import changed_fields

# (lower bound, label) of each bucket; the last one includes 1.0.
BUCKETS = ((0.0, "0–0.5"), (0.5, "0.5–0.7"), (0.7, "0.7–0.8"), (0.8, "0.8–0.9"), (0.9, "0.9–1.0"))
LABELS = {f"{low:g}": label for low, label in BUCKETS}
# A field is flagged when its 0.9+ values were changed more often than this, over enough decisions.
FLAG_RATE = 0.2
FLAG_MIN_DECISIONS = 20
MAX_FIELDS = 100  # per capability, OTHER_FIELDS included
OTHER_FIELDS = "(other fields)"
FIELD_CHARS = 200  # CalibrationTotal.field


def bucket_of(confidence: float) -> str:
    key = "0"
    for low, _ in BUCKETS:
        if confidence >= low:
            key = f"{low:g}"
    return key


def tally(start: datetime | None, end: datetime | None = None) -> dict[tuple[int, str, str], list]:
    """(capability id, field, bucket) -> [decisions, edited, confidence sum] for the human decisions
    audited in [start, end). Two queries: the decisions' events, then their items with a confidence."""
    events = AuditEvent.objects.filter(kind=AuditKind.HOLD_DECIDED)
    if start is not None:
        events = events.filter(at__gte=start)
    if end is not None:
        events = events.filter(at__lt=end)
    by_confidence = {}
    for hold_id, data in events.order_by().values_list("hold_id_ref", "data"):
        data = data if isinstance(data, dict) else {}
        by_confidence[hold_id] = set(data.get("by_confidence") or ())
    counts: dict = {}
    if not by_confidence:
        return counts
    items = (
        HoldItem.objects.filter(hold_id__in=list(by_confidence))
        .exclude(confidence={})
        .exclude(confidence__isnull=True)
        # A rule's or grant's decision is not a person's (SPEC Round 3): left out like by_confidence.
        .filter(decided_by__isnull=True)
        .order_by()
        .values_list("hold_id", "hold__capability_id", "item_id", "confidence", "action", "data", "decided_data")
    )
    for hold_id, capability_id, item_id, confidence, action, data, decided_data in items:
        if item_id in by_confidence.get(hold_id, ()) or not isinstance(confidence, dict):
            continue
        # Changed as the last look and the decided page show it (schemas.changed_fields: as JSON).
        edited = (
            {key for key, _, _ in changed_fields(data or {}, decided_data or {})} if action == Action.EDIT else set()
        )
        for field, value in confidence.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            changed = action in (Action.REJECT, Action.FEEDBACK) or (action == Action.EDIT and field in edited)
            row = counts.setdefault((capability_id, field[:FIELD_CHARS], bucket_of(value)), [0, 0, 0.0])
            row[0] += 1
            row[1] += int(changed)
            row[2] += float(value)
    return counts


def bound_fields(sums: dict, known: dict[int, set[str]]) -> dict:
    """`sums` ((capability id, field, bucket) -> [decisions, edited, confidence sum]) with at most
    MAX_FIELDS fields per capability: the `known` ones (already sealed), then the others by most
    decisions; the rest are added up under OTHER_FIELDS."""
    decisions: dict = {}
    for (capability_id, field, _), (n, _, _) in sums.items():
        per = decisions.setdefault(capability_id, {})
        per[field] = per.get(field, 0) + n
    kept: dict[int, set[str]] = {}
    for capability_id, per in decisions.items():
        sealed = set(known.get(capability_id, ())) - {OTHER_FIELDS}
        chosen = sealed & set(per)
        room = MAX_FIELDS - 1 - len(sealed)
        others = sorted((f for f in per if f not in chosen), key=lambda f: (-per[f], f))
        chosen |= set(others[: max(room, 0)])
        kept[capability_id] = chosen | {OTHER_FIELDS}
    bounded: dict = {}
    for (capability_id, field, bucket), values in sums.items():
        field = field if field in kept[capability_id] else OTHER_FIELDS
        into = bounded.setdefault((capability_id, field, bucket), [0, 0, 0.0])
        for i, value in enumerate(values):
            into[i] += value
    return bounded


def _sealed_fields(capability_ids) -> dict[int, set[str]]:
    known: dict[int, set[str]] = {}
    rows = CalibrationTotal.objects.filter(capability_id__in=list(capability_ids)).values_list("capability_id", "field")
    for capability_id, field in rows.distinct():
        known.setdefault(capability_id, set()).add(field)
    return known


def seal(start: datetime, end: datetime) -> None:
    """Adds [start, end) to the totals; the caller's transaction is the ops rollup's seal of that span."""
    counts = tally(start, end)
    counts = bound_fields(counts, _sealed_fields({key[0] for key in counts}))
    for (capability_id, field, bucket), (n, edited, total) in counts.items():
        updated = CalibrationTotal.objects.filter(capability_id=capability_id, field=field, bucket=bucket).update(
            decisions=F("decisions") + n, edited=F("edited") + edited, confidence_sum=F("confidence_sum") + total
        )
        if not updated:
            CalibrationTotal.objects.create(
                capability_id=capability_id,
                field=field,
                bucket=bucket,
                decisions=n,
                edited=edited,
                confidence_sum=total,
            )


@dataclass
class Cell:
    bucket: str
    label: str
    decisions: int = 0
    edited: int = 0
    confidence_sum: float = 0.0

    @property
    def rate(self) -> float | None:
        """How often the field was changed or its item turned down."""
        return self.edited / self.decisions if self.decisions else None

    @property
    def mean_confidence(self) -> float | None:
        return self.confidence_sum / self.decisions if self.decisions else None


@dataclass
class FieldRow:
    capability: str
    field: str
    cells: list[Cell]

    @property
    def decisions(self) -> int:
        return sum(c.decisions for c in self.cells)

    @property
    def flagged(self) -> bool:
        top = self.cells[-1]
        return top.decisions >= FLAG_MIN_DECISIONS and top.rate is not None and top.rate > FLAG_RATE


_tails: dict = {}  # (tail start, decided events in the tail, the newest's id) -> its tally
_tails_lock = threading.Lock()


def _tail(tail_start: datetime) -> dict:
    """tally(tail_start), computed again only when the tail's decided events changed. The tail holds the
    unsealed hour's decisions, which grow with the decision rate (1,400 an hour at 1,000,000 holds in
    `make bench`): read and tallied on every view and poll, they made the page 1.3x slower there. Audit
    events are never changed or deleted, and a decided hold's items no longer change, so the events'
    count and newest id say whether the tally still holds (one index read instead of two queries)."""
    seen = AuditEvent.objects.filter(kind=AuditKind.HOLD_DECIDED, at__gte=tail_start).aggregate(
        n=Count("id"), newest=Max("id")
    )
    key = (tail_start, seen["n"], seen["newest"])
    with _tails_lock:
        if key in _tails:
            return _tails[key]
    counts = tally(tail_start)
    with _tails_lock:
        _tails.clear()  # one tail per process: the current one
        _tails[key] = counts
    return counts


def report(*, capability: Capability | None, tail_start: datetime) -> list[FieldRow]:
    """The sealed totals plus the live tail since `tail_start` (rollup.live_since), per capability and
    field. Three queries whatever the history holds: the totals, and the tail's two."""
    totals = CalibrationTotal.objects.select_related("capability").order_by()
    if capability is not None:
        totals = totals.filter(capability=capability)
    sums: dict = {}
    names: dict = {}
    for row in totals:
        names[row.capability_id] = row.capability.name
        sums[row.capability_id, row.field, row.bucket] = [row.decisions, row.edited, row.confidence_sum]
    for key, (n, edited, total) in _tail(tail_start).items():
        if capability is not None and key[0] != capability.pk:
            continue
        into = sums.setdefault(key, [0, 0, 0.0])
        into[0] += n
        into[1] += edited
        into[2] += total
    sums = bound_fields(sums, _sealed_fields({key[0] for key in sums}))
    missing = {key[0] for key in sums} - set(names)
    names.update(Capability.objects.filter(pk__in=missing).values_list("pk", "name"))
    fields: dict = {}
    for (capability_id, field, bucket), (n, edited, total) in sums.items():
        cells = fields.setdefault((names[capability_id], field), {})
        cells[bucket] = (n, edited, total)
    rows = []
    for (name, field), cells in sorted(fields.items()):
        row = FieldRow(name, field, [])
        for low, label in BUCKETS:
            key = f"{low:g}"
            n, edited, total = cells.get(key, (0, 0, 0.0))
            row.cells.append(Cell(key, label, int(n), int(edited), float(total)))
        rows.append(row)
    return rows
