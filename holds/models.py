"""Data and invariants of Review Queue.

Statuses are TextChoices; every invariant that can be a database constraint is one, so that a
bug in a code path cannot create a second open hold or a second invocation with the same seq.
Public ids (`r_<n>`, `h_<n>`, `f_<n>`) are derived from integer keys; invocation ids are random
because they double as the Standard Webhooks `webhook-id`.
"""

import json
import secrets
import time
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q

from .ids import DATASET, DATASET_ITEM, EXPERIMENT, FILE, GRANT, HOLD, RUN, public_id
from .words import Action, AuditKind  # noqa: F401  (defined in words.py, imported from here too)


class ExactJSONField(models.TextField):
    """JSON kept as the text we wrote, so numbers read back with their type and value.

    PostgreSQL's jsonb rewrites 1e300 as a 301-digit integer; agents' values must reach the
    reviewer and the resume exactly as sent (SPEC: integers exact, other numbers float64).
    """

    def from_db_value(self, value, expression, connection):
        return None if value is None else json.loads(value)

    def to_python(self, value):
        return json.loads(value) if isinstance(value, str) else value

    def get_prep_value(self, value):
        if value is None:
            return None
        return json.dumps(value, ensure_ascii=False, allow_nan=False)


class Role(models.TextChoices):
    ADMIN = "admin"
    MEMBER = "member"
    VIEWER = "viewer"


class RunStatus(models.TextChoices):
    RUNNING = "running"
    HELD = "held"
    COMPLETED = "completed"
    FAILED = "failed"
    # Final, eval runs only: the agent asked for a person, and an eval run never reaches one.
    ASKED_FOR_HUMAN = "asked_for_human"


FINISHED_RUN = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.ASKED_FOR_HUMAN)


class ExperimentStatus(models.TextChoices):
    RUNNING = "running"
    FINISHED = "finished"


class HoldStatus(models.TextChoices):
    PENDING = "pending"
    DECIDED = "decided"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class InvocationKind(models.TextChoices):
    START = "start"
    RESUME = "resume"


class InvocationStatus(models.TextChoices):
    # A resume decided while its asking invocation is still answering waits for that answer.
    WAITING = "waiting"
    PENDING = "pending"  # due at next_attempt_at
    DELIVERING = "delivering"  # claimed by a worker until lease_until
    ANSWERED = "answered"
    FAILED = "failed"  # a non-retryable answer; the run failed
    UNDELIVERABLE = "undeliverable"  # retries exhausted; an admin may retry
    PARKED = "parked"  # the endpoint answered 410 or is disabled
    CANCELLED = "cancelled"  # the run finished before it was sent


class Protocol(models.TextChoices):
    """How Review Queue talks to a capability's agent (agentos.yaml's `protocol`)."""

    AGENTOS = "agentos", "agentos invoke"
    AG_UI = "ag-ui", "AG-UI"
    A2A = "a2a", "A2A"


