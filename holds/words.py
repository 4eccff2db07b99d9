"""The domain's words, each defined once: what a reviewer does with an item, the kinds of audit
event, what a delivery attempt came to, and who an actor is. Labels come from `.label`; SQL renders
them with services.sql.lit; pydantic schemas and template tags take them from here. A test
(tests/test_words.py) fails on a quoted action, audit kind or delivery result anywhere else in holds/.
"""

from enum import StrEnum

from django.db import models


class Action(models.TextChoices):
    """What a reviewer does with one item."""

    APPROVE = "approve", "Approve"
    EDIT = "edit", "Edit"
    REJECT = "reject", "Reject"
    FEEDBACK = "feedback", "Feedback"


class AuditKind(models.TextChoices):
    """Every kind of audit event; the audit page's filter lists these labels."""

    HOLD_ASKED = "hold.asked", "hold asked"
    HOLD_DECIDED = "hold.decided", "hold decided"
    HOLD_APPROVED = "hold.approved", "hold approved (quorum not yet met)"
    HOLD_ESCALATED = "hold.escalated", "hold escalated"
    HOLD_EXPIRED = "hold.expired", "hold expired"
    HOLD_EXTENDED = "hold.extended", "hold extended"
    HOLD_CLAIMED = "hold.claimed", "hold claimed"
    HOLD_RELEASED = "hold.released", "hold claim released"
    HOLD_SEEN = "hold.seen", "hold seen"
    RUN_STARTED = "run.started", "run started"
    RUN_HELD = "run.held", "run held"
    RUN_COMPLETED = "run.completed", "run completed"
    RUN_FAILED = "run.failed", "run failed"
    INVOCATION_ATTEMPT = "invocation.attempt", "delivery attempt"
    INVOCATION_RETRIED = "invocation.retried", "delivery retried"
    FILE_UPLOADED = "file.uploaded", "file uploaded"
    CAPABILITY_SYNCED = "capability.synced", "capability synced"
    CAPABILITY_APPROVERS_CHANGED = "capability.approvers_changed", "approvers changed"
    CAPABILITY_ENDPOINT_DISABLED = "capability.endpoint_disabled", "endpoint disabled (410)"
    CAPABILITY_ENDPOINT_ENABLED = "capability.endpoint_enabled", "endpoint enabled"
    CAPABILITY_ENDPOINT_STALLED = "capability.endpoint_stalled", "endpoint stalled"
    CAPABILITY_ENDPOINT_ANSWERING = "capability.endpoint_answering", "endpoint answering again"
    PERSON_ADDED = "person.added", "person added"
    PERSON_CHANGED = "person.changed", "person changed"
    PERSON_ROLE_CHANGED = "person.role_changed", "person's role changed"
    PERSON_ACTIVATED = "person.activated", "person activated"
    PERSON_DEACTIVATED = "person.deactivated", "person deactivated"
    PERSON_AWAY_SET = "person.away_set", "out of office set"
    PERSON_AWAY_CLEARED = "person.away_cleared", "out of office cleared"
    SERVICE_ACCOUNT_CREATED = "service_account.created", "service account created"
    SERVICE_ACCOUNT_ROLE_CHANGED = "service_account.role_changed", "service account's role changed"
    SERVICE_ACCOUNT_REVOKED = "service_account.revoked", "service account revoked"
    RUN_ASKED_FOR_HUMAN = "run.asked_for_human", "eval run asked for a person"
    RUN_STALE_ANSWER = "run.stale_answer", "answer for a finished run ignored"
    DATASET_CREATED = "dataset.created", "dataset created"
    DATASET_ITEM_ADDED = "dataset.item_added", "dataset item added"
    DATASET_ITEM_DELETED = "dataset.item_deleted", "dataset item deleted"
    EXPERIMENT_STARTED = "experiment.started", "experiment started"
    EXPERIMENT_FINISHED = "experiment.finished", "experiment finished"
    RULES_SAVED = "rules.saved", "rules saved"
    GRANT_CREATED = "grant.created", "grant created"
    GRANT_REVOKED = "grant.revoked", "grant revoked"
    GRANT_USED = "grant.used", "grant used"
    HOLD_DECIDED_BY_RULE = "hold.decided_by_rule", "items decided by rule"
    SLACK_REFUSED = "slack.refused", "Slack interaction refused"


class OutcomeKind(StrEnum):
    """How holds/delivery.py classifies one HTTP attempt (services.Outcome.kind)."""

    ANSWER = "answer"
    RETRY = "retry"
    FATAL = "fatal"
    GONE = "gone"


class DeliveryResult(models.TextChoices):
    """What one delivery attempt came to: the worker's return value and DeliveryAttempt.outcome."""

    ANSWERED = "answered", "answered"
    RETRY = "retry", "will retry"
    FAILED = "failed", "failed"
    UNDELIVERABLE = "undeliverable", "undeliverable"
    PARKED = "parked", "parked"
    # An A2A agent took the message and goes on working: the invocation waits for its push or poll.
    WORKING = "working", "working"
    # Not recorded as attempts: a stale worker's late answer, a deferral, nothing due.
    STALE = "stale", "stale"
    DEFERRED = "deferred", "deferred"
    NOT_DUE = "not-due", "not due"


# The outcomes an attempt is counted under on the ops page and /metrics.
ATTEMPT_OUTCOMES = (
    DeliveryResult.ANSWERED,
    DeliveryResult.RETRY,
    DeliveryResult.FAILED,
    DeliveryResult.UNDELIVERABLE,
    DeliveryResult.PARKED,
)


class ActorKind(StrEnum):
    """Who calls a service function (auth.Actor.kind)."""

    USER = "user"
    ACCOUNT = "account"
    RUN = "run"
    SYSTEM = "system"


class SlackRequestRefusal(StrEnum):
    """Why /slack/interactions refused a request before anyone was known to have sent it (the reason
    of its bounded slack.refused events: a fixed set, so that the audit log holds no sender's text)."""

    UNSIGNED = "unsigned request"
    STALE = "stale timestamp"
    FORGED = "forged signature"
    REPLAYED = "replayed request"


def in_templates(request) -> dict:
    """A context processor: templates compare with `Action.EDIT`, never a quoted word."""
    return {"Action": Action}
