import json
import os

import pytest
from django.db import connection

from tests import factories
from tests.emptying import empty_tables

IN_CI = os.environ.get("CI") == "true"


def require(what: str, present: bool) -> None:
    """A missing service skips with its reason outside CI, and fails the test under CI=true."""
    if present:
        return
    message = f"needs {what}"
    if IN_CI:
        pytest.fail(message + " (CI=true: a missing service is a failure)")
    pytest.skip(message)


def pytest_configure(config):
    # After each transactional test its tables are emptied by tests/emptying.py, not by Django's flush
    # (140 ms a test, 250 tests): the same end, in about 1 ms.
    from django.test import TransactionTestCase

    TransactionTestCase._fixture_teardown = empty_tables


@pytest.fixture(autouse=True)
def _required_services(request):
    if request.node.get_closest_marker("needs_redis"):
        require("Redis: set RQ_TEST_REDIS_URL or run it on 127.0.0.1:6379", bool(os.environ.get("RQ_TEST_REDIS_URL")))


@pytest.fixture(autouse=True)
def _media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


@pytest.fixture(autouse=True)
def _quick_password_hashing(settings):
    """Production's PBKDF2 costs a third of a second of CPU per password set or checked, and the suite
    adds and signs in hundreds of people: in this process they hash quickly. What is tested is who may
    sign in and do what, not the hasher (Django's own); processes the tests start keep production's."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _receipt_key_cache():
    """A test's rollback removes the receipt keys it made: the next test must not sign with a cached one."""
    yield
    from holds.services import receipts

    receipts.forget_current_key()


@pytest.fixture
def cap(db):
    return factories.capability()


@pytest.fixture
def admin_user(db):
    return factories.person("alice", role="admin")


@pytest.fixture
def member(db):
    return factories.person("mona", role="member")


@pytest.fixture
def viewer(db):
    return factories.person("vic", role="viewer")


@pytest.fixture
def member_key(db):
    return factories.account("robot", role="member")[1]


@pytest.fixture
def admin_key(db):
    return factories.account("ops-bot", role="admin")[1]


@pytest.fixture
def api(client):
    """JSON calls: api.post(url, body, token=..., key=...) -> response."""

    class Api:
        def _headers(self, token, key, extra):
            headers = dict(extra or {})
            if token:
                headers["x-agentos-run-token"] = token
            if key:
                headers["authorization"] = f"Bearer {key}"
            return headers

        def post(self, url, body=None, *, token=None, key=None, raw=None, headers=None):
            data = raw if raw is not None else json.dumps(body)
            return client.post(
                url, data=data, content_type="application/json", headers=self._headers(token, key, headers)
            )

        def get(self, url, *, token=None, key=None, headers=None):
            return client.get(url, headers=self._headers(token, key, headers))

        def put(self, url, body, *, token=None, key=None, raw=None):
            data = raw if raw is not None else json.dumps(body)
            return client.put(url, data=data, content_type="application/json", headers=self._headers(token, key, None))

        def delete(self, url, *, token=None, key=None):
            return client.delete(url, headers=self._headers(token, key, None))

    return Api()


@pytest.fixture
def rq():
    """The SDK's offline stand-in for the service (agentos.testing)."""
    from agentos.testing import FakeReviewQueue

    with FakeReviewQueue() as fake:
        yield fake


@pytest.fixture
def serve_agent(rq):
    """Starts agentos servers signed with the fake service's secret; stops them afterwards."""
    import agentos

    servers = []

    def start(capability: str, handler):
        server = agentos.Server({capability: handler}, port=0, secret=rq.secret).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


class RoundTrips:
    """What a block sent to PostgreSQL: `statements`, and `round_trips`, the times it waited for an
    answer. A statement sent on its own is one round trip, and the BEGIN that psycopg sends ahead of
    a transaction's first one is another; the statements of one holds.gateway.send share one (its
    PREPAREs are not counted as statements); a COMMIT or ROLLBACK is one unless no transaction was
    open."""

    statements = 0
    round_trips = 0

    def __repr__(self):
        return f"RoundTrips(statements={self.statements}, round_trips={self.round_trips})"


@pytest.fixture
def count_round_trips(monkeypatch):
    from contextlib import contextmanager

    import psycopg

    from holds.services import gateway

    @contextmanager
    def counting():
        seen, sending, begun, active = RoundTrips(), [], [], False
        send = gateway.send

        def begins() -> int:
            """1 when psycopg is about to send a BEGIN of its own ahead of the next query (once: a
            query can run inside another's execute wrapper, before the BEGIN has gone out)."""
            idle = connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            if idle and not connection.connection.autocommit and not begun:
                begun.append(True)
                return 1
            return 0

        def counted_send(statements):
            if active:
                seen.round_trips += 1 + begins()
                seen.statements += len(statements)
            sending.append(True)
            try:
                return send(statements)
            finally:
                sending.pop()

        def each_query(execute, sql, params, many, context):
            if active and not sending:
                seen.round_trips += 1 + begins()
                seen.statements += 1
            return execute(sql, params, many, context)

        def ending(method):
            def end():
                if active and pg.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    seen.round_trips += 1
                begun.clear()
                return method()

            return end

        connection.ensure_connection()
        pg = connection.connection
        monkeypatch.setattr(gateway, "send", counted_send)
        monkeypatch.setattr(pg, "commit", ending(pg.commit))
        monkeypatch.setattr(pg, "rollback", ending(pg.rollback))
        active = True
        with connection.execute_wrapper(each_query):
            yield seen
        active = False

    return counting


@pytest.fixture
def live(cap):
    """A run whose start invocation is being delivered: (run, invocation, its live token)."""
    run = factories.start_run(cap)
    invocation, token = factories.deliver_now(run)
    return run, invocation, token


@pytest.fixture
def agent():
    """A real HTTP agent on a free port that answers as each test scripts it (tests/agent_double.py)."""
    from holds import delivery
    from tests.agent_double import AgentDouble

    double = AgentDouble()
    # A new endpoint to this process, though its port may be one an earlier test's agent had.
    delivery.forget_endpoints()
    yield double
    double.close()


@pytest.fixture
def acap(agent, settings):
    """The capability whose endpoint is `agent`, with a short retry schedule."""
    settings.RQ_RETRY_SCHEDULE = [0, 5, 30, 120]
    return factories.capability(name="pay_invoices", endpoint=agent.url, timeout_seconds=2.0)


# The files whose tests take longest (`--durations`), run first: xdist hands out tests in collection order,
# and with these last (fuzz, races) one worker was still on them for four minutes after the other ran out.
SLOW_FIRST = (
    "tests/test_security_fuzz.py",
    "tests/test_races.py",
    "tests/test_embedded_postgres.py",
    "tests/test_races_quorum.py",
    "tests/test_broker_embedded.py",
    "tests/test_security_hostile.py",
    "tests/test_pooler.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {path: n for n, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep order
