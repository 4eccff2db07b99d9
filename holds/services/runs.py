"""Runs: start, fail, finish; their state and files."""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from ..auth import Actor, run_token_hash
from ..errors import Conflict, Invalid, NotFound, QuotaExceeded
from ..ids import RUN, public_id
from ..models import AuditKind, Capability, IdempotencyKey, Invocation, Run, RunFile, RunState, ServiceAccount
from ..policy import may_fail_run, may_start_run, require
from ..schemas import canonical_json, schema_errors
from ..words import ActorKind
from . import gateway, ports, sql
from .audit import audit

# Invocations not sent yet: a run that finishes cancels them.
UNSENT_INVOCATION = (Invocation.Status.WAITING, Invocation.Status.PENDING, Invocation.Status.PARKED)


def new_invocation(*, run: Run, kind: str, seq: int, status: str, resume=None, hold=None) -> Invocation:
    invocation = Invocation(run=run, kind=kind, seq=seq, status=status, resume=resume, hold=hold)
    invocation.token_hash = run_token_hash(invocation.id)
    if status == Invocation.Status.PENDING:
        invocation.next_attempt_at = timezone.now()
    return invocation


def run_start(
    *,
    capability_name: str,
    input: dict,
    actor: Actor,
    idempotency_key: str | None = None,
    inline: bool = False,
) -> tuple[Run, bool]:
    """Starts a run and writes its start invocation (the outbox row) in one transaction.

    With an idempotency key, the same caller and key return the first run (created=False), so a
    retried request never starts a second run. A run token starts a child run of its own run.
    `inline`: the caller is the run's agent itself (an MCP call, holds/mcp): its start invocation is
    written as being answered (delivering, with no lease, which the relay never hands out) and is
    never sent; a decision's resume then waits for it (sql.write_decision) and is never sent either.
    """
    require(may_start_run(actor))
    capability = Capability.objects.filter(name=capability_name).first()
    if capability is None:
        raise Invalid([{"field": "capability", "message": f"no capability named '{capability_name}'"}])
    if idempotency_key:
        existing = _idempotent_run(actor, idempotency_key, capability, input)
        if existing is not None:
            return existing, False
    errors = schema_errors(capability.input_schema, input, "input")
    if errors:
        raise Invalid(errors)
    try:
        with transaction.atomic():
            parent = actor.run if actor.kind == ActorKind.RUN else None
            run = Run.objects.create(
                capability=capability,
                version=capability.version,
                endpoint=capability.endpoint,
                input=input,
                seq=1,
                parent=parent,
                # A run started by an eval run is an eval run too (it replays no holds: delivery.eval_field).
                experiment_id=parent.experiment_id if parent else None,
                dataset_item_id=parent.dataset_item_id if parent else None,
                started_by_user=actor.user if actor.kind == ActorKind.USER else None,
                started_by_account=actor.account if actor.kind == ActorKind.ACCOUNT else None,
            )
            if idempotency_key:
                IdempotencyKey.objects.create(caller=actor.caller_key, key=idempotency_key, run=run)
            status = Invocation.Status.DELIVERING if inline else Invocation.Status.PENDING
            invocation = new_invocation(run=run, kind=Invocation.Kind.START, seq=1, status=status)
            invocation.save(force_insert=True)
            audit(AuditKind.RUN_STARTED, actor, run_id=run.pk, invocation_id=invocation.id, capability=capability.name)
            if not inline:
                ports.publish_on_commit([invocation.id])
    except IntegrityError:
        # Another request with the same key won the race; answer with its run.
        existing = _idempotent_run(actor, idempotency_key, capability, input) if idempotency_key else None
        if existing is None:
            raise
        return existing, False
    return run, True


def _idempotent_run(actor: Actor, key: str, capability: Capability, input: dict) -> Run | None:
    row = IdempotencyKey.objects.select_related("run").filter(caller=actor.caller_key, key=key).first()
    if row is None:
        return None
    if row.run.capability_id != capability.pk or canonical_json(row.run.input) != canonical_json(input):
        raise Invalid(
            [{"field": "Idempotency-Key", "message": "this key was used with a different capability or input"}],
            "the Idempotency-Key was already used with another body",
            code="idempotency_mismatch",
        )
    return row.run


