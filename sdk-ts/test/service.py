"""The real Review Queue for the TypeScript SDK's tests: a fresh PostgreSQL database (a copy of a migrated
template, `migrated_template`, which stays on the server for the next run), a private Redis,
gunicorn, a Celery worker and beat (tests/processes.py starts them as the Python e2e tests do).

    python sdk-ts/test/service.py --database NAME --capabilities '{"pay_invoices": {"endpoint": …, "secret": …}}'

Prints one JSON line, {"url", "key", "database_url"}, once everything answers; then runs until its stdin
closes or it gets SIGTERM, stops what it started and drops the database.

Meanwhile it reads commands from stdin, one a line, and answers each with one JSON line on stdout:

    past_due h_7    ->  {"past_due": "h_7", "updated": 1}   (0: no such hold)

A test of expiry asks its hold with SPEC's shortest expires_in (60 s) and then moves the deadline to
now rather than waiting out the minute; the beat's sweep and the worker still do everything after it.
"""

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def database_url(name: str) -> str:
    base = urlsplit(os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/reviewqueue")
    return urlunsplit(base._replace(path="/" + name))


def migrated_template(conn) -> str:
    """A database with every migration applied, which each service's fresh database copies (0.2 s) instead
    of migrating its own (3 s of CPU, six services a run). Made once per set of migrations: its name
    carries their hash, so a changed migration makes a new one (and the old ones are dropped). Three test
    files start their services at once: an advisory lock lets one make it while the others wait."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "holds" / "migrations").glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    prefix = "rq_ts_template_"
    name = prefix + digest.hexdigest()[:16]
    conn.execute("SELECT pg_advisory_lock(hashtext(%s))", [prefix])
    try:
        if conn.execute("SELECT FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            stale = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", [prefix + "%"]).fetchall()
            for (old,) in stale:
                conn.execute(f'DROP DATABASE "{old}" WITH (FORCE)')
            making = name + "_making"  # renamed once migrated: a run killed midway leaves no half-made template
            conn.execute(f'DROP DATABASE IF EXISTS "{making}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{making}"')
            env = dict(os.environ, DATABASE_URL=database_url(making))
            subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "-v0"], env=env, check=True)
            conn.execute(f'ALTER DATABASE "{making}" RENAME TO "{name}"')
    finally:
        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", [prefix])
    return name


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database", required=True, help="the fresh database's name (dropped first if it exists)")
    parser.add_argument("--capabilities", required=True, help="JSON: {name: {endpoint, secret, …}}")
    args = parser.parse_args()
    url = database_url(args.database)
    os.environ.update(DATABASE_URL=url, DEBUG="0", SECRET_KEY="ts-sdk-tests-" + os.urandom(32).hex())
    os.environ.pop("REDIS_URL", None)  # this process needs no cache; the service gets its own Redis
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewqueue.settings")

    import psycopg

    admin_url = urlunsplit(urlsplit(url)._replace(path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
        template = migrated_template(conn)
        conn.execute(f'CREATE DATABASE "{args.database}" TEMPLATE "{template}"')

    import django

    django.setup()
    from django.db import connections

    from holds import services
    from holds.auth import SYSTEM
    from holds.config import CapabilitySpec
    from holds.ids import HOLD, parse_public_id
    from tests.factories import past_due
    from tests.processes import Processes, free_port, service_env

    specs = [CapabilitySpec(name=name, values=values) for name, values in json.loads(args.capabilities).items()]
    services.capabilities_sync(specs=specs, actor=SYSTEM)
    _, key = services.service_account_create(name="ts-sdk-tests", role="member", actor=SYSTEM)

    log_dir = Path(tempfile.mkdtemp(prefix=f"{args.database}-"))
    procs = Processes(log_dir)
    stopping = threading.Event()

    def stop(*_):
        stopping.set()

    def serve_commands():
        try:
            for line in sys.stdin:
                command, _, hold_id = line.strip().partition(" ")
                if command != "past_due":
                    raise ValueError(f"unknown command {line!r}")
                try:
                    past_due(parse_public_id(hold_id, HOLD))
                    updated = 1
                except AssertionError:  # past_due's check that it moved exactly this one hold
                    updated = 0
                print(json.dumps({"past_due": hold_id, "updated": updated}), flush=True)
        finally:
            # Stdin closes when the test process ends, however it ends; an error here ends the service
            # loudly too (the harness rejects what it was waiting for when this process exits).
            connections.close_all()  # this thread's own connection
            stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        web_port = free_port()
        web = f"http://127.0.0.1:{web_port}"
        redis_url = os.environ.get("RQ_TS_REDIS_URL") or procs.redis(free_port())
        # Retries a second apart, so that a test of a lost answer does not wait out the real schedule.
        env = service_env(
            redis_url=redis_url,
            public_url=web,
            SECRET_KEY=os.environ["SECRET_KEY"],
            RQ_RETRY_SCHEDULE="0,1,1,1,1,1,1,1",
        )
        # service_env sets RQ_SWEEP_INTERVAL=1, so a deadline moved to now is swept within a second.
        procs.gunicorn(env, web_port)
        procs.worker(env)
        procs.beat(env)
        print(json.dumps({"url": web, "key": key, "database_url": url, "logs": str(log_dir)}), flush=True)
        threading.Thread(target=serve_commands, daemon=True).start()
        stopping.wait()
    finally:
        procs.stop_all()
        connections.close_all()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')


if __name__ == "__main__":
    main()
