"""The no-Redis broker (reviewqueue/broker.py, `rqpg://`) between real processes: publishers, and a
Celery worker started with beat (`-B`), as `make run` has them. kombu's filesystem transport let a
worker read a message file before its writer had finished (kombu issue 1551); such a worker died
5 s after start with `Unrecoverable error: JSONDecodeError`."""

import os
import signal
import subprocess
import sys
import time
from urllib.parse import quote

import pytest
from celery import shared_task
from django.db import connection, connections

from holds.services import gateway
from tests.processes import ROOT, VENV_BIN, Processes, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

PUBLISHERS = 4
MESSAGES = 10_000
SEEN = "broker_test_seen"


@shared_task(name="tests.broker.seen")
def seen(n: int) -> None:
    """The worker's side: one row per message it ran."""
    gateway.fetch(f"INSERT INTO {SEEN} (n) VALUES (%s)", [n])


@shared_task(name="tests.broker.slow", bind=True)
def slow(self, n: int) -> None:
    if self.request.hostname.startswith("first@"):
        time.sleep(60)  # killed in here
    seen(n)


PUBLISH = """
import sys
import django
from reviewqueue.celery import app
django.setup()
first, last, name = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
with app.producer_or_acquire() as producer:
    for n in range(first, last):
        app.send_task(name, args=[n], producer=producer)
"""


def database_url() -> str:
    db = connection.settings_dict
    host = quote(db["HOST"] or "127.0.0.1", safe="")
    return f"postgres://{db['USER'] or 'postgres'}@{host}:{db['PORT'] or 5432}/{db['NAME']}"


def broker_env(**extra) -> dict:
    """The service's processes on the test database with the default broker: no Redis anywhere."""
    return {
        "DATABASE_URL": database_url(),
        "REDIS_URL": "",
        "CELERY_BROKER_URL": "rqpg://",
        "RQ_CELERY_IMPORTS": "tests.test_broker_embedded",
        # Beat publishes every second while the publishers run, through the same table.
        "RQ_RELAY_INTERVAL": "1",
        "RQ_SWEEP_INTERVAL": "1",
        "RQ_REMIND_INTERVAL": "1",
        "RQ_ROLLUP_INTERVAL": "1",
        "DEBUG": "0",
        # The task's own row is written on a kept connection: the test measures the broker, not connects.
        "DB_CONN_MAX_AGE": "60",
        **extra,
    }


def counts() -> tuple[int, int]:
    return gateway.fetch(f"SELECT count(*), count(DISTINCT n) FROM {SEEN}")[0]


@pytest.fixture
def seen_table():
    gateway.fetch(f"CREATE TABLE IF NOT EXISTS {SEEN} (n int NOT NULL)")
    gateway.fetch(f"TRUNCATE {SEEN}")
    gateway.fetch("DROP TABLE IF EXISTS rq_broker_message")  # no messages of an earlier test
    yield
    gateway.fetch(f"DROP TABLE IF EXISTS {SEEN}")


@pytest.fixture
def procs(tmp_path):
    processes = Processes(tmp_path)
    yield processes
    processes.stop_all()
    connections.close_all()


def start_worker(procs: Processes, tmp_path, name: str, env: dict, beat: bool) -> None:
    args = [str(VENV_BIN / "celery"), "-A", "reviewqueue", "worker", "-l", "info"]
    args += ["--pool", "threads", "--concurrency", "4", "-n", f"{name}@%h"]
    if beat:
        args += ["-B", "-s", str(tmp_path / "beat-schedule")]
    procs.start(name, args, env)
    wait_until(lambda: " ready." in procs.log(name), 60, f"{name} to start")


def test_it_delivers_every_message_of_four_publishers_exactly_once_to_a_worker_with_beat(procs, tmp_path, seen_table):
    env = broker_env()
    start_worker(procs, tmp_path, "worker", env, beat=True)
    worker = procs.procs["worker"]
    share = MESSAGES // PUBLISHERS
    publishers = [
        subprocess.Popen(
            [sys.executable, "-c", PUBLISH, str(i * share), str((i + 1) * share), "tests.broker.seen"],
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for i in range(PUBLISHERS)
    ]
    for publisher in publishers:
        output, _ = publisher.communicate(timeout=300)
        assert publisher.returncode == 0, output.decode()[-3000:]

    wait_until(lambda: counts()[0] >= MESSAGES, 300, "the worker to run every message", interval=0.5)
    time.sleep(3)  # a duplicate would arrive now
    assert counts() == (MESSAGES, MESSAGES)

    log = procs.log("worker")
    assert worker.poll() is None, log[-3000:]
    assert "Unrecoverable error" not in log and "Traceback" not in log, log[-3000:]
    # Beat was publishing through the same table all along, and the worker ran its tasks.
    assert "Scheduler: Sending due task relay-due-invocations" in log
    assert "holds.tasks.relay_due" in log and "holds.tasks.sweep_expired" in log
    left = gateway.fetch("SELECT count(*) FROM rq_broker_message WHERE payload LIKE %s", ["%tests.broker.seen%"])
    assert left[0][0] == 0  # every message acked, none left behind


def test_it_gives_a_killed_workers_message_to_the_next_worker(procs, tmp_path, seen_table):
    # Reserved, never acked: after the visibility timeout the message is visible again.
    env = broker_env(RQ_BROKER_VISIBILITY_TIMEOUT="3")
    start_worker(procs, tmp_path, "first", env, beat=False)
    subprocess.run(
        [sys.executable, "-c", PUBLISH, "7", "8", "tests.broker.slow"], cwd=ROOT, env={**os.environ, **env}, check=True
    )
    wait_until(lambda: "tests.broker.slow" in procs.log("first") and "received" in procs.log("first"), 30, "a take")
    procs.kill("first", signal.SIGKILL)
    start_worker(procs, tmp_path, "second", env, beat=False)
    wait_until(lambda: counts() == (1, 1), 90, "the second worker to run the message")