def run_fail(*, run_id: int, actor: Actor, reason: str) -> Run:
    """An admin fails a run: its pending hold is cancelled and unsent invocations are cancelled."""
    require(may_fail_run(actor))
    with transaction.atomic():
        run = Run.objects.select_for_update(no_key=True).filter(pk=run_id).first()
        if run is None:
            raise NotFound(f"run {public_id(RUN, run_id)} does not exist")
        if run.finished:
            raise Conflict(f"run {run.public_id} is already {run.status}", code="finished")
        finish_run(run, status=Run.Status.FAILED, error=reason or "failed by an admin", actor=actor)
    return run


def finish_run(run: Run, *, status: str, actor: Actor, output=None, error: str = "") -> None:
    """Finishes a run that the caller's transaction has locked: cancels its pending hold and every
    invocation not sent yet, in one round trip (sql.FINISH_RUN). A failure rolls all of it back."""
    run.status = status
    run.output = output
    run.error = error
    run.finished_at = timezone.now()
    params = {
        "run": run.pk,
        "capability": run.capability_id,
        "status": run.status,
        "output": Run._meta.get_field("output").get_db_prep_save(run.output, connection),
        "error": run.error,
        "now": run.finished_at,
        "unsent": [str(s) for s in UNSENT_INVOCATION],
        "actor": actor.label,
        "kind": FINISH_KIND[status],
    }
    gateway.write(*((statement, params) for statement in sql.FINISH_RUN))
    experiment_may_be_over(run)


def experiment_may_be_over(run: Run) -> None:
    """An eval run's experiment may be over now that the run finished. After commit, so that this run
    reads as finished; two last runs finishing at once may both miss it, and beat's experiments_finish
    catches that."""
    if run.experiment_id is not None and run.parent_id is None:
        experiment_id = run.experiment_id
        transaction.on_commit(lambda: experiments_finish(experiment_id=experiment_id))


FINISH_KIND = {
    Run.Status.COMPLETED: AuditKind.RUN_COMPLETED,
    Run.Status.FAILED: AuditKind.RUN_FAILED,
    Run.Status.ASKED_FOR_HUMAN: AuditKind.RUN_ASKED_FOR_HUMAN,
}


def experiments_finish(*, experiment_id: int | None = None) -> list[int]:
    """Marks finished every running experiment (or this one) whose runs have all finished, by one
    conditional UPDATE (sql.FINISH_EXPERIMENTS), audited in the same statement: a second beat, or a
    run finishing at the same time, finishes nothing twice. Returns the experiments it finished."""
    finished = gateway.fetch(sql.FINISH_EXPERIMENTS, {"experiment": experiment_id, "now": timezone.now()})
    return [experiment for (experiment,) in finished]


def _quota_scope(run: Run) -> tuple[int, list[int]]:
    """The run's tree root and the roots of every tree its caller started, the root locked (and the
    caller's row, so that two writes anywhere in their trees cannot both fit the last room).

    Quotas bound a whole tree (a root run and its descendants: child runs share their root's room)
    and a caller (all the trees one person or key started); a run started by the system has no caller.
    """
    ((root_id,),) = gateway.fetch(sql.RUN_ROOT, {"run": run.pk})
    root = Run.objects.select_for_update(no_key=True).filter(pk=root_id).only("started_by_user", "started_by_account")
    root = root.get()
    caller = None
    if root.started_by_user_id is not None:
        caller = {"started_by_user_id": root.started_by_user_id}
        get_user_model().objects.select_for_update(no_key=True).filter(pk=root.started_by_user_id).values_list(
            "pk"
        ).first()
    elif root.started_by_account_id is not None:
        caller = {"started_by_account_id": root.started_by_account_id}
        ServiceAccount.objects.select_for_update(no_key=True).filter(pk=root.started_by_account_id).values_list(
            "pk"
        ).first()
    roots = list(Run.objects.filter(parent=None, **caller).values_list("pk", flat=True)) if caller else []
    return root_id, roots


