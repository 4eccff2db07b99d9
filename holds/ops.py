"""Ops: the ops page, /metrics, /healthz, and the hourly rollup that keeps them cheap.

Counting holds per request would scan a table that only grows (1,000,000 holds and more). So:
- what is true now (pending per capability, expiring soon, undeliverable, disabled endpoints) is
  read through the partial indexes that cover only live rows;
- what is cumulative (decisions, expiries, resume attempts, latencies, time to decision) is read
  from the audit log, which already records every one of those events, in two parts: sealed
  hours (`OpsHour`, summed into `OpsTotal` in the same transaction) and the live tail since the
  last sealed hour, an `at` range of the audit log that beat keeps at about an hour.
Both views and /metrics therefore cost a fixed number of queries whatever the data size.
"""

import hmac
import logging
import math
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, connection, transaction
from django.db.models import Case, Count, F, OuterRef, Q, Subquery, Sum, When
from django.db.models.functions import TruncHour
from django.http import HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import dateformat, timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from . import rendering, services
from .auth import actor_for_user, may_view
from .errors import Forbidden, ServiceError
from .models import AuditEvent, Capability, Hold, Invocation, OpsHour, OpsTotal, PendingCount

log = logging.getLogger(__name__)

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
TAIL_KINDS = ("hold.asked", "hold.decided", "hold.expired", "invocation.attempt")
ACTIONS = ("approve", "edit", "reject", "feedback")
ATTEMPT_OUTCOMES = ("answered", "retry", "failed", "undeliverable", "parked")
LIST_LIMIT = 20
# Counts on the ops page stop here ("10000+"): past it the number no longer changes what ops do,
# and counting further would read rows in proportion to a backlog.
COUNT_CAP = 10_000


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
                    kind="hold.decided",
                    then=Subquery(Hold.objects.filter(pk=OuterRef("hold_id_ref")).values("created_at")[:1]),
                )
            ),
            inv_kind=Case(When(kind="invocation.attempt", then=Subquery(invocation.values("kind")[:1]))),
            inv_created=Case(When(kind="invocation.attempt", then=Subquery(invocation.values("created_at")[:1]))),
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
        if kind == "hold.asked":
            counts["asked", ""] += 1
        elif kind == "hold.expired":
            counts["expired", ""] += 1
        elif kind == "hold.decided":
            counts["decided", ""] += 1
            for action in (data.get("actions") or {}).values():
                counts["action", str(action)] += 1
            if hold_created is not None:
                seconds = max(0.0, (at - hold_created).total_seconds())
                counts["ttd", bucket_of(TTD_BUCKETS, seconds)] += 1
                counts["ttd_sum", ""] += seconds
        elif kind == "invocation.attempt" and inv_kind == Invocation.Kind.RESUME:
            result = str(data.get("result", ""))
            counts["attempt", result] += 1
            # The first answer of a resume is its delivery; one invocation answers once.
            if result == "answered" and inv_created is not None:
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


def _watermark() -> tuple[int | None, datetime | None]:
    """The last seal's row id (a new id with every seal) and the end of what it sealed."""
    last = (
        OpsHour.objects.filter(metric="sealed", label="").order_by("-hour").values_list("id", "hour", "value").first()
    )
    return (last[0], last[1] + timedelta(seconds=last[2])) if last else (None, None)


# --- sealing (a beat task) --------------------------------------------------------------------


