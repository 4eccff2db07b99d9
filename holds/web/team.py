"""The team page (admins only): people, service accounts and capability approvers.

Thin: parse -> services -> render. Every change goes through the audited team functions of
services.py. Secrets (a one-time password, a set-password link, a service-account key) are shown
once, in the answer to the POST that made them, and never stored or shown again.
"""

import secrets

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.tokens import default_token_generator
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.shortcuts import get_object_or_404, render
from django.urls import reverse, reverse_lazy
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from .. import services
from ..auth import Actor, actor_for_user, role_of_user
from ..errors import ServiceError
from ..models import Capability, Role, ServiceAccount
from ..policy import may_manage_team
from ..responses import see_other
from .common import forbid, refused

APPROVER_ROLES = (Role.ADMIN, Role.MEMBER)
# Capability keys the team page shows, with the model field each one sets.
FILE_KEYS = {"approvers": "approvers", "self_approval": "self_approval", "notify": "notify"}


class PersonForm(forms.Form):
    username = forms.CharField(max_length=150, validators=[UnicodeUsernameValidator()])
    email = forms.EmailField(required=False)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)
    password = forms.ChoiceField(
        choices=[("link", "A set-password link"), ("once", "A one-time password")], initial="link"
    )

    def clean_username(self):
        username = self.cleaned_data["username"]
        if get_user_model().objects.filter(username__iexact=username).exists():
            raise forms.ValidationError("Someone already has this username.")
        return username


class AccountForm(forms.Form):
    name = forms.RegexField(
        regex=r"^[A-Za-z0-9_.-]{1,100}$",
        max_length=100,
        error_messages={"invalid": "Letters, digits, '_', '.' and '-' only."},
    )
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def clean_name(self):
        name = self.cleaned_data["name"]
        if ServiceAccount.objects.filter(name=name).exists():
            raise forms.ValidationError("A service account has this name already.")
        return name


def _admin(request) -> Actor:
    actor = actor_for_user(request.user)
    forbid(may_manage_team(actor))
    return actor


def _run(request, call, done):
    """Calls a team service; a refusal becomes a message on the page (403 stays a 403: common.refused).
    `done` is the success message, or a function of the service's result that returns it. Either way
    it goes back to the top of /team, where the message is: an anchor to the section (#people)
    scrolled the message out of sight, "this is the last admin" included."""
    try:
        result = call()
    except ServiceError as exc:
        return refused(request, exc, reverse("team"))
    messages.success(request, done(result) if callable(done) else done)
    return see_other(reverse("team"))


# --- the page --------------------------------------------------------------------------------------


def _context(request, actor: Actor, person_form=None, account_form=None) -> dict:
    people = []
    now = timezone.now()
    people_rows = get_user_model().objects.select_related("membership__delegate", "slack_link").order_by("username")
    for user in people_rows:
        membership = getattr(user, "membership", None)
        away = membership if membership and membership.delegate and (membership.away_until or now) > now else None
        people.append(
            {
                "user": user,
                "role": role_of_user(user) if user.is_active else (membership.role if membership else Role.VIEWER),
                "superuser": user.is_superuser,
                "is_me": user.pk == request.user.pk,
                "slack": getattr(getattr(user, "slack_link", None), "slack_user_id", ""),
                # An out-of-office window not yet ended: "away until …" (or "away from …") on the row.
                "away": away,
                "away_now": away is not None and away.away_from <= now,
            }
        )
    capabilities = []
    for capability in Capability.objects.order_by("name"):
        notify = capability.notify if isinstance(capability.notify, dict) else {}
        capabilities.append(
            {
                "capability": capability,
                "from_file": {key for key in FILE_KEYS if key in (capability.from_file or [])},
                "email_on": notify.get("email", True),
                "webhook_on": bool(notify.get("webhook")),
            }
        )
    return {
        "people": people,
        "accounts": list(ServiceAccount.objects.order_by("revoked_at", "name")),
        "capabilities": capabilities,
        "roles": Role.values,
        "approver_roles": APPROVER_ROLES,
        "person_form": person_form or PersonForm(),
        "account_form": account_form or AccountForm(),
        "role": actor.role,
        "nav": "team",
    }


@require_GET
@login_required
def team(request):
    actor = _admin(request)
    return render(request, "holds/team.html", _context(request, actor))


# --- people ----------------------------------------------------------------------------------------


