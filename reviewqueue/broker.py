"""The broker of the no-Redis default: a kombu transport whose queues are rows in PostgreSQL.

`make run` without REDIS_URL uses it (`rqpg://`, settings.py), on the same database as the app.
Each message is one row, written by one INSERT: a reader sees all of it or nothing, so no worker
can read a half-written message (kombu's filesystem transport can, kombu issue 1551: a worker with
beat died of a JSONDecodeError). A consumer reserves the oldest visible row with
`FOR UPDATE SKIP LOCKED`, so two consumers never take the same message, and deletes it on ack; a
reserved row that is never acked (the worker was killed) becomes visible again after the visibility
timeout, as with Redis. Publishing sends a NOTIFY, so an idle worker waits on LISTEN instead of
polling.

The table is created on first use, not by a migration: the broker is not part of the app's data,
and with Redis it does not exist at all. Fanout exchanges are not supported, so Celery runs the
worker without remote control, gossip and mingle (as it does on SQS).
"""

import logging
import threading
from time import monotonic

import psycopg
from kombu.transport import TRANSPORT_ALIASES, virtual
from kombu.utils.json import dumps, loads

log = logging.getLogger(__name__)

TABLE = "rq_broker_message"
CHANNEL = "rq_broker"
# pg_advisory_xact_lock key: concurrent first uses create the table once.
SCHEMA_LOCK = 0x7271_6272_6F6B_6572 & 0x7FFF_FFFF_FFFF_FFFF

SCHEMA = [
    f"""CREATE TABLE IF NOT EXISTS {TABLE} (
        id bigserial PRIMARY KEY,
        queue text NOT NULL,
        tag text NOT NULL,
        payload text NOT NULL,
        visible_at timestamptz NOT NULL DEFAULT now()
    )""",
    # The consumer's lookup: the oldest visible message of one queue.
    f"CREATE INDEX IF NOT EXISTS {TABLE}_queue_id ON {TABLE} (queue, id)",
    # ack, reject and restore find a message by its delivery tag.
    f"CREATE INDEX IF NOT EXISTS {TABLE}_tag ON {TABLE} (tag)",
]
# One statement and one round trip: the row, and the NOTIFY that wakes idle consumers at its commit.
PUT = f"""WITH m AS (INSERT INTO {TABLE} (queue, tag, payload) VALUES (%s, %s, %s) RETURNING queue)
    SELECT pg_notify('{CHANNEL}', queue) FROM m"""
# Reserve the oldest visible message above `floor` for the visibility timeout; a row another consumer
# holds is skipped.
GET = f"""UPDATE {TABLE} SET visible_at = now() + make_interval(secs => %s)
    WHERE id = (SELECT id FROM {TABLE} WHERE queue = %s AND id > %s AND visible_at <= now()
                ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING id, payload"""
# Taken without ack (no_ack consumers): the row goes at once.
GET_AND_DELETE = f"""DELETE FROM {TABLE}
    WHERE id = (SELECT id FROM {TABLE} WHERE queue = %s AND id > %s AND visible_at <= now()
                ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING id, payload"""
ACK = f"DELETE FROM {TABLE} WHERE tag = %s"
# Back to the queue now (reject with requeue, a channel closing with unacked messages), under a new id
# so that it is above every consumer's floor.
RESTORE = f"""WITH old AS (DELETE FROM {TABLE} WHERE tag = ANY(%s) RETURNING queue, tag, payload),
    m AS (INSERT INTO {TABLE} (queue, tag, payload) SELECT queue, tag, payload FROM old RETURNING queue)
    SELECT pg_notify('{CHANNEL}', queue) FROM m"""
SIZE = f"SELECT count(*) FROM {TABLE} WHERE queue = %s AND visible_at <= now()"
PURGE = f"DELETE FROM {TABLE} WHERE queue = %s AND visible_at <= now()"
DELETE_QUEUE = f"DELETE FROM {TABLE} WHERE queue = %s"

