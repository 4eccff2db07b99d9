"""Who may do what: one function per question, each answering a refusal (the ServiceError the caller
raises or shows) or None. Every entry point asks here (API, pages, services, notifications, presence,
claims, extend, evals, runs); docs/decisions.md lists which asks what. auth.py only says who is
calling; this module says what that caller may do.

The rule of who may decide a hold has two forms that must agree: `decidable_holds` (a filter on a
queryset, for lists) and `deciders_of` (the people, for e-mail); `decide_refusal` and the questions
built on it ask `decidable_holds` for one hold.
"""

from django.contrib.auth import get_user_model
from django.db.models import BooleanField, Q
from django.db.models.expressions import RawSQL
from django.utils import timezone

from .auth import Actor, role_of_user
from .errors import Conflict, Forbidden, Invalid, NotFound
from .models import Capability, Hold, Role, Run, RunFile, ServiceAccount
from .words import ActorKind

# --- who decides --------------------------------------------------------------------------------


def approves(actor: Actor, capability: Capability) -> bool:
    """The actor's role is one of the capability's approvers (people and service accounts only)."""
    return (
        actor.kind in (ActorKind.USER, ActorKind.ACCOUNT)
        and actor.role is not None
        and actor.role in (capability.approvers or [])
    )


def _chain_sql(column: str, run: str) -> str:
    """`column` of run `run` and of every run above it (a recursive walk up; runs are a few levels deep)."""
    table = Run._meta.db_table
    return (
        "WITH RECURSIVE chain(id, parent_id, starter) AS ("
        f"SELECT r.id, r.parent_id, r.{column} FROM {table} r WHERE r.id = {run}"
        f" UNION ALL SELECT p.id, p.parent_id, p.{column} FROM {table} p JOIN chain ON p.id = chain.parent_id)"
        " SELECT chain.starter FROM chain"
    )


def _started_by_sql(actor: Actor) -> tuple[str, list]:
    """True for a hold whose run, or any ancestor run, this actor started."""
    column = "started_by_user_id" if actor.kind == ActorKind.USER else "started_by_account_id"
    starter = actor.user.pk if actor.kind == ActorKind.USER else actor.account.pk
    return f"EXISTS ({_chain_sql(column, f'{Hold._meta.db_table}.run_id')} WHERE chain.starter = %s)", [starter]


def decidable_holds(actor: Actor, holds, capabilities: list[Capability]):
    """THE rule of who may decide what, as a filter on a queryset of holds: holds of capabilities
    whose approvers include the actor's role, minus, where `self_approval` is false, holds whose run
    (or any ancestor run) the actor started. The queue lists with it and decide_refusal asks it."""
    allowed = [c.pk for c in capabilities if approves(actor, c)]
    holds = holds.filter(capability_id__in=allowed)
    strict = [c.pk for c in capabilities if c.pk in allowed and not c.self_approval]
    if strict:
        started, params = _started_by_sql(actor)
        holds = holds.alias(started_by_actor=RawSQL(started, params, output_field=BooleanField())).exclude(
            capability_id__in=strict, started_by_actor=True
        )
    return holds


def decidable_ids(actor: Actor, holds: list[Hold]) -> set[int]:
    """Which of these holds (capabilities loaded) the actor may decide: decidable_holds' answer, in
    one query, and no query at all when no listed capability forbids self-approval."""
    capabilities = list({h.capability_id: h.capability for h in holds}.values())
    if all(c.self_approval or not approves(actor, c) for c in capabilities):
        return {h.pk for h in holds if approves(actor, h.capability)}
    found = decidable_holds(actor, Hold.objects.filter(pk__in=[h.pk for h in holds]), capabilities)
    return set(found.values_list("pk", flat=True))


def _is_decider(actor: Actor, hold: Hold) -> bool:
    """decidable_holds for one hold (its capability loaded); the query runs only where
    self-approval is off (elsewhere the role is the whole rule)."""
    if not approves(actor, hold.capability):
        return False
    if hold.capability.self_approval:
        return True
    return decidable_holds(actor, Hold.objects.filter(pk=hold.pk), [hold.capability]).exists()