@require_POST
@login_required
@never_cache
def person_add(request):
    actor = _admin(request)
    form = PersonForm(request.POST)
    if not form.is_valid():
        return render(request, "holds/team.html", _context(request, actor, person_form=form), status=422)
    data = form.cleaned_data
    once = data["password"] == "once"
    password = secrets.token_urlsafe(12) if once else None
    user = services.person_add(
        username=data["username"], role=data["role"], password=password, actor=actor, email=data["email"]
    )
    context = {"role": actor.role, "nav": "team", "kind": "person", "name": user.username, "new_role": data["role"]}
    if once:
        context["secret"] = password
        context["secret_label"] = "One-time password"
    else:
        # The link works until the password is set (the token hashes the current password).
        uid = urlsafe_base64_encode(force_bytes(user.pk))
        token = default_token_generator.make_token(user)
        context["secret"] = settings.RQ_PUBLIC_URL + reverse("team-set-password", args=[uid, token])
        context["secret_label"] = "Set-password link"
    return render(request, "holds/team_created.html", context, status=201)


@require_POST
@login_required
def person_role(request, user_id: int):
    actor = _admin(request)
    user = get_object_or_404(get_user_model().objects.select_related("membership"), pk=user_id)
    role = request.POST.get("role", "")
    current = role_of_user(user)
    if user.pk == request.user.pk and role in Role.values and role != current and request.POST.get("confirm") != "1":
        # Your own role: one more deliberate step, since demoting yourself can lock you out of this page.
        context = {"role": actor.role, "nav": "team", "user_id": user.pk, "new_role": role, "current_role": current}
        return render(request, "holds/team_confirm_role.html", context)
    if getattr(user, "membership", None) is None and role in Role.values:
        # People made by createsuperuser have no membership yet; adding them gives them one.
        return _run(
            request,
            lambda: services.person_add(username=user.username, role=role, password=None, actor=actor),
            f"{user.username} is now {role}.",
        )
    return _run(
        request,
        lambda: services.person_set_role(user_id=user.pk, role=role, actor=actor),
        f"{user.username} is now {role}.",
    )


@require_POST
@login_required
def person_active(request, user_id: int):
    actor = _admin(request)
    user = get_object_or_404(get_user_model(), pk=user_id)
    active = request.POST.get("active") == "1"
    return _run(
        request,
        lambda: services.person_set_active(user_id=user.pk, active=active, actor=actor),
        f"{user.username} is {'active again' if active else 'deactivated and signed out'}.",
    )


@require_POST
@login_required
def person_slack(request, user_id: int):
    """The explicit Slack link of a person (docs/channels.md); blank unlinks."""
    actor = _admin(request)
    user = get_object_or_404(get_user_model(), pk=user_id)
    slack_user_id = request.POST.get("slack_user_id", "")
    return _run(
        request,
        lambda: services.person_set_slack(user_id=user.pk, slack_user_id=slack_user_id, actor=actor),
        f"{user.username}'s Slack link is {'set' if slack_user_id.strip() else 'removed'}.",
    )


class SetPasswordView(auth_views.PasswordResetConfirmView):
    """The set-password link of a new person: Django's reset-confirm, with our page."""

    template_name = "holds/team_set_password.html"
    success_url = reverse_lazy("team-password-set")


@require_GET
def password_set(request):
    return render(request, "holds/team_set_password.html", {"done": True})


# --- service accounts -----------------------------------------------------------------------------


@require_POST
@login_required
@never_cache
def account_add(request):
    actor = _admin(request)
    form = AccountForm(request.POST)
    if not form.is_valid():
        return render(request, "holds/team.html", _context(request, actor, account_form=form), status=422)
    account, key = services.service_account_create(
        name=form.cleaned_data["name"], role=form.cleaned_data["role"], actor=actor
    )
    context = {
        "role": actor.role,
        "nav": "team",
        "kind": "account",
        "name": account.name,
        "new_role": account.role,
        "secret": key,
        "secret_label": "Key",
    }
    return render(request, "holds/team_created.html", context, status=201)


@require_POST
@login_required
def account_role(request, account_id: int):
    actor = _admin(request)
    role = request.POST.get("role", "")
    return _run(
        request,
        lambda: services.service_account_set_role(account_id=account_id, role=role, actor=actor),
        f"The service account now has the role {role}.",
    )


@require_POST
@login_required
def account_revoke(request, account_id: int):
    actor = _admin(request)
    return _run(
        request,
        lambda: services.service_account_revoke(account_id=account_id, actor=actor),
        "The key is revoked; it stopped working at once.",
    )


# --- capabilities -----------------------------------------------------------------------------------


@require_POST
@login_required
def capability_approvers(request, capability_id: int):
    actor = _admin(request)
    approvers = request.POST.getlist("approvers")  # the service refuses an empty or unknown role
    # A checkbox sends nothing when unticked, so the form carries a hidden marker that it was shown.
    self_approval = request.POST.get("self_approval") == "1" if "self_approval_shown" in request.POST else None
    return _run(
        request,
        lambda: services.capability_set_approvers(
            capability_id=capability_id, approvers=approvers, self_approval=self_approval, actor=actor
        ),
        lambda capability: f"Approvers of {capability.name} saved.",
    )
