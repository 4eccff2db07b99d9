"""The ops read model: what the ops page and /metrics count, and the rollup that keeps it cheap.

Counting holds per request would scan a table that only grows (1,000,000 holds and more). So:
- what is true now (pending per capability, expiring soon) is read through the partial indexes
  that cover only live rows, and the pending counters' rows (folded by beat);
- what is cumulative (decisions, expiries, resume attempts, latencies, time to decision) is read
  from the audit log, which already records every one of those events, in two parts: sealed
  hours (`OpsHour`, summed into `OpsTotal` in the same transaction) and the live tail since the
  last sealed hour, an `at` range of the audit log that beat keeps at a few minutes.
No views, requests or services here: the ops page (web/ops.py), /metrics (metrics.py) and
beat's tasks read and seal through these functions.
"""

import math
from collections import defaultdict
from datetime import datetime, timedelta

from django.db import IntegrityError, connection, transaction
from django.db.models import BigIntegerField, Case, F, FloatField, OuterRef, Q, Subquery, Sum, Value, When
from django.db.models.functions import TruncHour
from django.utils import timezone

from . import calibration, words
from .models import AuditEvent, Capability, Hold, Invocation, OpsHour, OpsTotal, PendingCount
from .words import Action, AuditKind, DeliveryResult

HOUR = timedelta(hours=1)
# Finished hours are sealed whole; the current hour in 5-minute buckets, so that the live tail a
# request reads is at most a few minutes of events, even in an hour with a burst.
BUCKET = timedelta(minutes=5)
# A bucket is sealed this long after it ends, so that transactions open at its end commit first
# (the longest transaction here, a sweep batch, takes well under a second).
SEAL_LAG = timedelta(minutes=1)
INF = math.inf
# Time to decision (seconds): minutes to a week; the ops page interpolates percentiles inside a bucket.
TTD_BUCKETS = (60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 172800, 604800, INF)
# Decision -> delivery of the resume (seconds).
LATENCY_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, INF)
TAIL_KINDS = (
    AuditKind.HOLD_ASKED,
    AuditKind.HOLD_DECIDED,
    AuditKind.HOLD_EXPIRED,
    AuditKind.INVOCATION_ATTEMPT,
    AuditKind.HOLD_DECIDED_BY_RULE,
)
ACTIONS = tuple(Action.values)
ATTEMPT_OUTCOMES = tuple(o.value for o in words.ATTEMPT_OUTCOMES)
# The ops page counts at most this much of the unsealed audit log live. Beat keeps the unsealed part
# under about 7 minutes (a bucket, SEAL_LAG and its own period), so only a stopped rollup passes it;
# the older unsealed part is then left out and the page says so, instead of reading hours of events.
LIVE_LIMIT = timedelta(minutes=10)


def live_since(sealed: datetime | None, now: datetime) -> datetime:
    """Where a request's live count starts: the seal, but never more than LIVE_LIMIT ago.

    Past the limit, the start is LIVE_LIMIT ago rounded up to the whole minute: the tail is then 9 to 10
    minutes long, and its start moves once a minute instead of on every request, so what is computed from
    it (calibration's tally of the tail, kept per process by its start) can be reused while the rollup lags."""
    limit = now - LIVE_LIMIT
    whole = limit.replace(second=0, microsecond=0)
    limit = whole + timedelta(minutes=1) if whole != limit else whole
    return max(sealed, limit) if sealed else limit


def bound_label(bound: float) -> str:
    return "+Inf" if bound == INF else f"{bound:g}"


def bucket_of(bounds: tuple, seconds: float) -> str:
    for bound in bounds:
        if seconds <= bound:
            return bound_label(bound)
    return "+Inf"


def floor_hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


# --- reading the audit log --------------------------------------------------------------------


