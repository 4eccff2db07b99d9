"""/metrics: the ops figures as Prometheus text, for a scraper that sends RQ_METRICS_TOKEN.

The numbers come from the ops read model (rollup.py) in a fixed number of queries whatever the data
size; this module only shapes them into metric families.
"""

import hmac

from django.conf import settings
from django.http import HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from . import rollup
from .models import Invocation


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
        for action in sorted(set(rollup.ACTIONS) | {label for metric, label in self.counts if metric == "action"}):
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
        for outcome in sorted(set(rollup.ATTEMPT_OUTCOMES) | {lb for m, lb in self.counts if m == "attempt"}):
            attempts.add_metric([outcome], self.counts.get(("attempt", outcome), 0))
        yield attempts
        failing = GaugeMetricFamily(
            "rq_endpoint_failing",
            "1 while the capability's agent endpoint is failing (ops' label)",
            labels=["capability"],
        )
        failures = GaugeMetricFamily(
            "rq_endpoint_consecutive_failures",
            "Delivery attempts in a row without an answer below 500",
            labels=["capability"],
        )
        for capability in self.live["capabilities"]:
            failing.add_metric([capability.name], 1 if capability.endpoint_failing(now) else 0)
            failures.add_metric([capability.name], capability.endpoint_failures)
        yield failing
        yield failures
        undeliverable = GaugeMetricFamily("rq_resume_undeliverable", "Resumes whose retries ran out")
        undeliverable.add_metric([], self.undeliverable)
        yield undeliverable
        yield _histogram(
            HistogramMetricFamily,
            "rq_resume_delivery_latency_seconds",
            "From the decision (or expiry) to the agent's answer to the resume",
            self.counts,
            "latency",
            rollup.LATENCY_BUCKETS,
        )
        yield _histogram(
            HistogramMetricFamily,
            "rq_time_to_decision_seconds",
            "From ask to decision",
            self.counts,
            "ttd",
            rollup.TTD_BUCKETS,
        )


def _histogram(family, name, documentation, counts, metric, bounds):
    from prometheus_client.utils import floatToGoString

    cumulative, buckets = 0.0, []
    for bound in bounds:
        cumulative += counts.get((metric, rollup.bound_label(bound)), 0)
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
    registry.register(_Collector(rollup.state(), rollup.totals(), undeliverable))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
