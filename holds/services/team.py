"""The team: capabilities from agentos.yaml, people, service accounts and who may approve what."""

import re

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ..auth import Actor, new_service_key
from ..config import new_secret
from ..errors import Conflict, Invalid, NotFound
from ..models import AuditKind, Capability, Membership, Role, ServiceAccount, SlackLink
from ..policy import may_manage_team, may_set_away, may_stand_in, quorum_unmeetable, require
from ..words import ActorKind
from .audit import audit
from .rules import current_rule_set, rules_save

# What a capability gets for each key that agentos.yaml leaves out.
DEFAULTS = {
    "version": "1",
    "timeout_seconds": 30.0,
    "input_schema": None,
    "output_schema": None,
    "approvers": [Role.ADMIN.value, Role.MEMBER.value],
    "self_approval": True,
    "notify": {},
    "remind_before": None,
    "confidence_default": None,
    "protocol": "agentos",
    "quorum": None,
    "escalate": None,
}


def capabilities_sync(*, specs, actor: Actor) -> list[tuple[str, bool, str | None]]:
    """Writes capabilities read from agentos.yaml, all or nothing. Safe to run twice.

    Keys the file sets overwrite what admins changed; keys it leaves out fall back to defaults.
    A secret is generated once, when the file has none and the capability is new.
    Returns (name, created, generated secret or None) per capability.
    """
    results = []
    with transaction.atomic():
        for spec in specs:
            values = {**DEFAULTS, **spec.values}
            rules = values.pop("rules", None)
            capability = Capability.objects.select_for_update().filter(name=spec.name).first()
            created = capability is None
            generated = None
            if created:
                capability = Capability(name=spec.name)
                if "secret" not in spec.values:
                    generated = values["secret"] = new_secret()
            before = {key: getattr(capability, key) for key in values} if not created else {}
            for key, value in values.items():
                setattr(capability, key, value)
            capability.from_file = sorted(spec.values)
            unmeetable = capability.quorum and quorum_unmeetable(capability, capability.quorum)
            if unmeetable:
                raise Invalid([{"field": f"{spec.name}.quorum", "message": unmeetable}])
            capability.save()
            changed = sorted(k for k in values if k != "secret" and before.get(k) != values[k]) if before else []
            if created or changed:
                audit(AuditKind.CAPABILITY_SYNCED, actor, capability=spec.name, created=created, changed=changed)
            if rules is not None:
                current = current_rule_set(capability)
                if current is None or current.rules != rules:
                    try:
                        rules_save(capability=capability, rules=rules, actor=actor)
                    except Invalid as exc:  # a rule's quorum the team cannot meet: name the capability
                        errors = [{**e, "field": f"{spec.name}.{e.get('field', 'rules')}"} for e in exc.errors]
                        raise Invalid(errors, exc.message) from None
            results.append((spec.name, created, generated))
    return results


def person_set_away(
    *, actor: Actor, person, away_from=None, away_until=None, delegate: str | None = None, clear: bool = False
) -> Membership:
    """Sets a person's out-of-office window (aware datetimes) and delegate (a username); `clear` ends it.
    Meanwhile notifications and escalations meant for the person go to the delegate, "acting for" them
    (policy.acting_for); no role changes hands.

    Preconditions: the actor is the person or an admin (policy.may_set_away, 403); the window ends after
    it starts and has not ended; the delegate is another active person who already may decide every
    capability the person may (policy.may_stand_in). Every problem is one 422 naming its field, and
    nothing is written. Safe to run twice: the same window is written again (and audited again)."""
    require(may_set_away(actor, person))
    if clear:
        away_from = away_until = None
    with transaction.atomic():
        membership, _ = Membership.objects.select_for_update().get_or_create(user=person)
        stand_in = None if clear else _stand_in_for_window(person, away_from, away_until, delegate)
        membership.away_from, membership.away_until, membership.delegate = away_from, away_until, stand_in
        membership.save(update_fields=["away_from", "away_until", "delegate"])
        if clear:
            audit(AuditKind.PERSON_AWAY_CLEARED, actor, username=person.username)
        else:
            audit(
                AuditKind.PERSON_AWAY_SET,
                actor,
                username=person.username,
                away_from=away_from.isoformat(),
                away_until=away_until.isoformat(),
                delegate=stand_in.username,
            )
    return membership