def rollup(*, now: datetime | None = None, max_hours: int = 500) -> int:
    """Seals every finished hour, then every finished 5-minute bucket of the current hour, that is
    not sealed yet, oldest first. Safe to run twice, or concurrently: the unique `sealed` row of a
    start lets only one sealer write it. Returns how many were sealed (at most `max_hours`)."""
    now = now or timezone.now()
    start = sealed_until()
    if start is None:
        first = AuditEvent.objects.order_by("at").values_list("at", flat=True).first()
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

    An hour or bucket counts in a window when it starts inside it, as the chart's bars do.
    """
    day_since, week_since = now - 24 * HOUR, now - 7 * 24 * HOUR
    chart_since = floor_hour(now) - 47 * HOUR
    seal_id, start = _watermark()
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
    tail_start = max(start, week_since) if start else week_since
    for hour, counts in _tally(_events(tail_start)).items():
        if hour >= day_since:
            _merge(day, counts)
        if hour >= week_since:
            _merge(week, counts)
        if hour >= chart_since:
            _merge(hours[hour], {key: n for key, n in counts.items() if key[0] in CHARTED})
    return {"day": day, "week": week, "hours": hours}


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


# --- /metrics -----------------------------------------------------------------------------------


class _Collector:
    def __init__(self, live: dict, counts: dict, undeliverable: int):
        self.live, self.counts, self.undeliverable = live, counts, undeliverable

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        now = self.live["now"]
        pending = GaugeMetricFamily("rq_holds_pending", "Pending holds", labels=["capability"])
        oldest = GaugeMetricFamily(
            "rq_oldest_pending_seconds", "Age of the oldest pending hold (0 when none)", labels=["capability"]
        )
        for capability in self.live["capabilities"]:
            row = self.live["pending"].get(capability.pk)
            pending.add_metric([capability.name], row["n"] if row else 0)
            oldest.add_metric([capability.name], (now - row["oldest"]).total_seconds() if row else 0)
        yield pending
        yield oldest
        asked = CounterMetricFamily("rq_holds_asked", "Holds asked")
        asked.add_metric([], self.counts.get(("asked", ""), 0))
        yield asked
        decisions = CounterMetricFamily(
            "rq_decisions", "Decided items by action (one decision decides 1-100 items)", labels=["action"]
        )
        for action in sorted(set(ACTIONS) | {label for metric, label in self.counts if metric == "action"}):
            decisions.add_metric([action], self.counts.get(("action", action), 0))
        yield decisions
        decided = CounterMetricFamily("rq_holds_decided", "Holds decided by a person or service account")
        decided.add_metric([], self.counts.get(("decided", ""), 0))
        yield decided
        expired = CounterMetricFamily("rq_holds_expired", "Holds that expired undecided")
        expired.add_metric([], self.counts.get(("expired", ""), 0))
        yield expired
        attempts = CounterMetricFamily(
            "rq_resume_attempts", "Delivery attempts of resumes by outcome", labels=["outcome"]
        )
        for outcome in sorted(set(ATTEMPT_OUTCOMES) | {lb for m, lb in self.counts if m == "attempt"}):
            attempts.add_metric([outcome], self.counts.get(("attempt", outcome), 0))
        yield attempts
        undeliverable = GaugeMetricFamily("rq_resume_undeliverable", "Resumes whose retries ran out")
        undeliverable.add_metric([], self.undeliverable)
        yield undeliverable
        yield _histogram(
            HistogramMetricFamily,
            "rq_resume_delivery_latency_seconds",
            "From the decision (or expiry) to the agent's answer to the resume",
            self.counts,
            "latency",
            LATENCY_BUCKETS,
        )
        yield _histogram(
            HistogramMetricFamily,
            "rq_time_to_decision_seconds",
            "From ask to decision",
            self.counts,
            "ttd",
            TTD_BUCKETS,
        )


def _histogram(family, name, documentation, counts, metric, bounds):
    from prometheus_client.utils import floatToGoString

    cumulative, buckets = 0.0, []
    for bound in bounds:
        cumulative += counts.get((metric, bound_label(bound)), 0)
        buckets.append((floatToGoString(bound), cumulative))
    histogram = family(name, documentation)
    histogram.add_metric([], buckets, counts.get((metric + "_sum", ""), 0))
    return histogram


def _bearer_ok(request) -> bool:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    expected = settings.RQ_METRICS_TOKEN
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected.encode())


@require_GET
@never_cache
def metrics(request):
    if not settings.RQ_METRICS_TOKEN:
        return HttpResponse("metrics are off: set RQ_METRICS_TOKEN\n", status=404, content_type="text/plain")
    if not _bearer_ok(request):
        response = HttpResponse(
            "send Authorization: Bearer <RQ_METRICS_TOKEN>\n", status=401, content_type="text/plain"
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    undeliverable = Invocation.objects.filter(
        status=Invocation.Status.UNDELIVERABLE, kind=Invocation.Kind.RESUME
    ).count()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(state(), totals(), undeliverable))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


# --- /healthz -----------------------------------------------------------------------------------


def _check(probe) -> dict:
    started = time.monotonic()
    try:
        probe()
    except Exception as exc:  # any failure is the answer here, not a crash
        log.warning("health check failed: %s", type(exc).__name__, exc_info=True)
        # The class only: a message could carry a broker URL with its password.
        return {"ok": False, "error": type(exc).__name__, "ms": round((time.monotonic() - started) * 1000, 1)}
    return {"ok": True, "ms": round((time.monotonic() - started) * 1000, 1)}


def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def _broker() -> None:
    from kombu import Connection

    timeout = settings.RQ_HEALTH_TIMEOUT
    with Connection(
        settings.CELERY_BROKER_URL,
        transport_options=dict(settings.CELERY_BROKER_TRANSPORT_OPTIONS),
        connect_timeout=timeout,
    ) as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=timeout)


@require_GET
@never_cache
def healthz(request):
    checks = {"database": _check(_database), "broker": _check(_broker)}
    ok = all(check["ok"] for check in checks.values())
    return JsonResponse({"status": "ok" if ok else "fail", "checks": checks}, status=200 if ok else 503)


# --- the ops page -------------------------------------------------------------------------------


@dataclass
class Bar:
    hour: datetime
    decided: int
    expired: int
    x: float
    width: float
    y_decided: float
    h_decided: float
    y_expired: float
    h_expired: float


CHART_W, CHART_H, CHART_LEFT, CHART_BOTTOM, CHART_TOP = 720, 200, 36, 22, 8


def _nice_max(value: float) -> int:
    if value <= 4:
        return 4
    magnitude = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * magnitude:
            return int(math.ceil(step * magnitude))
    return int(value)


TICK_HALF_WIDTH = 15  # half of an "18:00" label in the axis font (11 px)


def _tick(bar) -> dict:
    """An hour label centred under its bar; under the last slots it ends at the chart's right edge
    instead, where centred it was cut off (at 18:00 the "0" was lost)."""
    x = round(bar.x + bar.width / 2, 2)
    at_edge = x + TICK_HALF_WIDTH > CHART_W
    return {"x": CHART_W if at_edge else x, "anchor": "end" if at_edge else "middle", "label": f"{bar.hour:%H}:00"}


def chart(hours: dict, now: datetime) -> dict:
    """Decisions and expiries per hour for the last 48 hours, as SVG geometry."""
    first = floor_hour(now) - 47 * HOUR
    series = []
    for n in range(48):
        hour = first + n * HOUR
        counts = hours.get(hour, {})
        series.append((hour, int(counts.get(("decided", ""), 0)), int(counts.get(("expired", ""), 0))))
    top = _nice_max(max((d + e for _, d, e in series), default=0))
    plot_w, plot_h = CHART_W - CHART_LEFT - 4, CHART_H - CHART_BOTTOM - CHART_TOP
    slot = plot_w / 48
    bars = []
    for n, (hour, decided, expired) in enumerate(series):
        h_decided = plot_h * decided / top
        h_expired = plot_h * expired / top
        base = CHART_TOP + plot_h
        bars.append(
            Bar(
                hour=hour,
                decided=decided,
                expired=expired,
                x=round(CHART_LEFT + n * slot + 1, 2),
                width=round(slot - 2, 2),
                y_decided=round(base - h_decided, 2),
                h_decided=round(h_decided, 2),
                y_expired=round(base - h_decided - h_expired, 2),
                h_expired=round(h_expired, 2),
            )
        )
    # Gridlines only where the value is a whole number of decisions.
    fractions = (0, 0.25, 0.5, 0.75, 1) if top % 4 == 0 else (0, 0.5, 1) if top % 2 == 0 else (0, 1)
    grid = [{"value": round(top * f), "y": round(CHART_TOP + plot_h * (1 - f), 2)} for f in fractions]
    ticks = [_tick(bar) for bar in bars if bar.hour.hour % 6 == 0]
    return {
        "bars": bars,
        "slots": _slots_svg(bars, top=CHART_TOP, plot_h=plot_h),
        "rows": format_html_join(
            "",
            '<tr><td>{}</td><td class="num">{}</td><td class="num">{}</td></tr>',
            ((dateformat.format(b.hour, "Y-m-d H:i"), b.decided, b.expired) for b in bars if b.decided or b.expired),
        ),
        "grid": grid,
        "ticks": ticks,
        "width": CHART_W,
        "height": CHART_H,
        "left": CHART_LEFT,
        "top": CHART_TOP,
        "plot_h": plot_h,
        "right": CHART_W - 4,
        "base": CHART_TOP + plot_h,
        "label_y": CHART_H - 6,
        "total_decided": sum(d for _, d, _ in series),
        "total_expired": sum(e for _, _, e in series),
    }


# The chart's 48 slots and its table's rows are markup built here, not template loops: as loops they
# were two thirds of the ops page's rendering (14 of 20 ms at 1,000,000 holds, where every hour has
# bars). They hold numbers and hours only, and format_html escapes them all the same.
_SLOT = (
    '<g class="chart-slot"><title>{} UTC: {} decided, {} expired</title>'
    '<rect class="chart-hit" x="{}" y="{}" width="{}" height="{}"></rect>{}{}</g>'
)
_BAR = '<rect class="{}" x="{}" y="{}" width="{}" height="{}"></rect>'


def _slots_svg(bars: list[Bar], *, top: float, plot_h: float):
    def bar(kind: str, b: Bar, y: float, h: float):
        return format_html(_BAR, kind, b.x, y, b.width, h) if h else ""

    return format_html_join(
        "\n",
        _SLOT,
        (
            (
                dateformat.format(b.hour, "D H:i"),
                b.decided,
                b.expired,
                b.x,
                top,
                b.width,
                plot_h,
                bar("bar-decided", b, b.y_decided, b.h_decided),
                bar("bar-expired", b, b.y_expired, b.h_expired),
            )
            for b in bars
        ),
    )


def _summary(counts: dict) -> dict:
    ttd = {label: v for (metric, label), v in counts.items() if metric == "ttd"}
    decided, expired = int(counts.get(("decided", ""), 0)), int(counts.get(("expired", ""), 0))
    p50, p90 = percentile(ttd, 0.5), percentile(ttd, 0.9)
    share = (expired / (decided + expired)) if decided + expired else None
    return {
        "decided": decided,
        "expired": expired,
        "resolved": decided + expired,
        "p50": p50,
        "p90": p90,
        "p50_text": rendering.span(p50),
        "p90_text": rendering.span(p90),
        "expired_share": share,
        "share_text": "—" if share is None else f"{share:.1%}".replace(".0%", "%"),
    }


def ops_context(actor) -> dict:
    """Everything the ops page shows, in a fixed number of queries."""
    live = state()
    now = live["now"]
    by_pk = {c.pk: c for c in live["capabilities"]}
    pending = []
    for capability in live["capabilities"]:
        row = live["pending"].get(capability.pk)
        pending.append(
            {
                "capability": capability,
                "queue_url": reverse("queue") + "?" + urlencode({"capability": capability.name, "all": "1"}),
                "count": row["n"] if row else 0,
                "oldest": row["oldest"] if row else None,
            }
        )
    oldest = min((p["oldest"] for p in pending if p["oldest"]), default=None)
    soon = expiring_soon(now)
    expiring = list(
        soon.order_by("expires_at", "id").values("id", "intent", "capability_id", "expires_at")[:LIST_LIMIT]
    )
    for hold in expiring:
        hold["public_id"] = f"h_{hold['id']}"
        hold["capability"] = by_pk.get(hold["capability_id"])
    stuck = Invocation.objects.filter(status=Invocation.Status.UNDELIVERABLE)
    undeliverable = list(
        stuck.order_by("-created_at").values(
            "id", "kind", "run_id", "hold_id", "attempts", "last_error", "created_at", "run__capability__name"
        )[:LIST_LIMIT]
    )
    for inv in undeliverable:
        inv["hold_public_id"] = f"h_{inv['hold_id']}" if inv["hold_id"] else ""
    parked = dict(
        Invocation.objects.filter(status=Invocation.Status.PARKED)
        .values_list("run__capability_id")
        .annotate(n=Count("id"))
        .order_by()
    )
    disabled = [
        {"capability": c, "parked": parked.get(c.pk, 0)}
        for c in live["capabilities"]
        if c.endpoint_disabled_at is not None
    ]
    stalled = [c for c in live["capabilities"] if c.endpoint_stalled_at is not None and c.endpoint_disabled_at is None]
    windows = recent(now)
    return {
        "now": now,
        "pending": pending,
        "pending_total": sum(p["count"] for p in pending),
        "oldest": oldest,
        "expiring": expiring,
        "expiring_count": soon[:COUNT_CAP].count(),
        "undeliverable": undeliverable,
        "undeliverable_count": stuck[:COUNT_CAP].count(),
        "disabled": disabled,
        "stalled": stalled,
        "day": _summary(windows["day"]),
        "week": _summary(windows["week"]),
        "chart": chart(windows["hours"], now),
        "is_admin": actor.is_admin,
        "role": actor.role,
        "nav": "ops",
        "list_limit": LIST_LIMIT,
        "count_cap": COUNT_CAP,
    }


def _ops_actor(request):
    actor = actor_for_user(request.user)
    if not may_view(actor):
        raise PermissionDenied("your account has no role")
    return actor


@require_GET
@login_required
def ops_page(request):
    actor = _ops_actor(request)
    template = "holds/ops.html" + ("#ops-body" if request.htmx else "")
    return render(request, template, ops_context(actor))


@require_GET
@login_required
def ops_fragment(request):
    """The self-refreshing part of /ops (HTMX polls it; it is a plain page without JS too)."""
    actor = _ops_actor(request)
    return render(request, "holds/ops.html#ops-body", ops_context(actor))


def _act(request, do, done: str) -> HttpResponse:
    """Runs an admin action through services and goes back to /ops (303, so the browser GETs it)."""
    actor = actor_for_user(request.user)
    try:
        result = do(actor)
    except Forbidden as exc:
        raise PermissionDenied(exc.message) from None
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, done.format(result=result))
    return HttpResponseRedirect303(reverse("ops"))


class HttpResponseRedirect303(HttpResponseRedirect):
    status_code = 303


@require_POST
@login_required
def ops_retry(request, invocation_id: str):
    return _act(
        request,
        lambda actor: services.invocation_retry(invocation_id=invocation_id, actor=actor),
        "{result.id} is due again and will be sent within seconds.",
    )


@require_POST
@login_required
def ops_enable(request, capability_id: int):
    return _act(
        request,
        lambda actor: services.capability_enable(capability_id=capability_id, actor=actor),
        "The endpoint of {result.name} is enabled; its parked invocations are due again.",
    )
