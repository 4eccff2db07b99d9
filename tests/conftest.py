import json
import os

import pytest
from django.db import connection

from tests import factories

IN_CI = os.environ.get("CI") == "true"


def require(what: str, present: bool) -> None:
    """A missing service skips with its reason outside CI, and fails the test under CI=true."""
    if present:
        return
    message = f"needs {what}"
    if IN_CI:
        pytest.fail(message + " (CI=true: a missing service is a failure)")
    pytest.skip(message)


@pytest.fixture(autouse=True)
def _required_services(request):
    if request.node.get_closest_marker("needs_postgres"):
        require("PostgreSQL: set DATABASE_URL or run it on 127.0.0.1:5432", connection.vendor == "postgresql")
    if request.node.get_closest_marker("needs_redis"):
        require("Redis: set RQ_TEST_REDIS_URL or run it on 127.0.0.1:6379", bool(os.environ.get("RQ_TEST_REDIS_URL")))


@pytest.fixture(autouse=True)
def _media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


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
