"""Rate limits on ask, decision and sign-in: fixed windows counted in the Django cache (and `tally`,
the same count limiting nothing, for what is only recorded a bounded number of times).

The cache is Redis when REDIS_URL is set (shared by every web process), local memory otherwise.
Rates are settings, read on every call so that tests and operators can change them:

    RQ_RATE_ASK       per run token                           default "30/m"
    RQ_RATE_DECISION  per service-account key or person      default "120/m"
    RQ_RATE_LOGIN     per client IP, failed sign-ins          default "20/5m"
    RQ_RATE_RUN_START per caller of POST /v0/runs             default "120/m"
    RQ_RATE_CLAIM     per person, claims and releases         default "30/h"
    RQ_RATE_DATASET   per caller, dataset items added         default "600/h"
    RQ_RATE_EXPERIMENT_RUNS per caller, runs experiments start default "1000/h"

A rate is "N/period" with the period in seconds (`30s`, or a bare number), minutes (`m`, `5m`),
hours (`h`) or days (`d`); "" or "off" turns that limit off. Identities are hashed before they
become cache keys, so a token or key is never stored in the cache either.
"""

import hashlib
import ipaddress
import logging
import math
import re
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured

from .errors import RateLimited
from .words import ActorKind

log = logging.getLogger(__name__)

DEFAULTS = {
    "ask": "30/m",
    "decision": "120/m",
    "login": "20/5m",
    "run_start": "120/m",
    "claim": "30/h",
    "dataset": "600/h",
    "experiment_runs": "1000/h",
}
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([smhd]?)\s*$")


def clock() -> float:
    """Seconds now; tests stop it, so that a window never turns over in the middle of one."""
    return time.time()


@dataclass(frozen=True)
class Rate:
    limit: int
    period: int  # seconds


def parse_rate(text: str) -> Rate | None:
    """'60/m' -> Rate(60, 60); '10/30s' -> Rate(10, 30); '' or 'off' -> None. Fails loudly otherwise."""
    if text is None or str(text).strip().lower() in ("", "off", "none"):
        return None
    match = RATE.match(str(text))
    if not match or (not match.group(2) and not match.group(3)):
        raise ImproperlyConfigured(f"a rate is 'N/period' such as '60/m' or '10/30s', got {text!r}")
    limit, count, unit = int(match.group(1)), int(match.group(2) or 1), UNITS[match.group(3) or "s"]
    if count * unit <= 0:
        raise ImproperlyConfigured(f"a rate's period must be positive, got {text!r}")
    return Rate(limit=limit, period=count * unit)


def rate_for(scope: str) -> Rate | None:
    return parse_rate(getattr(settings, f"RQ_RATE_{scope.upper()}", DEFAULTS[scope]))


def _digest(ident: str) -> str:
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def _window(scope: str, ident: str) -> tuple[Rate, str, float, int] | None:
    rate = rate_for(scope)
    if rate is None:
        return None
    now = clock()
    window = int(now // rate.period)
    return rate, _key(scope, ident, window), now, window


def _key(scope: str, ident: str, window: int) -> str:
    return f"rq:rl:{scope}:{_digest(ident)}:{window}"


def _retry_after(rate: Rate, now: float, window: int) -> int:
    return max(1, math.ceil((window + 1) * rate.period - now))


def hit(scope: str, ident: str, cost: int = 1) -> int:
    """Counts `cost` (one request, or the runs of one experiment) for `ident` in `scope`: 0 when
    allowed, else the seconds until it may retry."""
    found = _window(scope, ident)
    if found is None:
        return 0
    rate, key, now, window = found
    try:
        count = _add(key, cost, rate.period)
    except Exception:  # noqa: BLE001 - a cache outage must not stop agents or reviewers: fail open
        log.warning("rate limit %s not counted: the cache is unavailable", scope, exc_info=True)
        return 0
    return 0 if count <= rate.limit else _retry_after(rate, now, window)


def _add(key: str, cost: int, period: int) -> int:
    """Adds `cost` to a window's count and returns the count; raises when the cache is unavailable."""
    cache.add(key, 0, timeout=period + 5)
    try:
        return cache.incr(key, cost)
    except ValueError:  # the window's key expired between add and incr: this is its first hit
        cache.set(key, cost, timeout=period + 5)
        return cost


def tally(scope: str, ident: str, period: int) -> int | None:
    """Counts one event of `ident` in `scope`'s current fixed window of `period` seconds, limiting
    nothing: the window's count so far, or None when the cache is unavailable."""
    try:
        return _add(_key(scope, ident, int(clock() // period)), 1, period)
    except Exception:  # noqa: BLE001 - the caller decides what an uncounted event means
        log.warning("%s not counted: the cache is unavailable", scope, exc_info=True)
        return None


def spent(scope: str, ident: str) -> int:
    """Without counting: 0 while `ident` has budget left in `scope`, else the seconds until it has."""
    found = _window(scope, ident)
    if found is None:
        return 0
    rate, key, now, window = found
    try:
        count = cache.get(key, 0)
    except Exception:  # noqa: BLE001 - fail open, as above
        log.warning("rate limit %s not checked: the cache is unavailable", scope, exc_info=True)
        return 0
    return 0 if count < rate.limit else _retry_after(rate, now, window)


def client_ip(request) -> str | None:
    """The client's address: REMOTE_ADDR, or behind our proxy (RQ_BEHIND_PROXY) the address it appended.

    Only the right-most X-Forwarded-For entry is the proxy's own; everything left of it is what
    the client claimed, so a client cannot pick its own bucket by sending the header. None when
    there is no valid address (a test's force_login has none); django-axes takes None as "unknown".
    """
    meta = getattr(request, "META", None) or {}
    candidates = [meta.get("REMOTE_ADDR", "")]
    if getattr(settings, "RQ_BEHIND_PROXY", False):
        candidates.insert(0, meta.get("HTTP_X_FORWARDED_FOR", "").split(",")[-1].strip())
    for candidate in candidates:
        try:
            return str(ipaddress.ip_address(candidate))
        except ValueError:
            continue
    return None


def token_identity(invocation_id: str) -> str:
    return f"token:{invocation_id}"  # the invocation's random id names its one token


def identity(actor) -> str:
    """Per token, per key, per person: never a reused number, so a new row never inherits a count."""
    if actor.kind == ActorKind.RUN:
        return token_identity(actor.invocation.pk)
    if actor.kind == ActorKind.ACCOUNT:
        return f"key:{actor.account.key_hash}"
    if actor.kind == ActorKind.USER:
        return f"user:{actor.user.pk}:{actor.user.date_joined.isoformat()}"
    return actor.caller_key


def api_limit(scope: str, actor, cost: int = 1) -> None:
    """Raises 429 when `actor` (a run token, a key or a person) is over `scope`'s rate."""
    limit(scope, identity(actor), cost)


def limit(scope: str, ident: str, cost: int = 1) -> None:
    """Raises 429 when `ident` is over `scope`'s rate."""
    retry_after = hit(scope, ident, cost)
    if retry_after:
        raise RateLimited(f"too many {scope} requests; try again in {retry_after} s", retry_after=retry_after)