def _events(start: datetime | None, end: datetime | None = None):
    """Countable audit events in [start, end), each with what it needs from its hold or invocation.

    One query: the hold's creation and the invocation's kind come from primary-key subqueries, run
    only for the kinds that count them (a CASE evaluates its branch only when it applies; asked
    holds, half the log, need neither, and a decision needs only its hold).
    """
    events = AuditEvent.objects.filter(kind__in=TAIL_KINDS)
    if start is not None:
        events = events.filter(at__gte=start)
    if end is not None:
        events = events.filter(at__lt=end)
    invocation = Invocation.objects.filter(pk=OuterRef("invocation_id_ref"))
    return (
        events.annotate(
            hold_created=Case(
                When(
                    kind=AuditKind.HOLD_DECIDED,
                    then=Subquery(Hold.objects.filter(pk=OuterRef("hold_id_ref")).values("created_at")[:1]),
                )
            ),
            inv_kind=Case(When(kind=AuditKind.INVOCATION_ATTEMPT, then=Subquery(invocation.values("kind")[:1]))),
            inv_created=Case(
                When(kind=AuditKind.INVOCATION_ATTEMPT, then=Subquery(invocation.values("created_at")[:1]))
            ),
        )
        .order_by()
        .values_list("kind", "at", "data", "hold_created", "inv_kind", "inv_created")
    )


def _tally(rows) -> dict[datetime, dict[tuple[str, str], float]]:
    """Per hour: (metric, label) -> value."""
    hours: dict = defaultdict(lambda: defaultdict(float))
    for kind, at, data, hold_created, inv_kind, inv_created in rows:
        counts = hours[floor_hour(at)]
        data = data if isinstance(data, dict) else {}
        if kind == AuditKind.HOLD_ASKED:
            counts["asked", ""] += 1
        elif kind == AuditKind.HOLD_EXPIRED:
            counts["expired", ""] += 1
        elif kind == AuditKind.HOLD_DECIDED_BY_RULE:
            # Items a rule or grant decided at the ask, on a hold left pending for the rest.
            counts["by_rule_items", ""] += len(data.get("actions") or {})
        elif kind == AuditKind.HOLD_DECIDED:
            counts["decided", ""] += 1
            for action in (data.get("actions") or {}).values():
                counts["action", str(action)] += 1
            by_rule = data.get("decided_by") or {}
            if by_rule:
                # Decided whole at the ask by rules or grants: no time to decision to speak of.
                counts["by_rule_holds", ""] += 1
                counts["by_rule_items", ""] += len(by_rule)
            elif hold_created is not None:
                seconds = max(0.0, (at - hold_created).total_seconds())
                counts["ttd", bucket_of(TTD_BUCKETS, seconds)] += 1
                counts["ttd_sum", ""] += seconds
        elif kind == AuditKind.INVOCATION_ATTEMPT and inv_kind == Invocation.Kind.RESUME:
            result = str(data.get("result", ""))
            counts["attempt", result] += 1
            # The first answer of a resume is its delivery; one invocation answers once.
            if result == DeliveryResult.ANSWERED and inv_created is not None:
                seconds = max(0.0, (at - inv_created).total_seconds())
                counts["latency", bucket_of(LATENCY_BUCKETS, seconds)] += 1
                counts["latency_sum", ""] += seconds
    return hours


def _merge(into: dict, counts: dict) -> dict:
    for key, value in counts.items():
        into[key] = into.get(key, 0) + value
    return into


def sealed_until() -> datetime | None:
    """The end of the last sealed hour or bucket: the live tail starts here."""
    return _watermark()[1]


def _watermark() -> tuple[int | None, datetime | None, datetime | None]:
    """The last seal's row id (a new id with every seal), the end of what it sealed, and, while
    nothing is sealed yet, the time of the first audit event (where the rollup will start). One
    query: the last seal and the first event, each one index probe."""
    seal = OpsHour.objects.filter(metric="sealed", label="").order_by("-hour").values_list("id", "hour", "value")
    first = AuditEvent.objects.order_by("at").values_list(
        Value(None, output_field=BigIntegerField()), "at", Value(0.0, output_field=FloatField())
    )
    seal_id = end = first_at = None
    for row_id, at, seconds in seal[:1].union(first[:1], all=True):
        if row_id is None:
            first_at = at
        else:
            seal_id, end = row_id, at + timedelta(seconds=seconds)
    return seal_id, end, None if seal_id else first_at


# --- sealing (a beat task) --------------------------------------------------------------------