def deciders_of(hold: Hold):
    """The active people who may decide this hold (capability loaded), as a queryset of users: the
    same rule as decidable_holds (role among the approvers, a superuser counting as admin; minus,
    where self-approval is off, whoever started its run or any run above it)."""
    approvers = list(hold.capability.approvers or [])
    by_role = Q(is_superuser=False, membership__role__in=approvers)
    if Role.ADMIN in approvers:
        by_role |= Q(is_superuser=True)
    people = get_user_model().objects.filter(by_role, is_active=True)
    if not hold.capability.self_approval:
        starters = RawSQL(_chain_sql("started_by_user_id", "%s") + " WHERE chain.starter IS NOT NULL", [hold.run_id])
        people = people.exclude(pk__in=starters)
    return people


# --- deciding, and what follows from may decide -----------------------------------------------


def hold_refusal(hold: Hold) -> Conflict:
    """The 409 for a hold that can no longer be decided, with who/when as SPEC asks."""
    if hold.status == Hold.Status.DECIDED:
        return Conflict(
            "this hold was already decided",
            code="already_decided",
            decided_by=hold.decided_by,
            decided_at=hold.decided_at.isoformat() if hold.decided_at else None,
        )
    if hold.status == Hold.Status.CANCELLED:
        return Conflict("this hold was cancelled because its run finished", code="cancelled")
    return Conflict(
        "this hold expired before it was decided",
        code="expired",
        expires_at=hold.expires_at.isoformat() if hold.expires_at else None,
        decided_by=hold.decided_by or None,
        decided_at=hold.decided_at.isoformat() if hold.decided_at else None,
    )


def is_open(hold: Hold) -> bool:
    """Pending and not expired by the application's clock (the writes test the database's)."""
    return hold.status == Hold.Status.PENDING and (hold.expires_at is None or hold.expires_at > timezone.now())


def _closed_refusal(hold: Hold) -> Conflict | None:
    if hold.status != Hold.Status.PENDING:
        return hold_refusal(hold)
    if not is_open(hold):
        return hold_refusal(Hold(status=Hold.Status.EXPIRED, expires_at=hold.expires_at))
    return None


def _role_refusal(actor: Actor, hold: Hold, doing: str) -> Forbidden | None:
    if actor.kind == ActorKind.RUN:
        return Forbidden(f"a run token may read holds but never {doing} them")
    if not _is_decider(actor, hold):
        return Forbidden(f"your role may not decide holds of {hold.capability.name}")
    return None


def decide_refusal(actor: Actor, hold: Hold, fingerprint: str | None = None) -> Forbidden | Conflict | None:
    """Why this actor may not decide this hold now (403 before 409, SPEC's order), or None. The hold
    page asks the same question before its last look. `fingerprint`: the one the browser's form carries."""
    refusal = _role_refusal(actor, hold, "decide") or _closed_refusal(hold)
    if refusal is None and fingerprint is not None and fingerprint != hold.fingerprint:
        refusal = Conflict("this hold changed since it was shown; reload it", code="changed")
    return refusal


def may_decide(actor: Actor, hold: Hold) -> bool:
    """Whether the hold page shows this actor its controls: decide_refusal's 403 part (open or not)."""
    return _role_refusal(actor, hold, "decide") is None


def may_extend(actor: Actor, hold: Hold) -> Forbidden | Conflict | None:
    """Who may decide a hold may give it more time while it is open."""
    refusal = _role_refusal(actor, hold, "extend")
    if refusal is None and not is_open(hold):
        refusal = extend_refusal(hold)
    return refusal


def extend_refusal(hold: Hold) -> Conflict:
    """The 409 of an extension names the hold's status; a pending hold past its expiry counts as expired."""
    status = hold.status if hold.status != Hold.Status.PENDING else Hold.Status.EXPIRED
    refusal = hold_refusal(
        Hold(**{**{f: getattr(hold, f) for f in ("expires_at", "decided_by", "decided_at")}, "status": status})
    )
    refusal.extra["status"] = str(status)
    return refusal


def may_claim(actor: Actor, hold: Hold) -> Forbidden | Conflict | None:
    """A soft claim is a person's who may decide the open hold (never a service account's or a run's)."""
    if actor.kind != ActorKind.USER or _role_refusal(actor, hold, "claim") is not None:
        return Forbidden("only a person who may decide this hold claims it")
    return _closed_refusal(hold)


def may_release(actor: Actor) -> Forbidden | None:
    return None if actor.kind == ActorKind.USER else Forbidden("only a person releases their claim")


