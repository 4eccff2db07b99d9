"""/healthz: 200 or 503 with the database and broker checks, for load balancers (no sign-in)."""

import logging
import time

from django.conf import settings
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from .services import gateway, sql

log = logging.getLogger(__name__)


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
    gateway.fetch(sql.PING)


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
