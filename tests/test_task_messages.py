"""holds/task_messages.py writes the very message that Celery's delay() writes, and only where it would.

A real worker running those messages is every end-to-end test's delivery (the web process publishes
through this module on their Redis broker); here the two messages are compared field by field.
"""

import base64
import json
import os

import pytest
import redis
from celery import current_app, signals

from holds import task_messages, tasks

pytestmark = [pytest.mark.needs_redis]


@pytest.fixture
def broker(settings):
    """The test Redis, on a database of its own (13), as this process's broker."""
    url = os.environ.get("RQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/15").rsplit("/", 1)[0] + "/13"
    client = redis.Redis.from_url(url)
    client.delete("celery")
    settings.CELERY_BROKER_URL = url
    yield url, client
    client.delete("celery")
    client.close()


def readable(raw) -> tuple[dict, tuple[str, str]]:
    """The stored message with its body decoded and its fresh ids blanked, and those ids."""
    message = json.loads(raw)
    message["body"] = json.loads(base64.b64decode(message["body"]))
    headers, properties = message["headers"], message["properties"]
    fresh = (headers["id"], properties["delivery_tag"])
    assert headers["root_id"] == properties["correlation_id"] == headers["id"]
    for part, key in (("headers", "id"), ("headers", "root_id"), ("properties", "correlation_id")):
        message[part][key] = None
    properties["delivery_tag"] = None
    return message, fresh


def test_a_delivery_message_is_the_one_delay_writes(broker):
    url, client = broker
    with current_app.connection_for_write(url) as connection:
        tasks.deliver.apply_async(args=("inv_0123",), connection=connection)
    theirs, _ = readable(client.rpop("celery"))
    task_messages.send_deliver("inv_0123")
    ours, fresh = readable(client.rpop("celery"))
    assert ours == theirs
    assert ours["headers"]["task"] == "holds.tasks.deliver" and ours["body"][0] == ["inv_0123"]
    assert client.llen("celery") == 0
    again = readable(task_messages.envelope("inv_0123"))[1]
    assert again[0] != fresh[0] and again[1] != fresh[1]  # each message has ids of its own


def test_publish_writes_them_on_a_redis_broker_and_loses_nothing_when_it_is_down(broker, settings):
    url, client = broker
    assert task_messages.applies()
    assert tasks.publish(["inv_a", "inv_b"]) == []
    assert [readable(m)[0]["body"][0] for m in client.lrange("celery", 0, -1)] == [["inv_b"], ["inv_a"]]
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    assert tasks.publish(["inv_c"]) == ["inv_c"]  # handed back: the relay publishes it
    # A broker that does not answer at all fails within Celery's connection timeout, not the system's.
    pool = task_messages._client(settings.CELERY_BROKER_URL).connection_pool.connection_kwargs
    assert pool["socket_connect_timeout"] == pool["socket_timeout"] == current_app.conf.broker_connection_timeout == 4


def test_anything_but_a_plain_redis_broker_goes_through_delay(broker, settings):
    for url in ("rqpg://", "memory://"):
        settings.CELERY_BROKER_URL = url
        assert not task_messages.applies()
    settings.CELERY_BROKER_URL = broker[0]

    def receiver(**kwargs):
        pass

    signals.before_task_publish.connect(receiver)
    task_messages._applies.cache_clear()
    try:
        assert not task_messages.applies()  # a receiver would miss these messages
    finally:
        signals.before_task_publish.disconnect(receiver)
        task_messages._applies.cache_clear()
    assert task_messages.applies()