class Capability(models.Model):
    name = models.CharField(max_length=100, unique=True)
    endpoint = models.URLField(max_length=500)
    # agentos: POST {endpoint}/invoke (SPEC); ag-ui and a2a: holds/protocols/.
    protocol = models.CharField(max_length=10, choices=Protocol.choices, default=Protocol.AGENTOS)
    version = models.CharField(max_length=50, default="1")
    timeout_seconds = models.FloatField(default=30)
    input_schema = models.JSONField(null=True, blank=True)
    output_schema = models.JSONField(null=True, blank=True)
    approvers = models.JSONField(default=list)
    self_approval = models.BooleanField(default=True)
    secret = models.CharField(max_length=200)
    notify = models.JSONField(default=dict, blank=True)
    # agentos.yaml's remind_before: approvers hear once when a pending hold's time left falls below it;
    # NULL keeps the default rule (config.REMIND_BEFORE, for holds that lived long enough).
    remind_before = models.DurationField(null=True, blank=True)
    # agentos.yaml's confidence_default: the confidence of an item that states none, for approve by
    # confidence; NULL: such items stay undecided.
    confidence_default = models.FloatField(null=True, blank=True)
    # Keys whose value the last sync_capabilities took from agentos.yaml (the team page says so).
    from_file = models.JSONField(default=list, blank=True)
    # Set when the agent answered 410 Gone: nothing is sent until an admin enables it again.
    endpoint_disabled_at = models.DateTimeField(null=True, blank=True)
    # Set when an attempt got no answer within the timeout, cleared by the next answer of any kind.
    # Meanwhile one delivery at a time tries the endpoint (the probe, leased until probe_until) and
    # the others wait in the database instead of each holding a worker thread for the whole timeout.
    endpoint_stalled_at = models.DateTimeField(null=True, blank=True)
    endpoint_probe_until = models.DateTimeField(null=True, blank=True)
    # The current RuleSet's version (0: no rules) and a counter bumped whenever a grant is created or
    # revoked (0: never had one). The ask reads both with its hold's row, so that a capability without
    # rules or grants costs the ask nothing, and a process's compiled rules are known to be current.
    rules_version = models.PositiveIntegerField(default=0)
    grants_version = models.PositiveIntegerField(default=0)
    # Delivery attempts in a row that got no HTTP answer or a 5xx, and when the first of them was;
    # both cleared by the next answer below 500. endpoint_failing() turns them into ops' label.
    endpoint_failures = models.PositiveIntegerField(default=0)
    endpoint_failing_since = models.DateTimeField(null=True, blank=True)
    # agentos.yaml's quorum: {"approvals": N, "from": [roles]}; NULL: one decision decides (SPEC "Quorum").
    quorum = models.JSONField(null=True, blank=True)
    # agentos.yaml's escalate: [{"after": seconds, "notify": [roles or usernames]} | {"after", "expire": true}].
    escalate = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "capabilities"

    def __str__(self) -> str:
        return self.name

    def endpoint_failing(self, now) -> bool:
        """Ops calls the endpoint failing after RQ_ENDPOINT_FAILING_AFTER failed attempts in a row,
        or once failures have lasted RQ_ENDPOINT_FAILING_MINUTES (a slow retry schedule tries
        rarely), well before the retries run out and a resume is undeliverable (about 46 h)."""
        if self.endpoint_disabled_at is not None or not self.endpoint_failures:
            return False
        since = self.endpoint_failing_since
        lasted = since is not None and (now - since).total_seconds() >= settings.RQ_ENDPOINT_FAILING_MINUTES * 60
        return self.endpoint_failures >= settings.RQ_ENDPOINT_FAILING_AFTER or lasted


class Membership(models.Model):
    """A person's role. A superuser counts as admin whatever this says."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="membership")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    # Out of office (issue 34 delegation): between these times notifications and escalations meant for
    # this person go to `delegate`, who already may decide every capability this person may (never a role).
    away_from = models.DateTimeField(null=True, blank=True)
    away_until = models.DateTimeField(null=True, blank=True)
    delegate = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )

    def __str__(self) -> str:
        return f"{self.user} ({self.role})"

    @property
    def is_away_now(self) -> bool:
        """Within an out-of-office window with a delegate (the top bar's "away" mark)."""
        if self.away_from is None or self.away_until is None or self.delegate_id is None:
            return False
        return self.away_from <= datetime.now(UTC) < self.away_until


class ServiceAccount(models.Model):
    name = models.CharField(max_length=100, unique=True)
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    # sha256 of the key; the key itself is shown once and never stored.
    key_hash = models.CharField(max_length=64, unique=True)
    key_prefix = models.CharField(max_length=16)
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Run(models.Model):
    Status = RunStatus

    capability = models.ForeignKey(Capability, on_delete=models.PROTECT, related_name="runs")
    # A run keeps the version and endpoint it started with; its resumes use them.
    version = models.CharField(max_length=50)
    endpoint = models.URLField(max_length=500)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.RUNNING)
    seq = models.PositiveIntegerField(default=0)
    input = ExactJSONField(default=dict)
    output = ExactJSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    started_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    started_by_account = models.ForeignKey(
        ServiceAccount, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Set on eval runs (an experiment's, and the children they start): they never reach a person.
    experiment = models.ForeignKey(
        "Experiment", null=True, blank=True, on_delete=models.PROTECT, related_name="runs", db_index=False
    )
    dataset_item = models.ForeignKey(
        "DatasetItem", null=True, blank=True, on_delete=models.PROTECT, related_name="+", db_index=False
    )

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(status__in=RunStatus.values), name="run_status_valid"),
            models.CheckConstraint(
                condition=~Q(status="asked_for_human") | Q(experiment__isnull=False), name="asked_for_human_is_eval"
            ),
        ]
        indexes = [
            # An experiment's runs (its page and its completion); ordinary runs stay out of the index.
            models.Index(fields=["experiment", "id"], condition=Q(experiment__isnull=False), name="run_by_experiment"),
        ]

    def __str__(self) -> str:
        return self.public_id

    @property
    def public_id(self) -> str:
        return public_id(RUN, self.pk)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_RUN

    @property
    def is_eval(self) -> bool:
        return self.experiment_id is not None

    @property
    def started_by_label(self) -> str:
        if self.started_by_user_id:
            return self.started_by_user.get_username()
        if self.started_by_account_id:
            return f"service account {self.started_by_account.name}"
        if self.parent_id:
            return f"run {public_id(RUN, self.parent_id)}"
        # Started by the service itself (a management command such as the demo seed).
        return "system"