def sees_presence(actor: Actor, hold: Hold) -> bool:
    """The presence line and the claim control show to who may claim the hold now."""
    return may_claim(actor, hold) is None


# --- reading ---------------------------------------------------------------------------------


def may_read(actor: Actor) -> Forbidden | None:
    """People and service accounts with a role read holds, runs, the ops page, datasets and experiments."""
    if actor.kind in (ActorKind.USER, ActorKind.ACCOUNT) and actor.role is not None:
        return None
    return Forbidden("your role may not read holds")


def may_read_hold(actor: Actor, hold: Hold) -> Forbidden | NotFound | None:
    """A run token reads its own run's holds (another run's is simply not there); others need a role."""
    if actor.kind == ActorKind.RUN:
        return None if hold.run_id == actor.run.pk else NotFound(f"hold {hold.public_id} does not exist")
    return may_read(actor)


def readable_holds(actor: Actor, holds):
    """may_read_hold as a filter on a queryset (the API's list): a run token's own run's holds."""
    if actor.kind == ActorKind.RUN:
        return holds.filter(run_id=actor.run.pk)
    return holds if may_read(actor) is None else holds.none()


def may_read_run(actor: Actor, run: Run) -> Forbidden | NotFound | None:
    if actor.kind == ActorKind.RUN:
        return None if run.pk == actor.run.pk else NotFound(f"run {run.public_id} does not exist")
    return may_read(actor)


def may_read_run_state(actor: Actor, *, writing: bool) -> Forbidden | None:
    """State may hold what the agent keeps from people (a session, a draft): its token and admins read it."""
    if actor.kind == ActorKind.RUN or (not writing and actor.is_admin):
        return None
    return Forbidden("a run's state is read by its own token and by admins, and written only by its token")


def may_read_file(actor: Actor, run_file: RunFile) -> NotFound | None:
    """A file goes to its run's token, and to those who may see a hold that lists it (SPEC): a file
    that no hold lists stays between the agent and its run. Refused as not found either way."""
    if actor.kind == ActorKind.RUN:
        mine = run_file.run_id == actor.run.pk
    elif may_read(actor) is not None:
        mine = False
    else:
        listed = Hold.objects.filter(run_id=run_file.run_id).values_list("files", flat=True)
        mine = any(run_file.public_id in (files or []) for files in listed)
    return None if mine else NotFound(f"file {run_file.public_id} does not exist")


def may_read_evals(actor: Actor) -> Forbidden | None:
    """Datasets and experiments are as visible as the capability's holds (SPEC "Settled": Evals)."""
    if may_read(actor) is None:
        return None
    return Forbidden("datasets and experiments are read by people and service accounts with a role")


# --- writing ---------------------------------------------------------------------------------


def may_start_run(actor: Actor) -> Forbidden | None:
    """Admins and members (people or service accounts) start runs; a run's token starts child runs;
    the system starts runs for commands. Viewers never."""
    if actor.kind in (ActorKind.RUN, ActorKind.SYSTEM) or actor.role in (Role.ADMIN, Role.MEMBER):
        return None
    return Forbidden("viewers may not start runs")


def may_fail_run(actor: Actor) -> Forbidden | None:
    if actor.kind == ActorKind.RUN:
        return Forbidden("a run token may not fail runs")
    return may_administer(actor, "may fail a run")


def may_upload_file(actor: Actor) -> Forbidden | None:
    return None if actor.kind == ActorKind.RUN else Forbidden("files are uploaded by a run, with its token")


def may_record_evals(actor: Actor, capability: Capability | None) -> Forbidden | None:
    """Approvers of a capability change its datasets and start its experiments. Without a capability
    (before the body names one) only a run token is refused, early (403 before 422)."""
    if actor.kind == ActorKind.RUN:
        return Forbidden("a run token may not change datasets or start experiments")
    if capability is None or approves(actor, capability):
        return None
    return Forbidden(f"only approvers of {capability.name} may change its datasets and start experiments")


def may_administer(actor: Actor, doing: str) -> Forbidden | None:
    """Admins read the audit log, retry deliveries, enable endpoints and fail runs.
    `doing`: the end of "only admins …"."""
    return None if actor.is_admin else Forbidden(f"only admins {doing}")


