"""The audit log in words: one short sentence per event, from its kind and data, for the audit page's
"What" column and a hold's timeline (the JSON itself stays one click away, and in the CSV).

Data is whatever the event was written with; an old row or an unexpected value reads as the kind's
label rather than failing the page.
"""

from collections import Counter
from collections.abc import Callable

from ..models import AuditEvent, AuditKind
from ..words import Action

# What a decision did to its items, in the past tense ("2 approved, 1 rejected").
DONE = {Action.APPROVE: "approved", Action.EDIT: "edited", Action.REJECT: "rejected", Action.FEEDBACK: "sent back"}


def _text(value, limit: int = 120) -> str:
    text = value if isinstance(value, str) else "" if value is None else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _n(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def span(seconds) -> str:
    """A duration as people say it: 90 s, 15 min, 2 h, 3 days."""
    seconds = _n(seconds)
    if seconds is None:
        return "?"
    for size, unit in ((86400, "day"), (3600, "h"), (60, "min")):
        # In a unit when it is exact or at least two of them: 90 s, 90 min, 36 h, 2 days.
        if (seconds >= size and seconds % size == 0) or seconds >= size * 2:
            n = round(seconds / size)
            return _plural(n, unit) if unit == "day" else f"{n} {unit}"
    return f"{seconds} s"


def _actions(actions) -> str:
    if not isinstance(actions, dict) or not actions:
        return "no items"
    counts = Counter(DONE.get(a, _text(a, 20)) for a in actions.values())
    return ", ".join(f"{n} {word}" for word, n in counts.most_common())


def _when(value) -> str:
    # Stored as ISO 8601 UTC; shown to the minute, as the page's times.
    return _text(value, 40)[:16].replace("T", " ") + " UTC" if isinstance(value, str) and value else "?"


def _asked(d) -> str:
    items = _n(d.get("items"))
    sentence = f"Asked “{_text(d.get('intent'))}”"
    if items is not None:
        sentence += f": {_plural(items, 'item')}"
    expires = _n(d.get("expires_in"))
    return sentence + (f", to decide within {span(expires)}" if expires else ", no expiry")


def _decided(d) -> str:
    sentence = f"Decided: {_actions(d.get('actions'))}"
    if d.get("by_confidence"):
        sentence += f" ({_plural(len(d['by_confidence']), 'item')} approved by confidence)"
    comment = _text(d.get("comment"), 80)
    return sentence + (f"; comment “{comment}”" if comment else "")


def _escalated(d) -> str:
    notified = d.get("notified") if isinstance(d.get("notified"), list) else []
    step = _n(d.get("step"))
    if notified == ["expire"]:
        return f"Escalation step {step}: set to expire now"
    told = ", ".join(_text(n, 60) for n in notified) or "nobody (no one to tell)"
    return f"Escalation step {step}: reminded {told}"


def _extended(d) -> str:
    sentence = f"Extended by {span(d.get('expires_in'))}, now due {_when(d.get('expires_at'))}"
    reason = _text(d.get("reason"), 80)
    return sentence + (f": “{reason}”" if reason else "")


def _attempt(d) -> str:
    code = _n(d.get("status_code"))
    sentence = f"Delivery attempt {_n(d.get('attempt')) or '?'}: {_text(d.get('result'), 30) or '?'}"
    sentence += f" (HTTP {code})" if code else ""
    error = _text(d.get("error"), 80)
    return sentence + (f", {error}" if error else "")


def _change(d, what: str) -> str:
    return f"{what}: {_text(d.get('before'), 40)} → {_text(d.get('after'), 40)}"


def _person(d) -> str:
    if "slack_after" in d:
        return f"{_text(d.get('username'))}: Slack user set to {_text(d.get('slack_after'), 40) or 'none'}"
    return f"{_text(d.get('username'))}, role {_text(d.get('role'), 20)}"


SENTENCES: dict[str, Callable[[dict], str]] = {
    AuditKind.HOLD_ASKED: _asked,
    AuditKind.HOLD_DECIDED: _decided,
    AuditKind.HOLD_DECIDED_BY_RULE: lambda d: f"Decided by rule: {_actions(d.get('actions'))}",
    AuditKind.HOLD_APPROVED: lambda d: (
        f"Approved; {_plural(_n(d.get('approvals')) or 0, 'approval')} of the same data so far, quorum not yet met"
    ),
    AuditKind.HOLD_ESCALATED: _escalated,
    AuditKind.HOLD_EXPIRED: lambda d: f"Expired, due {_when(d.get('expires_at'))}",
    AuditKind.HOLD_EXTENDED: _extended,
    AuditKind.HOLD_CLAIMED: lambda d: f"Claimed (“I'm on it”) for {_n(d.get('minutes')) or '?'} min",
    AuditKind.HOLD_RELEASED: lambda d: "Claim released",
    AuditKind.HOLD_SEEN: lambda d: "Seen: had the hold open",
    AuditKind.GRANT_USED: lambda d: (
        f"Grant {_text(d.get('grant'), 40)} decided {_plural(len(d.get('items') or []), 'item')}"
    ),
    AuditKind.RUN_STARTED: lambda d: (
        f"Run of {_text(d.get('capability'), 80)} started"
        + (f" for experiment {_text(d.get('experiment'), 40)}" if d.get("experiment") else "")
    ),
    AuditKind.RUN_HELD: lambda d: "Run paused for a person's decision",
    AuditKind.INVOCATION_ATTEMPT: _attempt,
    AuditKind.INVOCATION_RETRIED: lambda d: "Delivery sent again by an admin, on a fresh schedule",
    AuditKind.RUN_STALE_ANSWER: lambda d: f"An answer for a run already {_text(d.get('run_status'), 30)} was ignored",
    AuditKind.FILE_UPLOADED: lambda d: f"File “{_text(d.get('name'), 80)}” uploaded as {_text(d.get('file'), 30)}",
    AuditKind.CAPABILITY_SYNCED: lambda d: (
        f"Capability {_text(d.get('capability'), 80)} {'created' if d.get('created') else 'updated'} from agentos.yaml"
    ),
    AuditKind.CAPABILITY_APPROVERS_CHANGED: lambda d: _change(d, f"Approvers of {_text(d.get('capability'), 80)}"),
    AuditKind.CAPABILITY_ENDPOINT_DISABLED: lambda d: (
        f"Endpoint of {_text(d.get('capability'), 80)} disabled: {_text(d.get('reason'), 80)}"
    ),
    AuditKind.CAPABILITY_ENDPOINT_ENABLED: lambda d: (
        f"Endpoint of {_text(d.get('capability'), 80)} enabled; "
        f"{_plural(_n(d.get('released')) or 0, 'parked delivery')} due again"
    ),
    AuditKind.PERSON_ADDED: lambda d: f"Person added: {_person(d)}",
    AuditKind.PERSON_CHANGED: lambda d: f"Person changed: {_person(d)}",
    AuditKind.PERSON_ROLE_CHANGED: lambda d: _change(d, f"Role of {_text(d.get('username'))}"),
    AuditKind.PERSON_ACTIVATED: lambda d: f"{_text(d.get('username'))} may sign in again",
    AuditKind.PERSON_DEACTIVATED: lambda d: f"{_text(d.get('username'))} deactivated",
    AuditKind.PERSON_AWAY_SET: lambda d: (
        f"{_text(d.get('username'))} out of office {_when(d.get('away_from'))} to {_when(d.get('away_until'))}, "
        f"{_text(d.get('delegate')) or 'nobody'} stands in"
    ),
    AuditKind.PERSON_AWAY_CLEARED: lambda d: f"{_text(d.get('username'))} back in office",
    AuditKind.SERVICE_ACCOUNT_CREATED: lambda d: (
        f"Service account {_text(d.get('name'))} created, role {_text(d.get('role'), 20)}"
    ),
    AuditKind.SERVICE_ACCOUNT_ROLE_CHANGED: lambda d: _change(d, f"Role of service account {_text(d.get('name'))}"),
    AuditKind.SERVICE_ACCOUNT_REVOKED: lambda d: f"Service account {_text(d.get('name'))} revoked",
    AuditKind.DATASET_CREATED: lambda d: (
        f"Dataset “{_text(d.get('name'), 80)}” ({_text(d.get('dataset'), 30)}) created "
        f"for {_text(d.get('capability'), 80)}"
    ),
    AuditKind.DATASET_ITEM_ADDED: lambda d: f"Item {_text(d.get('item'), 30)} added to {_text(d.get('dataset'), 30)}",
    AuditKind.DATASET_ITEM_DELETED: lambda d: (
        f"Item {_text(d.get('item'), 30)} deleted from {_text(d.get('dataset'), 30)}"
    ),
    AuditKind.EXPERIMENT_STARTED: lambda d: (
        f"Experiment {_text(d.get('experiment'), 30)} started on {_text(d.get('dataset'), 30)}: "
        f"{_plural(_n(d.get('runs')) or 0, 'run')}"
    ),
    AuditKind.RULES_SAVED: lambda d: (
        f"Rules of {_text(d.get('capability'), 80)} saved as version {_n(d.get('version')) or '?'}: "
        f"{_plural(len(d.get('rules') or []), 'rule')}"
    ),
    AuditKind.GRANT_CREATED: lambda d: (
        f"Grant {_text(d.get('grant'), 40)} created for {_text(d.get('capability'), 80)}"
    ),
    AuditKind.GRANT_REVOKED: lambda d: f"Grant {_text(d.get('grant'), 40)} revoked",
}


def what(event: AuditEvent) -> str:
    """The event in one sentence; the kind's label when its data does not read as expected."""
    label = AuditKind(event.kind).label if event.kind in AuditKind.values else event.kind
    sentence = SENTENCES.get(event.kind)
    data = event.data if isinstance(event.data, dict) else {}
    if sentence is None:
        return label[:1].upper() + label[1:]
    try:
        return sentence(data)
    except (TypeError, ValueError, AttributeError):
        return label[:1].upper() + label[1:]
