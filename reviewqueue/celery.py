"""The Celery app: `celery -A reviewqueue worker` and `celery -A reviewqueue beat`."""

import os

from celery import Celery
from celery.signals import task_postrun, task_prerun, worker_init

from . import broker  # noqa: F401  (registers rqpg://, the no-Redis default broker)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewqueue.settings")

app = Celery("reviewqueue")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def recycle_db_connections(sender=None, **kwargs) -> None:
    """Database connections in the worker follow Django's rules, as in a web request: each task
    starts and ends by closing this thread's connection if it broke or outlived DB_CONN_MAX_AGE.
    (Celery's own fixup would close it after every task, whatever DB_CONN_MAX_AGE says; settings
    turn that off with CELERY_DB_REUSE_MAX.)"""
    from django.db import close_old_connections

    if getattr(getattr(sender, "request", None), "is_eager", False):
        return  # run in the caller's thread (tests, eager mode): its connection is the caller's
    close_old_connections()


@worker_init.connect
def build_http_client(**kwargs) -> None:
    """Builds the process's one HTTP client (holds.delivery.shared_client) before the worker takes a
    task. Building it loads the CA bundle: 40 ms idle, several times that while sixteen threads take
    their first tasks, and until an endpoint's first call answers, that endpoint gets two calls at once
    (docs/decisions.md, "A slow endpoint, a share of a worker's threads")."""
    from holds.delivery import shared_client

    shared_client()