# A consumer looks above the last id it took: below it are mostly deleted rows, which a scan from
# the start of the index walks through one by one while a long transaction anywhere on the server
# keeps them from being cleaned up. Every RESCAN seconds, and before it reports a queue empty, it
# looks from the start, for a row that committed late or whose visibility timeout ran out.
RESCAN = 1.0

_schema_ready: set[str] = set()
_schema_lock = threading.Lock()


def connect(dsn: str, connect_timeout: float | None, *, pooled: bool = False) -> psycopg.Connection:
    """The broker's own connection. `pooled` (RQ_TRANSACTION_POOLER): each statement may run in another
    server session that other clients share, so nothing is set or prepared in a session: a session
    SET would reach the app's transactions there, and psycopg's prepared names (_pg3_0) collide."""
    timeout = max(2, int(connect_timeout or 10))  # whole seconds
    if pooled:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=timeout, prepare_threshold=None)
    conn = psycopg.connect(dsn, autocommit=True, connect_timeout=timeout)
    # Each put, take and ack is a commit; not waiting for its WAL flush makes them several times
    # faster. A database crash can then lose the last moments' messages, which the relay sends again.
    conn.execute("SET synchronous_commit = off")
    return conn


def ensure_schema(conn: psycopg.Connection, dsn: str) -> None:
    with _schema_lock:
        if dsn in _schema_ready:
            return
        if conn.execute("SELECT to_regclass(%s)", [TABLE]).fetchone()[0] is None:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", [SCHEMA_LOCK])
                for statement in SCHEMA:
                    conn.execute(statement)
        _schema_ready.add(dsn)


class QoS(virtual.QoS):
    """Acks and rejects act on the message's row; the base class only forgets its copy."""

    def ack(self, delivery_tag):
        self.channel.sql(ACK, [delivery_tag])
        super().ack(delivery_tag)
        self._wake_consumer()

    def reject(self, delivery_tag, requeue=False):
        self.channel.sql(RESTORE if requeue else ACK, [[delivery_tag]] if requeue else [delivery_tag])
        self._quick_ack(delivery_tag)
        self._wake_consumer()

    def _wake_consumer(self) -> None:
        """A consumer held back by the prefetch limit may take the next message now."""
        transport = self.channel.connection
        if transport is not None:
            transport.acked.set()

    def restore_unacked(self):
        """The rows are still in the table, reserved: making them visible again is the restore."""
        self._flush()
        tags = list(self._delivered)
        self._delivered.clear()
        if not tags:
            return []
        try:
            self.channel.sql(RESTORE, [tags])
        except psycopg.Error:
            # Nothing is lost: the rows are still there and come back when their timeout ends.
            log.warning("could not put %d unacked message(s) back; they return after the visibility timeout", len(tags))
        return []