def may_manage_team(actor: Actor) -> Forbidden | None:
    """Admins manage people, service accounts and approvers; so do the system's commands
    (add_person, create_service_account, sync_capabilities)."""
    if actor.kind == ActorKind.SYSTEM:
        return None
    return may_administer(actor, "manage people, service accounts and approvers")


# --- rules and standing grants (issue 33) -------------------------------------------------------


def may_edit_rules(actor: Actor) -> Forbidden | None:
    """Rules decide for everyone: admins save them; the system's sync_capabilities too (agentos.yaml)."""
    if actor.kind == ActorKind.SYSTEM:
        return None
    if actor.kind in (ActorKind.USER, ActorKind.ACCOUNT) and actor.is_admin:
        return None
    return Forbidden("only an admin may change a capability's rules")


def may_create_grant(actor: Actor, capability: Capability, hold: Hold | None = None) -> Forbidden | None:
    """A grant approves in its author's stead, so never wider than what they may decide: an approver of
    the capability (and a decider of the hold it comes from), on a capability that allows
    self-approval (a grant cannot tell at the ask whether its author started the run)."""
    if not approves(actor, capability):
        return Forbidden(f"your role may not approve holds of {capability.name}, so it may not grant approvals")
    if not capability.self_approval:
        return Forbidden(f"{capability.name} forbids self-approval, so it takes no standing grants")
    if hold is not None and not _is_decider(actor, hold):
        return Forbidden("you may not decide this hold, so you may not grant approvals from it")
    return None


def may_revoke_grant(actor: Actor, capability: Capability) -> Forbidden | None:
    """Any approver of the capability, or an admin."""
    if actor.kind in (ActorKind.USER, ActorKind.ACCOUNT) and (actor.is_admin or approves(actor, capability)):
        return None
    return Forbidden("only an approver of this capability or an admin may revoke its grants")


# --- quorum and separation of duties (issue 34) ---------------------------------------------------


def quorum_of(hold: Hold) -> dict | None:
    """The quorum this hold needs (capability loaded): a rule's at the ask or the capability's, the one
    asking more approvals; None: one decision decides."""
    found = [q for q in (hold.quorum, hold.capability.quorum) if q]
    return max(found, key=lambda q: q["approvals"]) if found else None


def counts_toward_quorum(actor: Actor, hold: Hold) -> bool:
    """An approval counts when its author's role is one the quorum names and also one that approves the
    capability. Whoever started the run or a run above it never counts, whatever self_approval says."""
    quorum = quorum_of(hold)
    if quorum is None or not approves(actor, hold.capability) or actor.role not in quorum["from"]:
        return False
    started, params = _started_by_sql(actor)
    mine = RawSQL(started, params, output_field=BooleanField())
    return not Hold.objects.filter(pk=hold.pk).alias(mine=mine).filter(mine=True).exists()


def may_approve_for_quorum(actor: Actor, hold: Hold) -> Forbidden | None:
    """The 403 of an approval that would not count (SPEC "Quorum": the starter never counts)."""
    if counts_toward_quorum(actor, hold):
        return None
    quorum = quorum_of(hold)
    if approves(actor, hold.capability) and actor.role in quorum["from"]:
        return Forbidden("you started this run (or a run above it), so your approval cannot count toward its quorum")
    return Forbidden(f"this hold needs approvals from {', '.join(quorum['from'])}; your role's do not count")


def quorum_pool(capability: Capability, quorum: dict) -> int:
    """How many active people and service accounts may give an approval that counts (roles in both the
    quorum's `from` and the capability's approvers): a quorum larger than this could never be met."""
    roles = [r for r in quorum["from"] if r in (capability.approvers or [])]
    by_role = Q(is_superuser=False, membership__role__in=roles)
    if Role.ADMIN in roles:
        by_role |= Q(is_superuser=True)
    people = get_user_model().objects.filter(by_role, is_active=True).count()
    accounts = ServiceAccount.objects.filter(role__in=roles, revoked_at__isnull=True).count()
    return people + accounts


def quorum_unmeetable(capability: Capability, quorum: dict) -> str | None:
    """Why this quorum (the capability's own, or a rule's `then`) could never be met on this capability,
    or None. Asked on every save of either: agentos.yaml, the rules page and the API."""
    pool = quorum_pool(capability, quorum)
    if pool < quorum["approvals"]:
        return f"needs {quorum['approvals']} approvals but only {pool} people or service accounts may give one"
    return None