class IdempotencyKey(models.Model):
    """`Idempotency-Key` of POST /v0/runs; the caller is `run:<id>`, `account:<id>` or `user:<id>`."""

    caller = models.CharField(max_length=100)
    key = models.CharField(max_length=200)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["caller", "key"], name="idempotency_key_unique")]

    def __str__(self) -> str:
        return f"{self.caller} {self.key}"


# An invocation id is `inv_`, its creation time in milliseconds (12 hex digits) and 8 random bytes.
# Time first, so that invocations made close in time sit close in every index keyed by their id: the
# primary key, and the holds' index on their asking invocation. With wholly random ids, a sweep of
# 1,000 holds touched about 1,000 leaf pages of each (a full page image in the WAL for each after a
# checkpoint); the random part keeps the ids unique and unguessable among those of one millisecond.
INVOCATION_ID_RANDOM_BYTES = 8


def new_invocation_id() -> str:
    return invocation_id_at(time.time_ns() // 1_000_000, secrets.token_hex(INVOCATION_ID_RANDOM_BYTES))


def invocation_id_at(at_ms: int, random_hex: str) -> str:
    return f"inv_{at_ms:012x}{random_hex}"


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def milliseconds(at: datetime) -> int:
    """Whole milliseconds since the epoch, in integers: through float seconds, a time like
    .123000 may come out as 122.99999 ms and lose one."""
    return (at - EPOCH) // timedelta(milliseconds=1)


class Invocation(models.Model):
    """One call of the agent for a run, and its outbox row: the truth about its delivery."""

    Kind = InvocationKind
    Status = InvocationStatus

    id = models.CharField(primary_key=True, max_length=40, default=new_invocation_id, editable=False)
    # No index of its own: the unique (run, seq) index serves lookups by run.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="invocations", db_index=False)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    seq = models.PositiveIntegerField()
    status = models.CharField(max_length=15, choices=Status.choices, default=Status.PENDING)
    # sha256 of the run token; the token names its invocation, so this needs no index.
    token_hash = models.CharField(max_length=64)
    # The `resume` object of the body (null for a start), fixed when the decision is stored.
    resume = ExactJSONField(null=True, blank=True)
    # No index of its own: the unique index on hold (one resume per hold) serves lookups by hold.
    hold = models.ForeignKey(
        "Hold", null=True, blank=True, on_delete=models.CASCADE, related_name="resumes", db_index=False
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    first_sent_at = models.DateTimeField(null=True, blank=True)
    answered_at = models.DateTimeField(null=True, blank=True)
    answer = ExactJSONField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="invocation_seq_unique_per_run"),
            # Exactly one resume per hold, whoever creates it (a person or the sweep).
            # Start invocations have no hold, and NULLs never collide in a unique index.
            models.UniqueConstraint(fields=["hold"], name="one_resume_per_hold"),
            models.CheckConstraint(condition=Q(status__in=InvocationStatus.values), name="invocation_status_valid"),
            models.CheckConstraint(condition=Q(kind__in=InvocationKind.values), name="invocation_kind_valid"),
        ]
        indexes = [
            # The relay: due outbox rows only; answered rows (nearly all) stay out of the index.
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status__in=["pending", "delivering"]),
                name="invocation_outbox_due",
            ),
            # The ops page: undeliverable and parked invocations.
            models.Index(
                fields=["status", "created_at"],
                condition=Q(status__in=["undeliverable", "parked"]),
                name="invocation_needs_ops",
            ),
        ]

    def __str__(self) -> str:
        return self.id


