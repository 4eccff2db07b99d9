"""RQ_TRANSACTION_POOLER=1: the hot path (ask, decision, claim, record, sweep) through Debian's PgBouncer
1.18 in transaction pooling mode, where the next transaction may run in another server session."""

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from agentos.tls import tls_context
from django.db import connection, connections
from django.utils import timezone

from holds import services
from holds.models import Hold, Invocation, Run
from holds.services import gateway
from tests import factories
from tests.agent_double import AgentDouble
from tests.conftest import require
from tests.processes import ROOT, Processes, free_port, service_client, service_env, wait_until

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


@contextmanager
def pgbouncer(procs: Processes, listen: list[str], port: int, pool_size: int = 4):
    """PgBouncer in transaction mode before the test's PostgreSQL, its config and auth file in a temp dir
    that it removes. Yields the DATABASE_URL that goes through it to the test database."""
    require("Debian's pgbouncer (apt-get install pgbouncer)", os.path.exists(PGBOUNCER))
    db = connection.settings_dict
    user = db["USER"] or "postgres"
    folder = Path(tempfile.mkdtemp(prefix="rq-pgbouncer-"))
    try:
        folder.chmod(0o755)
        (folder / "users.txt").write_text(f'"{user}" ""\n')
        (folder / "pgbouncer.ini").write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = host={db['HOST'] or '127.0.0.1'} port={db['PORT'] or 5432}",
                    "[pgbouncer]",
                    f"listen_addr = {','.join(listen)}",
                    f"listen_port = {port}",
                    "unix_socket_dir =",
                    "auth_type = trust",
                    f"auth_file = {folder / 'users.txt'}",
                    "pool_mode = transaction",
                    f"default_pool_size = {pool_size}",
                    "max_client_conn = 1000",
                    "server_round_robin = 1",
                    "ignore_startup_parameters = extra_float_digits",
                    f"logfile = {folder / 'pgbouncer.log'}",
                ]
            )
            + "\n"
        )
        # It refuses to run as root (SPEC): as postgres, which owns its log.
        as_root = os.geteuid() == 0
        if as_root:
            owner = pwd.getpwnam("postgres")
            os.chown(folder, owner.pw_uid, owner.pw_gid)
        procs.start("pgbouncer", [PGBOUNCER, *(["-u", "postgres"] if as_root else []), str(folder / "pgbouncer.ini")])
        wait_until(lambda: _answers(listen[0], port), 15, f"pgbouncer ({(folder / 'pgbouncer.log')})")
        yield f"postgres://{user}@{listen[0]}:{port}/{db['NAME']}"
    finally:
        if "pgbouncer" in procs.procs:
            procs.kill("pgbouncer")
        shutil.rmtree(folder, ignore_errors=True)


