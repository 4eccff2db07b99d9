"""What the write path hands to the outside once a transaction commits, without importing it.

Services sit below tasks and notifications (import-linter checks it), so they cannot call them. The
tasks module registers the two handlers when Django loads the app (HoldsConfig.ready). Nothing is lost
if a handler fails or the broker is down: the database row is the truth, and the relay finds it.
"""

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from django.db import transaction

log = logging.getLogger(__name__)
_handlers: dict[str, Callable] = {}


def register(*, publish: Callable[[list[str]], None], hold_asked: Callable[[int], None], **more: Callable) -> None:
    """publish and hold_asked are needed; endpoint_changed (admins' alert) is optional."""
    _handlers.update(publish=publish, hold_asked=hold_asked, **more)


def _handler(name: str) -> Callable:
    try:
        return _handlers[name]
    except KeyError:
        raise RuntimeError(f"holds.services.ports: no '{name}' handler; is the holds app loaded?") from None


def publish_on_commit(invocation_ids: list[str]) -> None:
    """Sends these invocations to the broker after the commit (the relay re-sends what it loses)."""
    if invocation_ids:
        publish = _handler("publish")
        ids = list(invocation_ids)
        transaction.on_commit(lambda: publish(ids))


def publish_while(invocation_ids: list[str], during: Callable):
    """Sends these invocations to the broker from a thread of this process's own while `during()` runs
    (the caller's round trip that writes them and commits), and returns what it returned once both are
    done. Only for a claim that waits for that commit (services/decisions.write_decision says how):
    the publish, a third of a millisecond of Python, runs while this thread waits for PostgreSQL."""
    publishing = _publisher().submit(_handler("publish"), list(invocation_ids))
    try:
        return during()
    finally:
        # The caller's writes may be committed by now: a publish that failed must not fail them.
        if (error := publishing.exception()) is not None:
            log.error("could not publish %s; the relay will send it", invocation_ids, exc_info=error)


_publishers: dict[int, ThreadPoolExecutor] = {}
_publishers_lock = threading.Lock()


def _publisher() -> ThreadPoolExecutor:
    """This process's publishing threads, made on first use (a forked process makes its own)."""
    pid = os.getpid()
    if pid not in _publishers:
        with _publishers_lock:
            _publishers.setdefault(pid, ThreadPoolExecutor(max_workers=4, thread_name_prefix="rq-publish"))
    return _publishers[pid]


def hold_asked_on_commit(hold_id: int) -> None:
    """Tells reviewers about a held hold after the commit; a failing notification fails nothing here."""
    hold_asked = _handler("hold_asked")
    transaction.on_commit(lambda: hold_asked(hold_id))


def endpoint_changed_on_commit(capability_id: int, kind: str, spell) -> None:
    """Tells admins, after the commit, that a capability's endpoint became failing or answers again."""
    endpoint_changed = _handler("endpoint_changed")
    transaction.on_commit(lambda: endpoint_changed(capability_id, kind, spell))
