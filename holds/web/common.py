"""What every page shares: loading a hold (404), requiring a viewer (403), and turning a service's
refusal into the page's message (a 303 back, with the message) or a 403 — one mapping for all pages."""

import functools
from collections.abc import Callable

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse

from .. import queries
from ..auth import Actor, actor_for_user
from ..errors import Forbidden, RateLimited, ServiceError
from ..ids import HOLD, parse_public_id
from ..models import Hold
from ..policy import may_read
from ..responses import see_other


def load_hold(hold_id: str) -> Hold:
    """The hold with what its page shows, or 404."""
    pk = parse_public_id(hold_id, HOLD)
    hold = queries.hold_for_page(pk) if pk else None
    if hold is None:
        raise Http404(f"hold {hold_id} does not exist")
    return hold


def forbid(refusal: ServiceError | None) -> None:
    """A policy refusal on a page: the styled 403 (templates/403.html) with its message."""
    if refusal is not None:
        raise PermissionDenied(refusal.message)


def viewer(request) -> Actor:
    """The signed-in person, who must have a role (policy.may_read)."""
    actor = actor_for_user(request.user)
    if may_read(actor) is not None:
        raise PermissionDenied("your account has no role")
    return actor


def problems(exc: ServiceError) -> str:
    """A refusal as one line: the field problems of a 422, else its message."""
    return "; ".join(e["message"] for e in getattr(exc, "errors", None) or []) or exc.message


def refused(request, exc: ServiceError, back: str, *, failed: str = "", forbidden_message: bool = False):
    """A service's refusal on a page: a 403 for Forbidden (unless the page shows it as a message), a
    429 with Retry-After past a rate, else the message (prefixed by `failed`) on the page it goes back
    to (303)."""
    if isinstance(exc, Forbidden) and not forbidden_message:
        raise PermissionDenied(exc.message) from None
    if isinstance(exc, RateLimited):
        # The API's 429 at every page door too (issue 30.3), with words a person can read.
        response = HttpResponse(f"{exc.message}.", status=429, content_type="text/plain; charset=utf-8")
        response["Retry-After"] = str(exc.extra["retry_after"])
        return response
    messages.error(request, failed + problems(exc))
    return see_other(back)


def service_errors(back: Callable[..., str], *, failed: str = "", forbidden_message: bool = False):
    """Decorates a page's POST view: a ServiceError it raises becomes `refused(...)`, going back to
    `back(*args, **kwargs)` (the view's URL arguments)."""

    def wrap(view):
        @functools.wraps(view)
        def inner(request, *args, **kwargs):
            try:
                return view(request, *args, **kwargs)
            except ServiceError as exc:
                url = back(*args, **kwargs)
                return refused(request, exc, url, failed=failed, forbidden_message=forbidden_message)

        return inner

    return wrap