class Channel(virtual.Channel):
    QoS = QoS
    visibility_timeout = 3600
    from_transport_options = virtual.Channel.from_transport_options + (
        "visibility_timeout",
        "dsn",
        "transaction_pooler",
    )
    dsn = None
    transaction_pooler = False

    def __init__(self, connection, **kwargs):
        super().__init__(connection, **kwargs)
        if not self.dsn:
            raise ValueError("the rqpg transport needs transport_options['dsn'] (settings.py sets it)")
        self._no_ack_queues: set[str] = set()
        self._floor: dict[str, int] = {}
        self._rescan_at: dict[str, float] = {}
        self.conn = connect(self.dsn, connection.client.connect_timeout, pooled=self.transaction_pooler)
        try:
            ensure_schema(self.conn, self.dsn)
        except BaseException:
            self.conn.close()
            raise

    def sql(self, statement: str, params: list):
        return self.conn.execute(statement, params)

    def _put(self, queue, message, **kwargs):
        self.sql(PUT, [queue, message["properties"]["delivery_tag"], dumps(message)])

    def _get(self, queue, timeout=None):
        floor = self._floor.get(queue, 0)
        if monotonic() >= self._rescan_at.get(queue, 0):
            floor = 0
        row = self._take(queue, floor)
        if row is None and floor:
            floor = 0
            row = self._take(queue, 0)
        if floor == 0:
            self._rescan_at[queue] = monotonic() + RESCAN
        if row is None:
            raise virtual.Empty()
        self._floor[queue] = row[0]
        return loads(row[1])

    def _take(self, queue: str, floor: int):
        if queue in self._no_ack_queues:
            return self.sql(GET_AND_DELETE, [queue, floor]).fetchone()
        return self.sql(GET, [self.visibility_timeout, queue, floor]).fetchone()

    def basic_consume(self, queue, no_ack, callback, consumer_tag, **kwargs):
        if no_ack:
            self._no_ack_queues.add(queue)
        return super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)

    def basic_get(self, queue, no_ack=False, **kwargs):
        message = super().basic_get(queue, no_ack=no_ack, **kwargs)
        if message is not None and no_ack:
            self.sql(ACK, [message.delivery_tag])
        return message

    def _restore(self, message):
        self.sql(RESTORE, [[message.delivery_tag]])

    def _size(self, queue):
        return self.sql(SIZE, [queue]).fetchone()[0]

    def _purge(self, queue):
        return self.sql(PURGE, [queue]).rowcount

    def _delete(self, queue, *args, **kwargs):
        self.sql(DELETE_QUEUE, [queue])

    def _has_queue(self, queue, **kwargs):
        return True  # a queue is its rows; an empty one exists as much as any other

    def _new_queue(self, queue, **kwargs):
        pass

    def close(self):
        try:
            super().close()  # restores unacked messages through self.conn
        finally:
            self.conn.close()


class Transport(virtual.Transport):
    Channel = Channel
    driver_type = driver_name = "postgresql"
    # With LISTEN, this is only the longest wait before a consumer looks again on its own.
    polling_interval = 1.0
    connection_errors = virtual.Transport.connection_errors + (psycopg.OperationalError, psycopg.InterfaceError)
    channel_errors = virtual.Transport.channel_errors + (psycopg.DatabaseError,)

    def __init__(self, client, **kwargs):
        super().__init__(client, **kwargs)
        self.acked = threading.Event()
        self._listener: psycopg.Connection | None = None

    def driver_version(self):
        return psycopg.__version__

    @property
    def default_connection_params(self):
        return {}  # the database comes from transport_options["dsn"], not from the URL's host

    def drain_events(self, connection, timeout=None):
        """Delivers one message; between empty looks it waits for a NOTIFY (a publish) or, while the
        prefetch limit holds it back, for an ack of its own."""
        started = monotonic()
        while True:
            self.acked.clear()
            try:
                return self.cycle.get(self._deliver, timeout=timeout)
            except virtual.Empty:
                pass
            wait = self.polling_interval
            if timeout is not None:
                left = timeout - (monotonic() - started)
                if left <= 0:
                    raise TimeoutError()
                wait = min(wait, left)
            if self._saturated():
                self.acked.wait(wait)
            else:
                self._wait_for_publish(wait)

    def _saturated(self) -> bool:
        return any(channel._consumers and not channel.qos.can_consume() for channel in self.channels)

    def _wait_for_publish(self, wait: float) -> None:
        if self.client.transport_options.get("transaction_pooler"):
            # Behind a transaction pooler a LISTEN would sit in a server session others share: poll.
            threading.Event().wait(wait)
            return
        try:
            if self._listener is None:
                options = self.client.transport_options
                self._listener = connect(options["dsn"], self.client.connect_timeout)
                self._listener.execute(f"LISTEN {CHANNEL}")
            for _ in self._listener.notifies(timeout=wait, stop_after=1):
                pass
            # Many publishes wake us once: the rest of the backlog is read now, not one per loop.
            for _ in self._listener.notifies(timeout=0):
                pass
        except psycopg.Error:
            # The next look at the queue reports a lost database to Celery; here we only wait.
            self._close_listener()
            threading.Event().wait(wait)

    def _close_listener(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def close_connection(self, connection):
        self._close_listener()
        super().close_connection(connection)


TRANSPORT_ALIASES.setdefault("rqpg", "reviewqueue.broker:Transport")