def _usage(statement: str, roots: list[int], *, skip_run=None, skip_key=None) -> tuple[int, int]:
    if not roots:
        return 0, 0
    ((count, size),) = gateway.fetch(statement, {"roots": roots, "skip_run": skip_run, "skip_key": skip_key})
    return count, size


_STATE_USAGE = sql.tree_usage(RunState._meta.db_table, "octet_length(t.value::text)").format(key="t.key")
_FILE_USAGE = sql.tree_usage(RunFile._meta.db_table, "t.size").format(key="NULL")


def run_state_put(*, run: Run, key: str, value, actor: Actor) -> None:
    """Writes one key of a run's state, within the quotas of its tree (keys, and bytes of all values)
    and of its caller (bytes)."""
    stored = RunState._meta.get_field("value").get_prep_value(value)  # None: a JSON null, stored as NULL
    size = len(stored.encode()) if stored is not None else 0
    with transaction.atomic():
        root, roots = _quota_scope(run)
        keys, used = _usage(_STATE_USAGE, [root], skip_run=run.pk, skip_key=key)
        if keys + 1 > settings.RQ_RUN_MAX_STATE_KEYS:
            raise QuotaExceeded("state_keys", settings.RQ_RUN_MAX_STATE_KEYS)
        if used + size > settings.RQ_RUN_MAX_STATE_BYTES:
            raise QuotaExceeded("state_bytes", settings.RQ_RUN_MAX_STATE_BYTES)
        if _usage(_STATE_USAGE, roots, skip_run=run.pk, skip_key=key)[1] + size > settings.RQ_CALLER_MAX_STATE_BYTES:
            raise QuotaExceeded("caller_state_bytes", settings.RQ_CALLER_MAX_STATE_BYTES)
        RunState.objects.update_or_create(run=run, key=key, defaults={"value": value})


def run_state_delete(*, run: Run, key: str, actor: Actor) -> bool:
    deleted, _ = RunState.objects.filter(run=run, key=key).delete()
    return deleted > 0


def run_file_add(
    *, run: Run, name: str, content_type: str, content, size: int, sha256: str, actor: Actor, idempotency_key: str = ""
) -> RunFile:
    """Stores one file of a run's environment, within the quotas of its tree and of its caller (files,
    and bytes of all files).

    With an idempotency key, a repeat of the same upload (a retry after a lost answer) returns the
    first file; the same key with another name, type or content is refused."""
    with transaction.atomic():
        root, roots = _quota_scope(run)
        if idempotency_key:
            first = RunFile.objects.filter(run=run, idempotency_key=idempotency_key).first()
            if first is not None:
                if (first.name, first.content_type, first.sha256) != (name, content_type, sha256):
                    raise Invalid(
                        [{"field": "Idempotency-Key", "message": "this key was used with another file"}],
                        "the Idempotency-Key was already used with another file",
                        code="idempotency_mismatch",
                    )
                return first
        files, used = _usage(_FILE_USAGE, [root])
        if files + 1 > settings.RQ_RUN_MAX_FILES:
            raise QuotaExceeded("files", settings.RQ_RUN_MAX_FILES)
        if used + size > settings.RQ_RUN_MAX_FILE_BYTES:
            raise QuotaExceeded("file_bytes", settings.RQ_RUN_MAX_FILE_BYTES)
        files, used = _usage(_FILE_USAGE, roots)
        if files + 1 > settings.RQ_CALLER_MAX_FILES:
            raise QuotaExceeded("caller_files", settings.RQ_CALLER_MAX_FILES)
        if used + size > settings.RQ_CALLER_MAX_FILE_BYTES:
            raise QuotaExceeded("caller_file_bytes", settings.RQ_CALLER_MAX_FILE_BYTES)
        run_file = RunFile(
            run=run, name=name, content_type=content_type, size=size, sha256=sha256, idempotency_key=idempotency_key
        )
        run_file.file.save(name, content, save=False)
        run_file.save()
        audit(
            AuditKind.FILE_UPLOADED, actor, run_id=run.pk, file=run_file.public_id, name=name, size=size, sha256=sha256
        )
    return run_file