def rollup(*, now: datetime | None = None, max_hours: int = 500) -> int:
    """Seals every finished hour, then every finished 5-minute bucket of the current hour, that is
    not sealed yet, oldest first. Safe to run twice, or concurrently: the unique `sealed` row of a
    start lets only one sealer write it. Returns how many were sealed (at most `max_hours`)."""
    now = now or timezone.now()
    _, start, first = _watermark()
    if start is None:
        if first is None:
            return 0
        start = floor_hour(first)
    sealed = 0
    while sealed < max_hours:
        size = HOUR if start == floor_hour(start) and start + HOUR <= now - SEAL_LAG else BUCKET
        if start + size > now - SEAL_LAG:
            break
        try:
            _seal(start, size)
        except IntegrityError:
            return sealed  # another sealer has this one; it carries on from here
        start += size
        sealed += 1
    return sealed


def _seal(start: datetime, size: timedelta) -> None:
    with transaction.atomic():
        # The watermark row: its value is the sealed span in seconds.
        OpsHour.objects.create(hour=start, metric="sealed", label="", value=size.total_seconds())
        counts: dict = {}
        for per_hour in _tally(_events(start, start + size)).values():
            _merge(counts, per_hour)
        OpsHour.objects.bulk_create(
            OpsHour(hour=start, metric=metric, label=label, value=value) for (metric, label), value in counts.items()
        )
        for (metric, label), value in counts.items():
            if not OpsTotal.objects.filter(metric=metric, label=label).update(value=F("value") + value):
                OpsTotal.objects.create(metric=metric, label=label, value=value)
        # Calibration's sums of the same span, sealed once with it.
        calibration.seal(start, start + size)


# --- snapshots ----------------------------------------------------------------------------------


def totals() -> dict[tuple[str, str], float]:
    """Every counter since the beginning: sealed totals plus the live tail. Three queries."""
    start = sealed_until()
    counts = {(m, label): v for m, label, v in OpsTotal.objects.values_list("metric", "label", "value")}
    for per_hour in _tally(_events(start)).values():
        _merge(counts, per_hour)
    return counts


CHARTED = ("decided", "expired")  # the chart's series


