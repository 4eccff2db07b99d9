"""The cost of PgBouncer in transaction mode (RQ_TRANSACTION_POOLER=1), side by side with the direct connection.

Runs bench/ask.py and bench/resume.py twice each, alternating: once straight to PostgreSQL, once with
every process of the benchmark (its own, gunicorn's, the workers') going through Debian's PgBouncer
1.18 in transaction mode with RQ_TRANSACTION_POOLER=1, and prints their figures next to each other
(var/bench/pooler.json). Fewer rounds than `make bench` (RQ_BENCH_ROUNDS, RQ_BENCH_DRAIN_ROUNDS).
PgBouncer refuses to run as root: run as root, it is started as postgres (-u postgres).
"""

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "var" / "bench"
PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_pgbouncer(folder: Path, port: int, pool_size: int) -> subprocess.Popen:
    (folder / "users.txt").write_text('"postgres" ""\n')
    (folder / "pgbouncer.ini").write_text(
        f"""[databases]
* = host=127.0.0.1 port=5432
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder / "users.txt"}
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 1000
ignore_startup_parameters = extra_float_digits
logfile = {folder / "pgbouncer.log"}
"""
    )
    as_root = os.geteuid() == 0
    if as_root:
        folder.chmod(0o755)
        owner = pwd.getpwnam("postgres")
        os.chown(folder, owner.pw_uid, owner.pw_gid)
    proc = subprocess.Popen([PGBOUNCER, *(["-u", "postgres"] if as_root else []), str(folder / "pgbouncer.ini")])
    for _ in range(100):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"pgbouncer did not start; see {folder / 'pgbouncer.log'}")


def run(script: str, env: dict) -> list[dict]:
    subprocess.run([sys.executable, f"bench/{script}.py"], cwd=ROOT, env={**os.environ, **env}, check=True)
    return json.loads((RESULTS / f"{script}.json").read_text())["rows"]


def main():
    pool_size = int(os.environ.get("RQ_BENCH_POOL_SIZE", "20"))
    folder = Path(tempfile.mkdtemp(prefix="rq-bench-pgbouncer-"))
    port = free_port()
    bouncer = start_pgbouncer(folder, port, pool_size)
    pooled = {"RQ_BENCH_DB_PORT": str(port), "RQ_TRANSACTION_POOLER": "1"}
    quick = {"RQ_BENCH_ROUNDS": os.environ.get("RQ_BENCH_ROUNDS", "5")}
    quick["RQ_BENCH_DRAIN_ROUNDS"] = os.environ.get("RQ_BENCH_DRAIN_ROUNDS", "1")
    figures: dict[str, dict] = {}
    try:
        for script in os.environ.get("RQ_BENCH_POOLER_SCRIPTS", "ask,resume").split(","):
            for how, env in (("direct", {}), ("pgbouncer", pooled)) * int(os.environ.get("RQ_BENCH_REPEATS", "2")):
                print(f"pooler: {script} {how}", flush=True)
                for row in run(script, {**quick, **env}):
                    figures.setdefault(row["figure"], {}).setdefault(how, []).append(row["measured"])
    finally:
        bouncer.terminate()
        bouncer.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "pooler.json").write_text(json.dumps({"pool_size": pool_size, "figures": figures}, indent=2))
    for figure, by in figures.items():
        print(f"{figure}\n  direct:    {by.get('direct')}\n  pgbouncer: {by.get('pgbouncer')}")


if __name__ == "__main__":
    main()
