"""Sign-in: Django's LoginView behind a per-IP rate limit, and django-axes' lockout page.

Two separate guards, both answering 429 with Retry-After on the sign-in page itself:
- the rate limit (holds.ratelimit, RQ_RATE_LOGIN) counts failed sign-ins from one address,
  whatever the username, so one client cannot spray passwords over many accounts (successes
  cost nothing, so a busy office behind one address is not locked out by its own people);
- django-axes counts failures per username and address and locks that pair out for a cool-off
  (AXES_FAILURE_LIMIT, AXES_COOLOFF_TIME); while locked, even the right password is refused.

/admin/login/ redirects here, so the admin's form, which would check passwords without the rate
limit, is never served: every sign-in goes through this one view.

Django's login() rotates the session key (no fixation), and LogoutView flushes the session.
"""

import math

from axes.helpers import get_cool_off
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.forms.utils import ErrorDict
from django.shortcuts import render
from django.views.generic import RedirectView

from .. import ratelimit

TEMPLATE = "holds/login.html"
_login = auth_views.LoginView.as_view(template_name=TEMPLATE)


class _Refused(AuthenticationForm):
    """The sign-in form, showing the username back with one error and nothing validated."""

    def __init__(self, request, message: str):
        super().__init__(request, data={"username": request.POST.get("username", "")[:150]})
        self._errors = ErrorDict({"__all__": self.error_class([message], error_class="nonfield")})


def _refusal(request, message: str, retry_after: int):
    context = {"form": _Refused(request, message), "next": request.POST.get("next", request.GET.get("next", ""))}
    response = render(request, TEMPLATE, context, status=429)
    response["Retry-After"] = str(max(1, retry_after))
    return response


def login(request):
    if request.method != "POST":
        return _login(request)
    address = ratelimit.client_ip(request) or "unknown"
    retry_after = ratelimit.spent("login", address)
    if retry_after:
        return _refusal(request, f"Too many failed sign-ins. Try again in {_wait(retry_after)}.", retry_after)
    response = _login(request)
    if response.status_code != 302:  # the form came back: a failed sign-in from this address
        ratelimit.hit("login", address)
    return response


# /admin/login/ (reviewqueue/urls.py): the same door, with the admin's `next` kept.
admin_login = RedirectView.as_view(pattern_name="login", query_string=True)


def locked_out(request, original_response=None, credentials=None):
    """AXES_LOCKOUT_CALLABLE: too many failures for this username from this address."""
    cool_off = get_cool_off(request)  # AXES_COOLOFF_TIME as a timedelta (None: locked until an admin resets)
    seconds = int(cool_off.total_seconds()) if cool_off else 24 * 3600
    message = f"Too many failed sign-ins for this account. Try again in {_wait(seconds)}."
    return _refusal(request, message, seconds)


def _wait(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} seconds"
    return f"{math.ceil(seconds / 60)} minutes"