def recent(now: datetime) -> dict:
    """Counters of the last 24 hours and 7 days, and decisions and expiries per hour for the chart's
    48 hours: the sealed part (_sealed_windows, remembered until it changes) plus the live tail.
    Two queries, four when the sealed part has changed.

    An hour or bucket counts in a window when it starts inside it, as the chart's bars do. The live
    tail is at most LIVE_LIMIT long: when the rollup lags further, `behind` says since when the
    audit log is unsealed and which span (`left_out`) the windows and the chart leave out.
    """
    day_since, week_since = now - 24 * HOUR, now - 7 * 24 * HOUR
    chart_since = floor_hour(now) - 47 * HOUR
    seal_id, start, first = _watermark()
    # What the sealed part depends on: the database, the last seal, the first 5-minute grid point
    # inside the day window (the week's moves with it) and the chart's first hour. Seals start on
    # that grid, so this changes at most every five minutes; until then the page reuses the sums.
    db = connection.settings_dict
    key = (
        db["HOST"],
        db["PORT"],
        db["NAME"],
        seal_id,
        -(-day_since.timestamp() // BUCKET.total_seconds()),
        chart_since,
    )
    global _sealed
    remembered = _sealed  # read once: another thread of this worker may replace it meanwhile
    if remembered is None or remembered[0] != key:
        remembered = _sealed = (key, _sealed_windows(day_since, week_since, chart_since))
    sealed_day, sealed_week, sealed_hours = remembered[1]
    day, week = dict(sealed_day), dict(sealed_week)
    hours: dict = defaultdict(dict, {hour: dict(counts) for hour, counts in sealed_hours.items()})
    unsealed_since = start or first  # None: nothing was ever written to seal
    tail_start = live_since(start, now)
    for hour, counts in _tally(_events(tail_start)).items():
        if hour >= day_since:
            _merge(day, counts)
        if hour >= week_since:
            _merge(week, counts)
        if hour >= chart_since:
            _merge(hours[hour], {key: n for key, n in counts.items() if key[0] in CHARTED})
    behind = None
    if unsealed_since is not None and unsealed_since < tail_start:
        behind = {
            "since": unsealed_since,
            "seconds": (now - unsealed_since).total_seconds(),
            "left_out": (max(unsealed_since, week_since), tail_start),
        }
    return {"day": day, "week": week, "hours": hours, "behind": behind}


# The last sealed part of recent()'s windows in this process, as (its key, the sums). Sealed rows
# never change, and the sums of a week of them were a third of the ops page's queries at 1,000,000
# holds (5.6 of 14 ms). One tuple, replaced whole, so a thread never pairs one key with other sums.
_sealed: tuple | None = None


def _sealed_windows(day_since: datetime, week_since: datetime, chart_since: datetime) -> tuple[dict, dict, dict]:
    """The sealed rows of the windows, summed by the database, so a few dozen rows come back
    whatever the history holds (7 days of full hours are thousands of rows, which took 20 ms to
    add up here). Two queries."""
    sealed = OpsHour.objects.filter(hour__gte=week_since).exclude(metric="sealed").order_by()
    day: dict = {}
    week: dict = {}
    windows = sealed.values_list("metric", "label").annotate(
        in_day=Sum("value", filter=Q(hour__gte=day_since)), in_week=Sum("value")
    )
    for metric, label, in_day, in_week in windows:
        week[metric, label] = in_week
        if in_day:
            day[metric, label] = in_day
    hours: dict = defaultdict(dict)
    per_hour = (
        sealed.filter(hour__gte=chart_since, metric__in=CHARTED)
        .annotate(start=TruncHour("hour"))
        .values_list("start", "metric")
        .annotate(n=Sum("value"))
    )
    for hour, metric, n in per_hour:
        hours[hour][metric, ""] = n
    return day, week, dict(hours)


def percentile(counts: dict, q: float, bounds: tuple = TTD_BUCKETS) -> float | None:
    """The q-quantile from bucket counts, linearly interpolated inside its bucket."""
    total = sum(counts.get(bound_label(b), 0) for b in bounds)
    if not total:
        return None
    target, seen, lower = q * total, 0.0, 0.0
    for bound in bounds:
        count = counts.get(bound_label(bound), 0)
        if count and seen + count >= target:
            if bound == INF:
                return lower
            return lower + (bound - lower) * (target - seen) / count
        seen += count
        lower = bound if bound != INF else lower
    return lower


def state() -> dict:
    """What is true now, without counting pending holds: the pending counters' rows (folded by
    beat to one per capability) and one index probe per capability for its oldest pending hold."""
    now = timezone.now()
    capabilities = list(capabilities_with_oldest())
    counts = dict(PendingCount.objects.values_list("capability_id").annotate(n=Sum("delta")).order_by())
    pending = {
        c.pk: {"n": counts.get(c.pk, 0), "oldest": c.oldest}
        for c in capabilities
        if counts.get(c.pk, 0) or c.oldest is not None
    }
    return {"now": now, "capabilities": capabilities, "pending": pending}


def capabilities_with_oldest():
    """Capabilities by name, each with its oldest pending hold's created_at (index hold_pending_age)."""
    oldest = Hold.objects.filter(status=Hold.Status.PENDING, capability=OuterRef("pk")).order_by("created_at")
    return Capability.objects.annotate(oldest=Subquery(oldest.values("created_at")[:1])).order_by("name")


def expiring_soon(now: datetime):
    """Pending holds that expire within the hour. Both bounds: overdue holds are the sweep's within
    seconds, and without the lower bound the planner reads expires_at's statistics (mostly decided
    holds, long past) as "nearly every pending hold matches" and reads them all (0.36 s at 100,000
    pending) instead of this range of the hold_sweep_due index (11 ms)."""
    return Hold.objects.filter(status=Hold.Status.PENDING, expires_at__gt=now, expires_at__lte=now + HOUR)


def fold_pending() -> int:
    """Beat: folds the pending counters' rows into one per capability. Rows inserted meanwhile are
    not locked and stay for the next fold; two folds at once lock the same rows, and the second
    finds them gone. Returns the rows removed."""
    with transaction.atomic():
        rows = list(PendingCount.objects.select_for_update().values_list("pk", "capability_id", "delta"))
        sums: dict = defaultdict(int)
        for _, capability_id, delta in rows:
            sums[capability_id] += delta
        if len(rows) <= len(sums):
            return 0
        PendingCount.objects.filter(pk__in=[row[0] for row in rows]).delete()
        PendingCount.objects.bulk_create(PendingCount(capability_id=c, delta=n) for c, n in sums.items() if n)
    return len(rows) - len(sums)