def _stand_in_for_window(person, away_from, away_until, delegate):
    """The delegate's user for a window that passes every check, else one 422 with each problem."""
    errors = []
    if away_from is None:
        errors.append({"field": "away_from", "message": "required: when the out-of-office starts"})
    if away_until is None:
        errors.append({"field": "away_until", "message": "required: when it ends"})
    elif away_from is not None and away_until <= away_from:
        errors.append({"field": "away_until", "message": "the window must end after it starts"})
    elif away_until <= timezone.now():
        errors.append({"field": "away_until", "message": "this window has already ended"})
    stand_in = None
    if delegate is not None and not isinstance(delegate, str):
        errors.append({"field": "delegate", "message": "a username"})
    else:
        stand_in = get_user_model().objects.filter(username=delegate).first() if delegate else None
        if delegate and stand_in is None:
            errors.append({"field": "delegate", "message": f"nobody has the username {delegate!r}"})
        else:
            refusal = may_stand_in(person, stand_in)
            errors += refusal.errors if refusal is not None else []
    if errors:
        raise Invalid(errors, "the out-of-office was not saved: " + "; ".join(e["message"] for e in errors))
    return stand_in


def person_add(*, username: str, role: str, password: str | None, actor: Actor, email: str = ""):
    _require_admin(actor)
    user_model = get_user_model()
    with transaction.atomic():
        user, created = user_model.objects.get_or_create(username=username, defaults={"email": email})
        if password:
            user.set_password(password)
        user.is_staff = role == Role.ADMIN
        user.save()
        Membership.objects.update_or_create(user=user, defaults={"role": role})
        audit(AuditKind.PERSON_ADDED if created else AuditKind.PERSON_CHANGED, actor, username=username, role=role)
    return user


def service_account_create(*, name: str, role: str, actor: Actor):
    _require_admin(actor)
    key, key_hash, prefix = new_service_key()
    with transaction.atomic():
        account = ServiceAccount.objects.create(name=name, role=role, key_hash=key_hash, key_prefix=prefix)
        audit(AuditKind.SERVICE_ACCOUNT_CREATED, actor, name=name, role=role)
    return account, key


def _require_admin(actor: Actor) -> None:
    require(may_manage_team(actor))


def _refuse_last_admin(user_id: int) -> None:
    """Refuses a change that would leave no active person who is an admin: nobody could manage
    the team again. Locks every admin's membership first, so two admins demoting each other at
    once cannot both pass the count."""
    list(Membership.objects.select_for_update().filter(role=Role.ADMIN).values_list("pk", flat=True))
    people = get_user_model().objects.filter(is_active=True).exclude(pk=user_id)
    if not people.filter(Q(is_superuser=True) | Q(membership__role=Role.ADMIN)).exists():
        raise Conflict(
            "this is the last admin: make someone else an admin first, or nobody could manage the team",
            code="last_admin",
        )


def _is_admin_member(user_id: int) -> bool:
    return Membership.objects.filter(user_id=user_id, role=Role.ADMIN).exists()


def person_set_role(*, user_id: int, role: str, actor: Actor) -> None:
    _require_admin(actor)
    if role not in Role.values:
        raise Invalid([{"field": "role", "message": f"one of {', '.join(Role.values)}"}])
    with transaction.atomic():
        membership = Membership.objects.select_for_update().filter(user_id=user_id).select_related("user").first()
        if membership is None:
            raise NotFound("no such person")
        before = membership.role
        if before == Role.ADMIN and role != Role.ADMIN and membership.user.is_active:
            _refuse_last_admin(user_id)
        membership.role = role
        membership.save(update_fields=["role"])
        membership.user.is_staff = role == Role.ADMIN
        membership.user.save(update_fields=["is_staff"])
        audit(AuditKind.PERSON_ROLE_CHANGED, actor, username=membership.user.username, before=before, after=role)


