"""Structured logs: one JSON object per line (when DEBUG is off), with the ids that tie a line to a
request, a run, a hold and an invocation wherever they are known.

The ids live in context variables: the request-id middleware sets them for a web request (from the
URL's hold_id/run_id/invocation_id), a Celery signal sets them for a task (from its arguments), and
`extra={"hold_id": ...}` on a single call wins over both. ContextFilter copies them onto every
record, so any formatter (the JSON one, or the plain one in development) can show them.
"""

import contextvars
import json
import logging
import re
import uuid
from datetime import UTC, datetime

from .ids import HOLD, RUN, parse_public_id

CONTEXT_KEYS = ("request_id", "run_id", "hold_id", "invocation_id")
_context = {key: contextvars.ContextVar(key, default=None) for key in CONTEXT_KEYS}
# A caller-supplied X-Request-ID is kept only if it is short and plain (it goes into every line).
SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# Attributes every LogRecord has; anything else on a record came from `extra=` and is logged too.
STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "taskName"}


def bind(**values) -> dict:
    """Sets context ids; returns tokens for `unbind`. None values are skipped."""
    return {key: _context[key].set(str(value)) for key, value in values.items() if key in _context and value}


def unbind(tokens: dict) -> None:
    for key, token in tokens.items():
        try:
            _context[key].reset(token)
        except ValueError:  # set in another context (a thread pool); that context ends with it
            pass


def clear(**_) -> None:
    for var in _context.values():
        var.set(None)


def current() -> dict:
    return {key: var.get() for key, var in _context.items() if var.get() is not None}


class ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in current().items():
            if getattr(record, key, None) is None:
                setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the context ids, any `extra`."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in STANDARD and not key.startswith("_") and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class RequestIdMiddleware:
    """Gives every request an id (the caller's X-Request-ID when plain, else a new one), logs with
    it, and sends it back in X-Request-ID so a user's report can be found in the logs.

    The ids stay bound until `request_finished`, not just until this middleware returns: Django
    logs 4xx/5xx responses ("Not Found: ...") after the whole middleware chain has run.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        incoming = request.headers.get("x-request-id", "")
        request.request_id = incoming if SAFE_REQUEST_ID.match(incoming) else uuid.uuid4().hex
        clear()
        bind(request_id=request.request_id)
        response = self.get_response(request)
        response["X-Request-ID"] = request.request_id
        return response

    def process_view(self, request, view_func, view_args, view_kwargs):
        bind(
            hold_id=parse_public_id(view_kwargs.get("hold_id"), HOLD),
            run_id=parse_public_id(view_kwargs.get("run_id"), RUN),
            invocation_id=view_kwargs.get("invocation_id"),
        )


def _task_started(task_id=None, task=None, args=None, kwargs=None, **_):
    """Celery: the task id is the request id; ids come from the task's arguments."""
    args, kwargs = list(args or ()), dict(kwargs or {})
    name = getattr(task, "name", "")
    values = {"request_id": task_id}
    if name == "holds.tasks.deliver" and args:
        values["invocation_id"] = args[0]
    elif name == "holds.notify_tasks.notify" and args:
        values["hold_id"] = args[0]
    values.update({k: kwargs[k] for k in ("hold_id", "run_id", "invocation_id") if k in kwargs})
    task._log_tokens = bind(**values)


def _task_finished(task=None, **_):
    unbind(getattr(task, "_log_tokens", {}) or {})
    if task is not None:
        task._log_tokens = {}


def connect_celery() -> None:
    from celery.signals import task_postrun, task_prerun

    task_prerun.connect(_task_started, weak=False, dispatch_uid="holds.logging.prerun")
    task_postrun.connect(_task_finished, weak=False, dispatch_uid="holds.logging.postrun")


def _connect() -> None:
    from django.core.signals import request_finished

    request_finished.connect(clear, weak=False, dispatch_uid="holds.logging.clear")
    try:
        connect_celery()
    except ImportError:  # Celery is optional for tools that only import settings
        pass


_connect()