# --- escalation and delegation (issue 34) -----------------------------------------------------------


def acting_for(people, now) -> list[tuple]:
    """(person told, the away person they act for or None) for each of these users: someone out of office
    now (Membership.away_from..away_until) with a delegate is replaced by that delegate, "acting for"
    them. The delegate was checked to decide the same capabilities when the window was set (delegation
    never grants a role); an inactive delegate is skipped and the person is told as usual."""
    out, seen = [], set()
    for person in people:
        membership = getattr(person, "membership", None)
        delegate = membership.delegate if membership is not None else None
        away = (
            delegate is not None
            and delegate.is_active
            and membership.away_from is not None
            and membership.away_from <= now < (membership.away_until or now)
        )
        told, for_whom = (delegate, person) if away else (person, None)
        if (told.pk, for_whom.pk if for_whom else None) not in seen:
            seen.add((told.pk, for_whom.pk if for_whom else None))
            out.append((told, for_whom))
    return out


def escalation_people(hold: Hold, names: list[str]):
    """Whom an escalation step names: roles (admin, member: the active people with it who may decide the
    hold) and usernames (that active person)."""
    roles = [n for n in names if n in (Role.ADMIN, Role.MEMBER)]
    usernames = [n for n in names if n not in roles]
    by_role = deciders_of(hold).filter(
        Q(membership__role__in=roles) | (Q(is_superuser=True) if Role.ADMIN in roles else Q(pk__in=[]))
    )
    named = get_user_model().objects.filter(username__in=usernames, is_active=True)
    return (by_role | named).distinct().select_related("membership__delegate").order_by("username")


def _capabilities_of(role: str | None) -> set[int]:
    if role is None:
        return set()
    return {c.pk for c in Capability.objects.only("pk", "approvers") if role in (c.approvers or [])}


def may_set_away(actor: Actor, person) -> Forbidden | None:
    """A person sets (and clears) their own out-of-office; an admin may set anyone's (the team page).
    Service accounts and runs have no out-of-office of their own."""
    if actor.kind == ActorKind.SYSTEM or (actor.kind in (ActorKind.USER, ActorKind.ACCOUNT) and actor.is_admin):
        return None
    if actor.kind == ActorKind.USER and actor.role is not None and actor.user.pk == person.pk:
        return None
    return Forbidden("a person sets their own out-of-office; admins may set anyone's")


def _stands_in_roles(role: str | None) -> set[str]:
    """The roles whose holders already may decide every capability that `role` may decide."""
    mine = _capabilities_of(role)
    return {other for other in (Role.ADMIN, Role.MEMBER, Role.VIEWER) if mine <= _capabilities_of(other)}


def may_stand_in(person, delegate) -> Invalid | None:
    """The delegate of an out-of-office window: another active person who already may decide every
    capability `person` may. Delegation never grants a role, so anyone else is refused (a 422 on the
    `delegate` the form or body named)."""
    if delegate is None:
        return Invalid([{"field": "delegate", "message": "choose another person who stands in for you"}])
    if delegate.pk == person.pk:
        return Invalid([{"field": "delegate", "message": "the delegate must be another person, not yourself"}])
    if not delegate.is_active:
        return Invalid([{"field": "delegate", "message": f"{delegate.username} is deactivated"}])
    missing = _capabilities_of(role_of_user(person)) - _capabilities_of(role_of_user(delegate))
    if missing:
        names = ", ".join(sorted(Capability.objects.filter(pk__in=missing).values_list("name", flat=True)))
        message = f"{delegate.username} may not decide {names}; delegation never grants a role"
        return Invalid([{"field": "delegate", "message": message}])
    return None


def stand_ins(person):
    """The people who may stand in for `person` (may_stand_in's answer for each, in one query): the
    choices the out-of-office page offers."""
    roles = _stands_in_roles(role_of_user(person))
    by_role = Q(is_superuser=False, membership__role__in=roles)
    if Role.ADMIN in roles:
        by_role |= Q(is_superuser=True)
    return get_user_model().objects.filter(by_role, is_active=True).exclude(pk=person.pk).order_by("username")


def require(refusal: Exception | None) -> None:
    """Raises the answer of one of the questions above, when it is a refusal."""
    if refusal is not None:
        raise refusal