def person_set_active(*, user_id: int, active: bool, actor: Actor) -> None:
    _require_admin(actor)
    with transaction.atomic():
        user = get_user_model().objects.select_for_update().filter(pk=user_id).first()
        if user is None:
            raise NotFound("no such person")
        if actor.kind == ActorKind.USER and actor.user.pk == user.pk and not active:
            raise Conflict("you cannot deactivate yourself", code="self")
        if not active and user.is_active and (user.is_superuser or _is_admin_member(user.pk)):
            _refuse_last_admin(user.pk)
        before = user.is_active
        user.is_active = active
        user.save(update_fields=["is_active"])
        # No session clean-up needed: Django's auth backend refuses inactive users on their
        # very next request, so a deactivated person is signed out at once.
        audit(
            AuditKind.PERSON_ACTIVATED if active else AuditKind.PERSON_DEACTIVATED,
            actor,
            username=user.username,
            before=before,
            after=active,
        )


def person_set_slack(*, user_id: int, slack_user_id: str, actor: Actor) -> None:
    """Links a person to a Slack user id (blank: unlinks); the link wins over e-mail matching."""
    _require_admin(actor)
    slack_user_id = slack_user_id.strip().upper()
    if slack_user_id and not re.fullmatch(r"[UW][A-Z0-9]{2,39}", slack_user_id):
        raise Invalid([{"field": "slack_user_id", "message": "a Slack member id such as U0123ABCD"}])
    with transaction.atomic():
        user = get_user_model().objects.select_for_update().filter(pk=user_id).first()
        if user is None:
            raise NotFound("no such person")
        before = SlackLink.objects.filter(user=user).values_list("slack_user_id", flat=True).first() or ""
        taken = SlackLink.objects.filter(slack_user_id=slack_user_id).exclude(user=user).exists()
        if slack_user_id and taken:
            raise Conflict("this Slack user is linked to another person", code="slack_taken")
        if slack_user_id:
            SlackLink.objects.update_or_create(user=user, defaults={"slack_user_id": slack_user_id})
        else:
            SlackLink.objects.filter(user=user).delete()
        audit(AuditKind.PERSON_CHANGED, actor, username=user.username, slack_before=before, slack_after=slack_user_id)


def service_account_set_role(*, account_id: int, role: str, actor: Actor) -> None:
    _require_admin(actor)
    if role not in Role.values:
        raise Invalid([{"field": "role", "message": f"one of {', '.join(Role.values)}"}])
    with transaction.atomic():
        account = ServiceAccount.objects.select_for_update().filter(pk=account_id).first()
        if account is None:
            raise NotFound("no such service account")
        before, account.role = account.role, role
        account.save(update_fields=["role"])
        audit(AuditKind.SERVICE_ACCOUNT_ROLE_CHANGED, actor, name=account.name, before=before, after=role)


def service_account_revoke(*, account_id: int, actor: Actor) -> None:
    _require_admin(actor)
    with transaction.atomic():
        won = ServiceAccount.objects.filter(pk=account_id, revoked_at__isnull=True).update(revoked_at=timezone.now())
        account = ServiceAccount.objects.filter(pk=account_id).first()
        if account is None:
            raise NotFound("no such service account")
        if won != 1:
            raise Conflict(f"{account.name} is already revoked", code="revoked")
        audit(AuditKind.SERVICE_ACCOUNT_REVOKED, actor, name=account.name)


def capability_set_approvers(*, capability_id: int, approvers: list[str], self_approval: bool | None, actor: Actor):
    _require_admin(actor)
    if not approvers or any(a not in (Role.ADMIN, Role.MEMBER) for a in approvers):
        raise Invalid([{"field": "approvers", "message": "a non-empty list of roles from admin, member"}])
    with transaction.atomic():
        capability = Capability.objects.select_for_update().filter(pk=capability_id).first()
        if capability is None:
            raise NotFound("no such capability")
        before = {"approvers": capability.approvers, "self_approval": capability.self_approval}
        capability.approvers = list(dict.fromkeys(approvers))
        if self_approval is not None:
            capability.self_approval = self_approval
        capability.save(update_fields=["approvers", "self_approval", "updated_at"])
        after = {"approvers": capability.approvers, "self_approval": capability.self_approval}
        audit(AuditKind.CAPABILITY_APPROVERS_CHANGED, actor, capability=capability.name, before=before, after=after)
    return capability