class DeliveryAttempt(models.Model):
    invocation = models.ForeignKey(Invocation, on_delete=models.CASCADE, related_name="delivery_attempts")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    latency_ms = models.PositiveIntegerField(default=0)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    outcome = models.CharField(max_length=20)  # answered / retry / failed / undeliverable / parked
    error = models.CharField(max_length=500, blank=True, default="")

    def __str__(self) -> str:
        return f"{self.invocation_id} #{self.number} {self.outcome}"


class Hold(models.Model):
    Status = HoldStatus

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="holds")
    # The invocation that asked; a resume is not sent before it has answered. An invocation asks at most
    # one hold (the unique constraint below is also its index).
    invocation = models.ForeignKey(Invocation, on_delete=models.CASCADE, related_name="asked_holds", db_index=False)
    # Copied from the run so that the queue filters and sorts without a join.
    capability = models.ForeignKey(Capability, on_delete=models.PROTECT, related_name="holds")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    intent = models.CharField(max_length=500)
    actions = models.JSONField()
    details = models.TextField(blank=True, default="")
    # `details` as sanitised HTML, rendered once at the ask (holds/markup.py); NULL: over the rendering
    # budget, and the page shows the text escaped as plain text.
    details_html = models.TextField(null=True, blank=True)
    files = models.JSONField(default=list, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Derived once at ask time so that the queue sorts and shows them without touching items.
    item_count = models.PositiveIntegerField()
    min_confidence = models.FloatField(null=True, blank=True)
    search_text = models.TextField(blank=True, default="")
    fingerprint = models.CharField(max_length=64)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.CharField(max_length=200, blank=True, default="")
    # Unindexed on purpose: every extra index is written again when a hold is decided or expired.
    decided_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    decided_by_account = models.ForeignKey(
        ServiceAccount, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    comment = models.TextField(null=True, blank=True)
    # A soft claim ("I'm on it"): who, and until when (renewed while their page is open). It never
    # blocks a decision. Unindexed: the queue reads it from rows it already found.
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    claimed_until = models.DateTimeField(null=True, blank=True)
    # A rule's `then: {quorum: N, from: [roles]}` that matched an item at the ask; NULL: the capability's
    # quorum (if any) applies. services/quorum.py reads the stricter of the two.
    quorum = models.JSONField(null=True, blank=True)

    class Meta:
        constraints = [
            # A run has at most one open question.
            models.UniqueConstraint(fields=["run"], condition=Q(status="pending"), name="one_pending_hold_per_run"),
            # A second hold of one invocation would share the first one's resume seq (asker's + 1).
            models.UniqueConstraint(fields=["invocation"], name="one_hold_per_invocation"),
            models.CheckConstraint(condition=Q(status__in=HoldStatus.values), name="hold_status_valid"),
            models.CheckConstraint(condition=Q(item_count__gte=1, item_count__lte=100), name="hold_item_count"),
        ]
        indexes = [
            # The queue: pending holds, soonest expiry first (never-expiring last), then oldest.
            models.Index(
                fields=["expires_at", "created_at", "id"],
                condition=Q(status="pending"),
                name="hold_queue",
            ),
            # The queue filtered by capability.
            models.Index(
                fields=["capability", "expires_at", "created_at", "id"],
                condition=Q(status="pending"),
                name="hold_queue_by_capability",
            ),
            # The queue's claimed segments: pending holds that carry a claim (live or run out), few.
            models.Index(
                fields=["expires_at", "created_at", "id"],
                condition=Q(status="pending", claimed_until__isnull=False),
                name="hold_queue_claimed",
            ),
            # History: decided and expired holds, newest decision first.
            models.Index(
                fields=["-decided_at", "-id"],
                condition=Q(status__in=["decided", "expired"]),
                name="hold_history",
            ),
            # The backtest (services/backtest.py): a capability's decided holds of the last 90 days, one
            # range scan. Written once per hold, when it is decided.
            models.Index(
                fields=["capability", "decided_at"], condition=Q(status="decided"), name="hold_decided_by_capability"
            ),
            # The ops page: the oldest pending hold of each capability, one index probe each.
            models.Index(fields=["capability", "created_at"], condition=Q(status="pending"), name="hold_pending_age"),
            # The sweep touches pending holds that expire, in expiry order.
            models.Index(
                fields=["expires_at"],
                condition=Q(status="pending", expires_at__isnull=False),
                name="hold_sweep_due",
            ),
        ]

    def __str__(self) -> str:
        return self.public_id

    @property
    def public_id(self) -> str:
        return public_id(HOLD, self.pk)


def decider_label(decided_by: dict | None) -> str:
    """`rule small v3`, `grant grt_5`: how pages, history and the audit log name a rule's or grant's decision."""
    if not decided_by:
        return ""
    if decided_by.get("type") == "rule":
        return f"rule {decided_by.get('id')} v{decided_by.get('version')}"
    return f"grant {decided_by.get('id')}"


class HoldItem(models.Model):
    Action = Action

    hold = models.ForeignKey(Hold, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveSmallIntegerField()
    item_id = models.CharField(max_length=200)
    title = models.CharField(max_length=1000)
    data = ExactJSONField()
    confidence = models.JSONField(default=dict, blank=True)
    # Per-item actions replace the hold's for this item; null: the hold's.
    actions = models.JSONField(null=True, blank=True)
    # A database default too: bulk loaders (COPY) that predate item details leave it out.
    details = models.TextField(blank=True, default="", db_default="")
    # Rendered once at the ask with the hold's details (markup.render_all); null: shown as plain text.
    details_html = models.TextField(null=True, blank=True)
    # A JSON Schema (draft 2020-12 or 07) that an edit of `data` must satisfy; null: the type rule.
    schema = ExactJSONField(null=True, blank=True)
    # The per-item decision, written with the hold's decision in one transaction.
    action = models.CharField(max_length=10, choices=Action.choices, blank=True, default="")
    decided_data = ExactJSONField(null=True, blank=True)
    comment = models.TextField(null=True, blank=True)
    # Who decided this item when it was not the hold's decider: {"type": "rule", "id", "version"} or
    # {"type": "grant", "id": "grt_5"} (SPEC Round 3: the hold, history and receipt name the rule).
    decided_by = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["hold", "position"]
        constraints = [
            models.UniqueConstraint(fields=["hold", "item_id"], name="item_id_unique_in_hold"),
            models.UniqueConstraint(fields=["hold", "position"], name="item_position_unique_in_hold"),
        ]

    def __str__(self) -> str:
        return f"{public_id(HOLD, self.hold_id)} {self.item_id}"

    @property
    def decided_by_label(self) -> str:
        return decider_label(self.decided_by)

    def effective_actions(self, hold_actions: list[str]) -> list[str]:
        """SPEC: an item without its own `actions` takes the hold's."""
        return list(self.actions) if self.actions else list(hold_actions)


class AuditEvent(models.Model):
    """Append-only: saving an existing row or deleting one raises (and PostgreSQL refuses it too)."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.CharField(max_length=200)
    kind = models.CharField(max_length=50)
    run_id_ref = models.BigIntegerField(null=True, blank=True, db_index=True)
    hold_id_ref = models.BigIntegerField(null=True, blank=True, db_index=True)
    invocation_id_ref = models.CharField(max_length=40, blank=True, default="")
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-id"]
        # A plain index on kind, without the varchar_pattern_ops twin `db_index=True` adds for LIKE: every
        # event is written by a hot path (asks, decisions, the sweep's 1,000 a batch), nothing filters
        # kinds by pattern (the audit page's "hold." lists the kinds), and that twin cost 16 % of an insert.
        indexes = [models.Index(fields=["kind"], name="holds_auditevent_kind_e414edad")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.kind}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise PermissionError("audit events are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("audit events are append-only")


def run_file_path(instance: "RunFile", filename: str) -> str:
    return f"runs/{instance.run_id}/{secrets.token_hex(8)}"


class RunFile(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="files")
    name = models.CharField(max_length=255)
    content_type = models.CharField(max_length=200)
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    file = models.FileField(upload_to=run_file_path)
    # The upload's Idempotency-Key ("" without one): a repeated upload gets the first file, not a second.
    idempotency_key = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "idempotency_key"],
                condition=~models.Q(idempotency_key=""),
                name="run_file_idempotency_key_unique",
            )
        ]

    def __str__(self) -> str:
        return f"{self.public_id} {self.name}"

    @property
    def public_id(self) -> str:
        return public_id(FILE, self.pk)


class RunState(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="state_entries")
    key = models.CharField(max_length=200)
    # A stored JSON null is a value; a missing key is no row at all.
    value = ExactJSONField(null=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="run_state_key_unique")]

    def __str__(self) -> str:
        return f"{public_id(RUN, self.run_id)} {self.key}"


# --- ops: pre-aggregated counters and notification records (issue 7) ---------------------------


class OpsHour(models.Model):
    """One sealed span of the audit log, aggregated: the ops page and /metrics read these.

    `hour` is the span's start: a whole hour once it is over, or a 5-minute bucket of the current
    hour. `metric`/`label` pairs: asked, decided, expired, action/<approve|edit|...>, ttd/<bucket>,
    attempt/<outcome>, latency/<bucket>, *_sum, and one `sealed` row per span (the watermark; its
    value is the span in seconds). A span is sealed once, a minute after it ends, and never changes
    after: requests read only the few minutes since, however many holds exist.
    """

    hour = models.DateTimeField()
    metric = models.CharField(max_length=40)
    label = models.CharField(max_length=40, blank=True, default="")
    value = models.FloatField(default=0)

    class Meta:
        constraints = [
            # Also the lock of a sealing: a second sealer of the same hour fails on `sealed`.
            models.UniqueConstraint(fields=["metric", "label", "hour"], name="ops_hour_unique"),
        ]
        indexes = [models.Index(fields=["hour"], name="ops_hour_by_hour")]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.metric}/{self.label} = {self.value:g}"


class OpsTotal(models.Model):
    """All sealed hours summed, per metric and label, written in the sealing transaction."""

    metric = models.CharField(max_length=40)
    label = models.CharField(max_length=40, blank=True, default="")
    value = models.FloatField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["metric", "label"], name="ops_total_unique")]

    def __str__(self) -> str:
        return f"{self.metric}/{self.label} = {self.value:g}"


class CalibrationTotal(models.Model):
    """Calibration's sealed sums (holds/calibration.py), per capability, data field and confidence
    bucket: items decided by a person with a stated confidence for the field, how many of them had
    the field edited or the item rejected (or sent back with feedback), and the confidences' sum. Written
    in the transaction that seals the same span of the audit log for the ops sums, so once per span."""

    capability = models.ForeignKey(Capability, on_delete=models.CASCADE, related_name="+")
    field = models.CharField(max_length=200)
    bucket = models.CharField(max_length=8)  # the bucket's lower bound: 0, 0.5, 0.7, 0.8, 0.9
    decisions = models.BigIntegerField(default=0)
    edited = models.BigIntegerField(default=0)
    confidence_sum = models.FloatField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["capability", "field", "bucket"], name="calibration_total_unique")
        ]

    def __str__(self) -> str:
        return f"{self.capability_id} {self.field} {self.bucket}: {self.edited}/{self.decisions}"


class PendingCount(models.Model):
    """Pending holds per capability, kept as deltas written by the transactions that change them:
    +1 by an ask, -1 by a decision, -n by a sweep batch or a run that finishes with an open hold.

    The ops page and /metrics sum these rows instead of counting pending holds (100,000 of them at
    1,000,000 holds). Rows are only ever inserted by those transactions, never updated, so asks of
    one capability never queue on a counter row's lock; beat folds them into one row per capability.
    """

    capability = models.ForeignKey(Capability, on_delete=models.CASCADE, related_name="+", db_index=False)
    delta = models.IntegerField()

    def __str__(self) -> str:
        return f"capability {self.capability_id} {self.delta:+d}"


class Notification(models.Model):
    """One notification of one hold on one channel, or of one capability's failing endpoint (once per
    failing spell, named by its `endpoint_failing_since`); the row is its claim, so each goes out once."""

    class Kind(models.TextChoices):
        ASKED = "asked"
        REMINDER = "reminder"
        ENDPOINT_FAILING = "failing"
        ENDPOINT_ANSWERING = "answering"

    class Channel(models.TextChoices):
        EMAIL = "email"
        WEBHOOK = "webhook"
        SLACK = "slack"
        PUSH = "push"

    hold = models.ForeignKey(Hold, null=True, blank=True, on_delete=models.CASCADE, related_name="notifications")
    capability = models.ForeignKey(
        Capability, null=True, blank=True, on_delete=models.CASCADE, related_name="notifications"
    )
    spell = models.DateTimeField(null=True, blank=True)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    channel = models.CharField(max_length=10, choices=Channel.choices)
    # A worker that is sending holds the row until this time; after it, a retry may take over.
    claimed_until = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    sent_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["hold", "kind", "channel"], name="one_notification_per_hold_kind_channel"),
            models.UniqueConstraint(
                fields=["capability", "spell", "kind", "channel"],
                condition=models.Q(capability__isnull=False),
                name="one_notification_per_failing_spell",
            ),
            # Either a hold's, or a capability's spell's: never both, never neither.
            models.CheckConstraint(
                condition=models.Q(hold__isnull=False, capability__isnull=True, spell__isnull=True)
                | models.Q(hold__isnull=True, capability__isnull=False, spell__isnull=False),
                name="notification_of_a_hold_or_a_spell",
            ),
        ]

    def __str__(self) -> str:
        if self.hold_id is None:
            return f"capability {self.capability_id} {self.kind} {self.channel}"
        return f"{public_id(HOLD, self.hold_id)} {self.kind} {self.channel}"


# --- channels: Slack and Web Push (SPEC "Round 3 ... Channels") ----------------------------------


class SlackMessage(models.Model):
    """The Slack message that announced a hold, so that it is updated in place once the hold closes."""

    hold = models.OneToOneField(Hold, on_delete=models.CASCADE, related_name="slack_message")
    channel = models.CharField(max_length=100)
    ts = models.CharField(max_length=40)
    # Set when chat.update removed the buttons; the beat pass looks for closed holds where it is NULL.
    closed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["created_at"], condition=Q(closed_at__isnull=True), name="slack_open")]

    def __str__(self) -> str:
        return f"{public_id(HOLD, self.hold_id)} in {self.channel}"


class SlackRequest(models.Model):
    """One signed interaction request seen, by its signature: the same request sent again within the
    5-minute window (a replay) finds its row and is refused. Rows older than the window are pruned."""

    signature = models.CharField(max_length=100, unique=True)
    received_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"Slack request at {self.received_at}"


class SlackLink(models.Model):
    """An explicit link from a Slack user to a person, set on the person's page by an admin; without
    one, a Slack user is mapped by Slack's confirmed e-mail address."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="slack_link")
    slack_user_id = models.CharField(max_length=40, unique=True)

    def __str__(self) -> str:
        return f"{self.user} = Slack {self.slack_user_id}"


class PushSubscription(models.Model):
    """A browser's Web Push subscription of one person; deleted when the push service answers 404/410."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="push_subscriptions")
    endpoint = models.URLField(max_length=1000, unique=True)
    p256dh = models.CharField(max_length=200)
    auth = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.user}'s push subscription"


# --- evals: datasets of recorded runs, experiments that replay them (SPEC "Evals") ---------------


class Dataset(models.Model):
    capability = models.ForeignKey(Capability, on_delete=models.PROTECT, related_name="datasets")
    name = models.CharField(max_length=200)
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["capability", "name"], name="dataset_name_unique")]

    def __str__(self) -> str:
        return f"{self.public_id} {self.name}"

    @property
    def public_id(self) -> str:
        return public_id(DATASET, self.pk)


class DatasetItem(models.Model):
    """One recorded case: the input, each hold (its ask and the resume that was sent, null if none was),
    and the expected output. Deleting one hides it (deleted_at): experiments that ran it still show it."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="items")
    input = ExactJSONField(default=dict)
    recorded_holds = ExactJSONField(default=list)
    expected_output = ExactJSONField(null=True, blank=True)
    source_run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.public_id

    @property
    def public_id(self) -> str:
        return public_id(DATASET_ITEM, self.pk)


class Experiment(models.Model):
    Status = ExperimentStatus

    dataset = models.ForeignKey(Dataset, on_delete=models.PROTECT, related_name="experiments")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    started_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(status__in=ExperimentStatus.values), name="experiment_status_valid"),
        ]
        indexes = [
            # The completion beat looks only at running experiments.
            models.Index(fields=["id"], condition=Q(status="running"), name="experiment_running"),
        ]

    def __str__(self) -> str:
        return self.public_id

    @property
    def public_id(self) -> str:
        return public_id(EXPERIMENT, self.pk)