def _answers(host: str, port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def django_settings(**env) -> subprocess.CompletedProcess:
    code = (
        "import django; django.setup(); from django.conf import settings as s; d = s.DATABASES['default'];"
        " print(s.RQ_TRANSACTION_POOLER, d.get('DISABLE_SERVER_SIDE_CURSORS'),"
        " d.get('OPTIONS', {}).get('prepare_threshold', 5))"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "reviewqueue.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_setting_turns_off_psycopgs_prepared_statements_and_server_side_cursors():
    on = django_settings(RQ_TRANSACTION_POOLER="1", DATABASE_URL="postgres://postgres@127.0.0.1:5432/x")
    assert on.returncode == 0, on.stderr
    assert on.stdout.split() == ["True", "True", "None"]
    off = django_settings(RQ_TRANSACTION_POOLER="0", DATABASE_URL="postgres://postgres@127.0.0.1:5432/x")
    assert off.stdout.split() == ["False", "False", "5"]


@pytest.mark.parametrize(
    "env, message",
    [
        ({"RQ_TRANSACTION_POOLER": "pgbouncer"}, "RQ_TRANSACTION_POOLER must be a boolean (1/0, true/false)"),
        ({"RQ_TRANSACTION_POOLER": "1", "DATABASE_URL": "sqlite:///tmp/x.sqlite3"}, "must be a PostgreSQL URL"),
    ],
)
def test_a_bad_value_stops_the_process_with_a_clear_error(env, message):
    result = django_settings(**env)
    assert result.returncode != 0 and message in result.stderr


def _prepared_in_session() -> int:
    return gateway.fetch("SELECT count(*) FROM pg_prepared_statements")[0][0]


APPROVE = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}


@pytest.mark.django_db(transaction=True)
def test_with_the_setting_the_hot_path_prepares_nothing_in_the_session(settings, cap):
    """Ask, decision, claim, record and sweep with the setting leave no prepared statement in the session;
    the same send without it leaves one (so the count would show one)."""
    settings.RQ_TRANSACTION_POOLER = True
    connection.close()
    run, hold = factories.held_hold(cap)
    services.hold_decide(hold_id=hold.pk, actor=factories.actor_for_account(factories.account("bot")[0]), body=APPROVE)
    resume, _ = factories.deliver_now(run)
    assert factories.answer(resume, {"status": "completed", "output": {}}) == "answered"
    late_run, late = factories.held_hold(cap, factories.ask_body(expires_in=60))
    factories.past_due(late.pk)
    assert services.holds_expire_due() == 1
    assert Run.objects.get(pk=run.pk).status == Run.Status.COMPLETED
    assert Invocation.objects.filter(run=late_run, kind=Invocation.Kind.RESUME).count() == 1
    assert _prepared_in_session() == 0
    settings.RQ_TRANSACTION_POOLER = False
    gateway.send([("SELECT %(a)s::int", {"a": 1})])
    assert _prepared_in_session() == 1
    connection.close()


@pytest.fixture
def procs(tmp_path):
    processes = Processes(tmp_path)
    yield processes
    processes.stop_all()
    connections.close_all()


@pytest.mark.django_db(transaction=True)
def test_behind_pgbouncer_a_session_is_not_the_clients(procs):
    """Why the setting exists: two clients of PgBouncer (pool_mode = transaction, one server connection)
    share a server session, so what one PREPAREs the other meets; holds/services/gateway.py's names (rq_1, …)
    are the same in every process. With the setting nothing is prepared, and both run."""
    import psycopg

    with pgbouncer(procs, ["127.0.0.1"], free_port(), pool_size=1) as url:
        with psycopg.connect(url, autocommit=True) as one, psycopg.connect(url, autocommit=True) as other:
            one.execute("PREPARE rq_1 (bigint) AS SELECT $1")
            with pytest.raises(psycopg.errors.DuplicatePreparedStatement):
                other.execute("PREPARE rq_1 (bigint) AS SELECT $1")
            one.execute("DEALLOCATE ALL")
            for client in (one, other):
                assert client.execute("SELECT %s::bigint", [7]).fetchone() == (7,)
        connections.close_all()


def counting_agent() -> tuple[AgentDouble, list]:
    """An agent that asks through the api_url it is sent, suspends, and completes on its resume; it keeps
    each resume's webhook-id."""
    agent, resumes = AgentDouble(), []

    def answer(request):
        invocation = request["body"]["invocation"]
        if request["body"]["resume"] is not None:
            resumes.append(request["headers"]["webhook-id"])
            return 200, {"status": "completed", "output": {"by": request["body"]["resume"]["resolved_by"]}}
        body = factories.ask_body(expires_in=invocation["input"].get("expires_in", 86400))
        headers = {"x-agentos-run-token": invocation["run_token"]}
        # The one TLS context: a client of its own would load the CA bundle again (27 ms of CPU an ask).
        asked = httpx.post(
            f"{invocation['api_url']}/v0/holds", json=body, headers=headers, timeout=20, verify=tls_context()
        )
        assert asked.status_code == 201, asked.text
        return 200, {"status": "suspended", "hold_id": asked.json()["hold_id"]}

    agent.default = answer
    return agent, resumes


@pytest.mark.django_db(transaction=True)
@pytest.mark.needs_redis
def test_the_hot_path_through_pgbouncer_in_transaction_mode(procs):
    """Runs ask (through gunicorn), are decided (through gunicorn), their resumes claimed and recorded by
    a worker, and one hold expires (beat's sweep): through PgBouncer with two server connections for
    many clients, so one client's transactions land in different sessions."""
    agent, resumes = counting_agent()
    web_port = free_port()
    web = f"http://127.0.0.1:{web_port}"
    cap = factories.capability(endpoint=agent.url, timeout_seconds=10.0)
    key = factories.account("ci-bot", role="member")[1]
    try:
        with pgbouncer(procs, ["127.0.0.1"], free_port(), pool_size=2) as through:
            env = service_env(
                redis_url=procs.redis(free_port()),
                public_url=web,
                DATABASE_URL=through,
                RQ_TRANSACTION_POOLER="1",
                RQ_RATE_DECISION="off",
            )
            procs.gunicorn(env, web_port)
            procs.worker(env, concurrency=4)
            procs.beat(env)
            client = service_client(web, key, timeout=20)
            started = [client.post("/v0/runs", json={"capability": cap.name, "input": {}}) for _ in range(30)]
            started.append(client.post("/v0/runs", json={"capability": cap.name, "input": {"expires_in": 60}}))
            assert {r.status_code for r in started} == {201}
            wait_until(lambda: Hold.objects.count() == 31, 60, "31 asks")
            soon = Hold.objects.filter(expires_at__lt=timezone.now() + timedelta(minutes=5))
            assert soon.update(expires_at=timezone.now()) == 1  # beat's sweep expires it
            for hold in Hold.objects.filter(expires_at__gt=timezone.now() + timedelta(minutes=5)):
                decided = client.post(f"/v0/holds/{hold.public_id}/decision", json=APPROVE)
                assert decided.status_code == 200, decided.text
            wait_until(lambda: Run.objects.filter(status=Run.Status.COMPLETED).count() == 31, 60, "31 runs done")
    finally:
        agent.close()
    assert Hold.objects.filter(status=Hold.Status.EXPIRED).count() == 1
    assert Hold.objects.filter(status=Hold.Status.DECIDED).count() == 30
    resume_ids = set(Invocation.objects.filter(kind=Invocation.Kind.RESUME).values_list("id", flat=True))
    assert sorted(resumes) == sorted(resume_ids) and len(resume_ids) == 31
    assert "prepared statement" not in procs.log("worker") + procs.log("gunicorn")


@pytest.mark.django_db(transaction=True)
def test_the_embedded_broker_through_pgbouncer_sets_and_prepares_nothing_in_a_session(procs):
    """Issue 30.5: with RQ_TRANSACTION_POOLER the broker (reviewqueue/broker.py) shared PgBouncer's one
    server session with the app: its `SET synchronous_commit = off` reached other clients' transactions
    (decision commits non-durable) and psycopg's prepared `_pg3_0` collided (15 of 20 consumed)."""
    import psycopg
    from kombu import Connection

    with pgbouncer(procs, ["127.0.0.1"], free_port(), pool_size=1) as url:
        options = {"dsn": url, "transaction_pooler": True, "visibility_timeout": 60}
        with (
            Connection("rqpg://", transport_options=options) as publisher,
            Connection("rqpg://", transport_options=options) as consumer,
        ):
            queue = publisher.SimpleQueue("pooler-test")
            taken = consumer.SimpleQueue("pooler-test")
            consumed = []
            for n in range(20):
                queue.put({"n": n})  # past psycopg's prepare threshold (5) on each connection
                message = taken.get(timeout=5)
                consumed.append(message.payload["n"])
                message.ack()
            assert consumed == list(range(20))
            queue.close()
            taken.close()
        with psycopg.connect(url, autocommit=True) as app:
            # The only server session there is: whatever the broker left in it, the app meets.
            assert app.execute("SHOW synchronous_commit").fetchone() == ("on",)
            assert app.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (0,)
        connections.close_all()
