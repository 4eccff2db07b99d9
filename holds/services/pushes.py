"""Push notifications from A2A agents: a task moved, so the run's waiting invocation goes to a worker.

The push itself is not trusted for the task's state (A2A sends pushes at best once, in any order): it
only wakes the invocation, and the worker asks the agent where the task is (GetTask, holds/protocols/
a2a.py) under the usual claim, lease and retries. So a push is safe to receive twice, or never.
"""

import hmac

from django.db import transaction
from django.utils import timezone

from ..auth import push_token_for
from ..errors import Invalid, NotFound, Unauthorized
from ..ids import RUN, parse_public_id
from ..models import Invocation, Protocol, Run
from . import ports


def a2a_push_run(*, run_id: str, token: str | None) -> Run:
    """The A2A run a push is for, once its token is the one Review Queue gave the agent (404, 401)."""
    pk = parse_public_id(run_id, RUN)
    run = Run.objects.select_related("capability").filter(pk=pk).first() if pk else None
    if run is None or run.capability.protocol != Protocol.A2A:
        raise NotFound(f"no A2A run {run_id}")
    if not token or not hmac.compare_digest(token.encode(), push_token_for(run).encode()):
        raise Unauthorized("the X-A2A-Notification-Token is missing or not the one given for this run")
    return run


def a2a_push_received(*, run: Run, body) -> str:
    """Wakes the run's invocation that waits on its A2A task. "woken"; "ignored" when nothing waits
    (the run finished, or the answer that names the task is still on its way to a worker). Unknown task:
    404. Safe to run twice: waking a due invocation again changes nothing."""
    task_id = _task_id(body)
    known, in_flight = set(), False
    for status, answer in Invocation.objects.filter(run=run).values_list("status", "answer"):
        in_flight |= status == Invocation.Status.DELIVERING
        if isinstance(answer, dict) and isinstance(answer.get("a2a"), dict):
            known.add(answer["a2a"].get("task_id"))
    if task_id not in known:
        if known or not in_flight:
            raise NotFound(f"run {run.public_id} has no A2A task {task_id!r}")
        return "ignored"
    if run.finished:
        return "ignored"
    with transaction.atomic():
        # A waiting invocation keeps its "working" answer (a retry too), and only such a one has an answer.
        waiting = list(
            Invocation.objects.filter(run=run, status=Invocation.Status.PENDING, answer__isnull=False).values_list(
                "pk", flat=True
            )
        )
        Invocation.objects.filter(pk__in=waiting, status=Invocation.Status.PENDING).update(
            next_attempt_at=timezone.now()
        )
        ports.publish_on_commit(waiting)
    return "woken" if waiting else "ignored"


def _task_id(body) -> str:
    """The task a StreamResponse (`task`, `statusUpdate` or `artifactUpdate`) is about."""
    if isinstance(body, dict):
        for key, field in (("task", "id"), ("statusUpdate", "taskId"), ("artifactUpdate", "taskId")):
            value = body.get(key)
            if isinstance(value, dict) and isinstance(value.get(field), str) and value[field]:
                return value[field]
    raise Invalid(
        [{"field": "body", "message": "an A2A StreamResponse: task.id, statusUpdate.taskId or artifactUpdate.taskId"}]
    )