class RuleSet(models.Model):
    """One saved version of a capability's rules (SPEC Round 3 "Rules"): every save is a new row, and
    Capability.rules_version names the current one. `rules`: [{id, when, then, comment?}] as checked
    by holds/rules.py."""

    capability = models.ForeignKey(Capability, on_delete=models.CASCADE, related_name="rule_sets")
    version = models.PositiveIntegerField()
    rules = models.JSONField(default=list)
    saved_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["capability", "version"], name="rule_set_version_unique")]

    def __str__(self) -> str:
        return f"{self.capability_id} v{self.version}"


class Grant(models.Model):
    """A standing grant ("approve and remember"): `when` approves matching items of its capability until
    it expires, is used up or is revoked. `uses` moves only in the conditional UPDATE of the ask that
    uses it (services/rules.py), so `max_uses` holds under concurrent asks."""

    capability = models.ForeignKey(Capability, on_delete=models.CASCADE, related_name="grants")
    when = models.TextField()
    comment = models.TextField(blank=True, default="")
    created_by = models.CharField(max_length=200)
    created_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    created_by_account = models.ForeignKey(
        ServiceAccount, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    # The decided item it was made from, if any (the hold page's "Approve and remember").
    from_hold = models.ForeignKey(Hold, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    from_item_id = models.CharField(max_length=200, blank=True, default="")
    expires_at = models.DateTimeField()
    max_uses = models.PositiveIntegerField(null=True, blank=True)
    uses = models.PositiveIntegerField(default=0)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["capability", "-id"], name="grant_by_capability")]

    def __str__(self) -> str:
        return self.public_id

    @property
    def public_id(self) -> str:
        return public_id(GRANT, self.pk)

    @property
    def from_hold_public_id(self) -> str | None:
        return public_id(HOLD, self.from_hold_id) if self.from_hold_id else None


