"""Ports of each framework's own human-in-the-loop examples, driven through the real service: gunicorn,
a Celery worker and beat (tests/processes.py), PostgreSQL and Redis, one service per test worker. The agent
runs in the test process on the agentos SDK (agentos.Server), so a test can read what its tools received.
"""

import socket
import uuid

import agentos
import httpx
import pytest
from django.db import connections

from holds.ids import HOLD, RUN, parse_public_id
from holds.models import RunState
from tests import factories
from tests.processes import Processes, free_port, service_env, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_redis]


@pytest.fixture(scope="module")
def service(tmp_path_factory, django_db_setup, django_db_blocker):
    """The web, worker and beat processes, shared by the framework ports of one module (each test
    brings its own capability, key and agent: the test database is emptied after every test). Per
    module, not per session: its worker and beat work on the pytest worker's test database, so a
    service left running claimed, delivered and expired the invocations and holds of every later test
    of that worker (the two-host, race, delivery and fault tests failed beside it)."""
    processes = Processes(tmp_path_factory.mktemp("service"))
    with django_db_blocker.unblock():
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = service_env(redis_url=processes.redis(free_port()), public_url=url)
        processes.gunicorn(env, port)
        processes.worker(env)
        processes.beat(env)
    yield url
    processes.stop_all()
    connections.close_all()


class Drive:
    """One capability served by `handler`, its runs started, read and decided over the service's API."""

    def __init__(self, url: str, handler):
        self.name = f"hitl_{uuid.uuid4().hex[:8]}"
        port = free_port()
        cap = factories.capability(name=self.name, endpoint=f"http://127.0.0.1:{port}", timeout_seconds=60.0)
        self.key = factories.account(f"bot-{self.name}", role="member")[1]
        self.port, self.secret = port, cap.secret
        self.agent = self._serve(handler)
        self.api = httpx.Client(base_url=url, headers={"authorization": f"Bearer {self.key}"}, timeout=30)

    def run(self, run_id: str) -> dict:
        return self.api.get(f"/v0/runs/{run_id}").json()

    def start(self, input: dict) -> str:
        response = self.api.post("/v0/runs", json={"capability": self.name, "input": input})
        assert response.status_code == 201, response.text
        return response.json()["run_id"]

    def held(self, run_id: str) -> dict:
        """The run's open hold, once the agent has asked and suspended."""
        run = wait_until(
            lambda: (r := self.run(run_id))["status"] in ("held", "failed", "completed") and r, 90, "a hold"
        )
        assert run["status"] == "held", run
        pending = [h for h in run["holds"] if h["status"] == "pending"]
        return self.api.get(f"/v0/holds/{pending[-1]['hold_id']}").json()

    def decide(self, hold: dict, items: list[dict], comment: str | None = None) -> httpx.Response:
        return self.api.post(f"/v0/holds/{hold['hold_id']}/decision", json={"items": items, "comment": comment})

    def finished(self, run_id: str) -> dict:
        return wait_until(
            lambda: (r := self.run(run_id))["status"] in ("completed", "failed") and r, 90, "the resumed run"
        )

    def next_state(self, run_id: str) -> dict:
        """The run once it is held again or finished."""
        return wait_until(
            lambda: (
                (r := self.run(run_id))["status"] in ("completed", "failed", "held")
                and (r["status"] != "held" or any(h["status"] == "pending" for h in r["holds"]))
                and r
            ),
            90,
            "the run to move on",
        )

    def approve(self, hold: dict) -> None:
        """Approves every item of `hold`."""
        items = [{"id": i["id"], "action": "approve"} for i in hold["items"]]
        assert self.decide(hold, items).status_code == 200

    def held_again(self, run_id: str) -> dict:
        """The run's next hold, after a resume: it paused again rather than finished."""
        run = self.next_state(run_id)
        assert run["status"] == "held", run
        return self.held(run_id)

    def expired(self, run_id: str) -> dict:
        """The run once its open hold has expired (beat's real sweep) and the agent was resumed with it."""
        self.expire(self.held(run_id))
        run = self.finished(run_id)
        assert run["holds"][-1]["status"] == "expired", run
        return run

    def at_once(self, inputs: list[dict]) -> list[dict]:
        """Runs started together (the service calls the agent for each at once, on its first use), each
        approved once held; the finished runs, in order."""
        run_ids = [self.start(i) for i in inputs]
        for run_id in run_ids:
            self.approve(self.held(run_id))
        return [self.finished(run_id) for run_id in run_ids]

    def _serve(self, handler) -> agentos.Server:
        server = agentos.Server({self.name: handler}, port=self.port, secret=self.secret)
        # Remember each accepted connection: a restart must end the kept-alive ones too, or the old
        # handler would go on answering the service on them.
        server.connections = []
        accept = server.httpd.get_request

        def get_request():
            conn, addr = accept()
            server.connections.append(conn)
            return conn, addr

        server.httpd.get_request = get_request
        return server.start()

    def restart(self, handler) -> None:
        """The agent process is gone, with its connections; a new one (a new handler, its framework
        objects built anew) answers on the same endpoint."""
        self.agent.stop()
        for conn in self.agent.connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed
        self.agent = self._serve(handler)

    def expire(self, hold: dict) -> None:
        """The hold's deadline passes now; beat's sweep (every second here) expires it."""
        factories.past_due(parse_public_id(hold["hold_id"], HOLD))

    def lose_run_state(self, run_id: str, key: str) -> None:
        """What the agent kept in run state under `key` is gone (the store it resumes from is lost)."""
        assert RunState.objects.filter(run_id=parse_public_id(run_id, RUN), key=key).delete()[0] == 1

    def close(self) -> None:
        self.agent.stop()
        self.api.close()


@pytest.fixture
def drive(service):
    started = []

    def make(handler) -> Drive:
        d = Drive(service, handler)
        started.append(d)
        return d

    yield make
    for d in started:
        d.close()
