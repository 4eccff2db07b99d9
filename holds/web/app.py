"""The installable app: its manifest, its service worker, and a person's Web Push subscriptions.

The service worker is served from the root so that its scope is the whole app; it caches nothing
(every page is the server's, signed in) and only shows pushes and opens their hold page on a click.
Pages work the same without it. Subscribing is a signed-in POST with CSRF, for the signed-in person.
"""

import json
import re

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.staticfiles import finders
from django.http import HttpResponse, JsonResponse
from django.templatetags.static import static
from django.urls import reverse
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET, require_http_methods

from .. import services

# A push service's https URL (no spaces or control characters, NUL included), and the keys in base64url.
URL_SAFE = re.compile(r"https://[\x21-\x7e]+")
BASE64URL = re.compile(r"[A-Za-z0-9_=-]+")


@require_GET
@cache_control(max_age=3600)
def manifest(request):
    body = {
        "name": "Review Queue",
        "short_name": "Review Queue",
        "description": "Decisions agents are waiting for.",
        "id": reverse("queue"),
        "start_url": reverse("queue"),
        "scope": "/",
        "display": "standalone",
        "background_color": "#ffffff",
        "theme_color": "#1f4e79",
        "icons": [
            {"src": static("icons/rq-192.png"), "sizes": "192x192", "type": "image/png"},
            {"src": static("icons/rq-512.png"), "sizes": "512x512", "type": "image/png", "purpose": "any"},
        ],
    }
    return HttpResponse(json.dumps(body), content_type="application/manifest+json")


@require_GET
@cache_control(no_cache=True)
def service_worker(request):
    with open(finders.find("sw.js"), encoding="utf-8") as source:
        response = HttpResponse(source.read(), content_type="text/javascript; charset=utf-8")
    response["Service-Worker-Allowed"] = "/"
    return response


@require_GET
@cache_control(max_age=86400)
def favicon(request):
    """/favicon.ico, where browsers and feed readers look without reading the page's <link rel=icon>
    (static/favicon.ico: the app's icon as a PNG inside an ICO)."""
    with open(finders.find("favicon.ico"), "rb") as source:
        return HttpResponse(source.read(), content_type="image/x-icon")


@login_required
@require_http_methods(["GET", "POST", "DELETE"])
def push_subscriptions(request):
    """GET: the VAPID public key (the browser's applicationServerKey). POST: this browser's
    subscription, as PushSubscription.toJSON() gives it. DELETE: {endpoint} of this person."""
    if request.method == "GET":
        return JsonResponse({"public_key": settings.RQ_VAPID_PUBLIC_KEY or None})
    try:
        body = json.loads(request.body or b"{}")
        endpoint = body["endpoint"]
        if not isinstance(endpoint, str) or not URL_SAFE.fullmatch(endpoint) or len(endpoint) > 1000:
            raise ValueError("endpoint")
        if request.method == "DELETE":
            removed = services.push_unsubscribe(user=request.user, endpoint=endpoint)
            return JsonResponse({"removed": removed})
        keys = body["keys"]
        p256dh, auth = str(keys["p256dh"]), str(keys["auth"])
        if not (BASE64URL.fullmatch(p256dh) and BASE64URL.fullmatch(auth) and len(p256dh) <= 200 and len(auth) <= 100):
            raise ValueError("keys")
    except (ValueError, KeyError, TypeError):
        return JsonResponse(
            {"error": "invalid", "message": "expected {endpoint: https URL, keys: {p256dh, auth}}"}, status=422
        )
    services.push_subscribe(user=request.user, endpoint=endpoint, p256dh=p256dh, auth=auth)
    return JsonResponse({"subscribed": True}, status=201)
