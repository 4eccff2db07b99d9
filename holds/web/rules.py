"""/capabilities/<name>/rules: a capability's rules (edited as YAML, each save a new version, backtested
first), its standing grants with their uses, and revocation. Nothing here reads holds except the
backtest, which runs only when asked: the page costs the same at a thousand decided holds as at a million."""

import yaml
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from .. import policy, services
from ..auth import Actor, actor_for_user
from ..backtest import backtest
from ..errors import Forbidden, Invalid, NotFound
from ..ids import GRANT, parse_public_id
from ..models import Capability, Grant, RuleSet
from ..responses import see_other
from ..rules import check_rules

MAX_RULES_TEXT = 256 * 1024
EXAMPLE = """- id: small-and-sure
  when: item.data.amount < 100 && item.confidence != null && item.confidence > 0.9
  then: approve
- id: over-limit
  when: item.data.amount > 10000
  then: reject
  comment: Over the limit agents may pay; ask finance.
"""


def _reader(request) -> Actor:
    actor = actor_for_user(request.user)
    refusal = policy.may_read(actor)
    if refusal is not None:
        raise PermissionDenied(refusal.message)
    return actor


def _capability(name: str) -> Capability:
    capability = Capability.objects.filter(name=name).first()
    if capability is None:
        raise Http404(f"capability {name} does not exist")
    return capability


def _as_yaml(rules: list) -> str:
    return yaml.safe_dump(rules, sort_keys=False, allow_unicode=True, width=1000) if rules else ""


def _context(actor: Actor, capability: Capability, **extra) -> dict:
    current = services.current_rule_set(capability)
    grants = list(Grant.objects.filter(capability=capability).order_by("-id")[:200])
    versions = (
        RuleSet.objects.filter(capability=capability)
        .order_by("-version")
        .only("version", "saved_by", "created_at")[:10]
    )
    return {
        "capability": capability,
        "current": current,
        "versions": versions,
        "grants": grants,
        "text": _as_yaml(current.rules) if current else "",
        "example": EXAMPLE,
        "may_edit": policy.may_edit_rules(actor) is None,
        "may_revoke": policy.may_revoke_grant(actor, capability) is None,
        "problems": [],
        "result": None,
        "nav": "ops",
        "role": actor.role,
        **extra,
    }


@require_http_methods(["GET", "POST"])
@login_required
def capability_rules(request, name: str):
    """GET: the page. POST with `backtest`: replay the edited rules. POST with `save`: a new version."""
    actor = _reader(request)
    capability = _capability(name)
    if request.method == "GET":
        return render(request, "holds/rules.html", _context(actor, capability))
    text = request.POST.get("rules", "")
    context = _context(actor, capability, text=text)
    if "save" in request.POST and not context["may_edit"]:
        raise PermissionDenied("only an admin may change a capability's rules")
    if len(text) > MAX_RULES_TEXT:
        context["problems"] = [f"The rules are longer than {MAX_RULES_TEXT // 1024} KiB."]
        return render(request, "holds/rules.html", context, status=422)
    try:
        raw = yaml.safe_load(text) if text.strip() else []
    except yaml.YAMLError as exc:
        context["problems"] = [f"Not valid YAML: {exc}"]
        return render(request, "holds/rules.html", context, status=422)
    rules, problems = check_rules(raw)
    if problems:
        context["problems"] = [str(p) for p in problems]
        return render(request, "holds/rules.html", context, status=422)
    context["result"] = result = backtest(capability, rules=rules)
    if "save" not in request.POST:
        return render(request, "holds/rules.html", context)
    try:
        rule_set = services.rules_save(capability=capability, rules=raw, actor=actor)
    except (Forbidden, Invalid) as exc:
        context["problems"] = [exc.message]
        return render(request, "holds/rules.html", context, status=422)
    messages.success(
        request,
        f"Rules v{rule_set.version} saved. On the last 90 days they would have decided {result.decided} item(s);"
        f" people decided {result.differ} of those otherwise.",
    )
    return see_other(reverse("capability-rules", args=[capability.name]))


@require_POST
@login_required
def grant_revoke(request, name: str, grant_id: str):
    actor = _reader(request)
    pk = parse_public_id(grant_id, GRANT)
    if pk is None:
        raise Http404(f"grant {grant_id} does not exist")
    try:
        grant = services.grant_revoke(grant_id=pk, actor=actor)
    except NotFound as exc:
        raise Http404(exc.message) from None
    except Forbidden as exc:
        raise PermissionDenied(exc.message) from None
    messages.success(request, f"Grant {grant.public_id} revoked: it decides nothing from the next ask on.")
    return see_other(reverse("capability-rules", args=[name]) + "#grants")