class HoldApproval(models.Model):
    """One person's (or service account's) approval of a hold that needs a quorum (services/quorum.py).
    The unique constraints are what makes "nobody counts twice" hold under concurrent requests; `data_hash`
    is the SHA-256 of the approved decision (canonical JSON), so that only approvals of the same data count."""

    hold = models.ForeignKey(Hold, on_delete=models.CASCADE, related_name="approvals")
    label = models.CharField(max_length=200)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    account = models.ForeignKey(
        ServiceAccount, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    decision = models.JSONField()
    data_hash = models.CharField(max_length=64)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["hold", "user"], condition=Q(user__isnull=False), name="approval_once_user"
            ),
            models.UniqueConstraint(
                fields=["hold", "account"], condition=Q(account__isnull=False), name="approval_once_account"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.label} approved hold {self.hold_id}"


class HoldEscalation(models.Model):
    """One escalation step taken for one hold (services/escalation.py). The unique (hold, step) row is
    the claim: two beats, or two workers, take a step once."""

    hold = models.ForeignKey(Hold, on_delete=models.CASCADE, related_name="escalations")
    step = models.PositiveSmallIntegerField()  # 1-based, as agentos.yaml lists them
    # The people told ("ann", or "bob acting for ann" when ann is away), or ["expire"].
    notified = models.JSONField(default=list)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["hold", "step"], name="one_escalation_per_hold_step")]

    def __str__(self) -> str:
        return f"hold {self.hold_id} step {self.step}"


class ReceiptKey(models.Model):
    """An Ed25519 key that signs decision receipts (holds/services/receipts.py). The newest is current;
    older ones stay so that their public halves keep verifying the receipts they signed."""

    kid = models.CharField(max_length=64, unique=True)
    # The public JWK as published at /.well-known/jwks.json.
    public_jwk = models.JSONField()
    # The private key's PEM, encrypted with a key derived from SECRET_KEY (Fernet; docs/decisions.md).
    private_encrypted = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.kid
