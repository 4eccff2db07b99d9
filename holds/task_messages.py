"""Delivery messages written to Redis as Celery writes them, without Celery's cost per message.

Celery's delay() spends about a third of a millisecond of Python on each message (0.37 ms here): it
routes it, declares its queue, reads its settings through Django's, and kombu's Redis transport makes a
new Redis client for every message, copying some 170 response callbacks. A decision's resume waits for
that publish (docs/benchmarks-notes.md). So the service's own delivery messages (holds.tasks.deliver, one
invocation id each) are written here: Celery's `as_task_v2` makes the task message (its headers, the
body), this module wraps it in kombu's Redis envelope as kombu's `prepare_message` and
`_inplace_augment_message` do, and one LPUSH on a client kept for the process sends it. A worker cannot
tell the two apart: tests/test_task_messages.py compares them field by field with what delay() puts on
the queue, and every end-to-end test's deliveries go this way. (Sent from inside a task, the fan-out's,
delay() would also name that task as the message's parent and root; nothing here reads them.)

Only where delay() would do exactly this: a redis:// or rediss:// broker (one URL, no SSL options) with no
transport option that changes the keys (none but the visibility timeout), the default queue, no task
routes, not eager, and no publish signal receivers (connected when the process starts: this is decided
once per broker URL). Anything else, the embedded broker (rqpg://) included, goes through delay().
"""

import base64
import functools
import json
import threading
import uuid

import redis
from celery import current_app as app
from celery import signals
from django.conf import settings

TASK = "holds.tasks.deliver"
# What a publish may be configured with and still be this one LPUSH.
_PLAIN_OPTIONS = {"visibility_timeout"}
_clients: dict[str, redis.Redis] = {}
_clients_lock = threading.Lock()


def applies() -> bool:
    """Whether delay() would write exactly what `send_deliver` writes (the module's docstring)."""
    return _applies(settings.CELERY_BROKER_URL)


@functools.cache
def _applies(broker_url: str) -> bool:
    conf = app.conf  # read once: Celery reads each setting through Django's, slowly
    return (
        broker_url.startswith(("redis://", "rediss://"))
        and ";" not in broker_url  # failover URLs
        and not conf.broker_use_ssl
        and not conf.task_always_eager
        and set(conf.broker_transport_options or {}) <= _PLAIN_OPTIONS
        and not conf.task_routes
        and conf.task_default_queue == "celery"
        and conf.task_protocol == 2
        and conf.task_serializer == "json"
        and not conf.task_compression
        and not signals.before_task_publish.receivers
        and not signals.after_task_publish.receivers
    )


def send_deliver(invocation_id: str) -> None:
    """Queues holds.tasks.deliver(invocation_id), as `deliver.delay(invocation_id)` would."""
    _client(settings.CELERY_BROKER_URL).lpush("celery", envelope(invocation_id))


def envelope(invocation_id: str) -> str:
    """The message as kombu's Redis transport stores it: the JSON envelope around Celery's task message,
    whose body (args, kwargs, embed) is JSON in base64."""
    task_id = str(uuid.uuid4())
    args = (invocation_id,)
    # The reprs are given: Celery's own (saferepr, with a limit read from the settings) were half the time
    # of this function, and an id is short enough that they are the same (the test compares them).
    message = app.amqp.as_task_v2(
        task_id,
        TASK,
        args=args,
        kwargs={},
        ignore_result=True,
        reply_to=app.thread_oid,
        argsrepr=repr(args),
        kwargsrepr="{}",
    )
    body = json.dumps(message.body).encode()
    properties = {
        **message.properties,
        "delivery_mode": 2,
        "delivery_info": {"exchange": "", "routing_key": "celery"},
        "priority": 0,
        "body_encoding": "base64",
        "delivery_tag": str(uuid.uuid4()),
    }
    return json.dumps(
        {
            "body": base64.b64encode(body).decode(),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": message.headers,
            "properties": properties,
        }
    )


def _client(url: str) -> redis.Redis:
    """This process's client of the broker: thread-safe, and its pool of connections starts afresh in a
    forked process (redis-py checks the pid). A broker that does not answer fails a publish within Celery's
    connection timeout (4 s), as delay() does, not the system's: the relay sends what it could not."""
    if url not in _clients:
        with _clients_lock:
            if url not in _clients:
                timeout = float(app.conf.broker_connection_timeout or 4.0)
                _clients[url] = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    return _clients[url]
