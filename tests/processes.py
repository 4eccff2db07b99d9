"""Real processes for end-to-end tests: a private Redis, Celery worker and beat, gunicorn, agents.

Each process starts in its own session so that a test can SIGKILL it with everything it forked,
and every process is stopped when the test ends, whatever happened.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

import httpx
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def service_client(url: str, key: str, timeout: float) -> httpx.Client:
    """An API client of a gunicorn started here. It drops a connection idle for a second, before gunicorn
    closes it (its keepalive is 2 s): a request sent as the server closes the connection fails with no
    answer ("Server disconnected", a reset), and a client cannot tell whether a POST so lost was done."""
    return httpx.Client(
        base_url=url,
        headers={"authorization": f"Bearer {key}"},
        timeout=timeout,
        limits=httpx.Limits(keepalive_expiry=1.0),
    )


def answers_http(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=1)
        return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


class Processes:
    """Starts and owns processes; `stop_all()` ends them (the fixture calls it)."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, args: list[str], env: dict | None = None) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "ab")
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs[name] = proc
        return proc

    def kill(self, name: str, sig=signal.SIGKILL) -> None:
        proc = self._signal(name, sig)
        self._reap(proc)

    def _signal(self, name: str, sig) -> subprocess.Popen:
        proc = self.procs.pop(name)
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        return proc

    @staticmethod
    def _reap(proc: subprocess.Popen) -> None:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            # A worker's warm shutdown waits for its running tasks (a delivery to an agent that
            # hangs until its timeout); at teardown nothing is left to finish, so end it.
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

    def stop_all(self) -> None:
        """Every process is told at once and then waited for (one after another, their shutdowns
        added up to 2-4 s of a framework module's teardown); Redis last, so that no worker's warm
        shutdown meets a lost broker."""
        stopping = [self._signal(name, signal.SIGTERM) for name in list(self.procs) if name != "redis"]
        for proc in stopping:
            self._reap(proc)
        if "redis" in self.procs:
            self.kill("redis")

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # --- the parts ---------------------------------------------------------------------------

    def redis(self, port: int) -> str:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.start("redis", [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        url = f"redis://127.0.0.1:{port}/0"
        wait_until(lambda: _tcp_open(port), 10, "redis")
        return url

    def worker(self, env: dict, name: str = "worker", concurrency: int = 2) -> None:
        self.start(
            name,
            [
                str(VENV_BIN / "celery"),
                "-A",
                "reviewqueue",
                "worker",
                "-l",
                "info",
                "--concurrency",
                str(concurrency),
                "-n",
                f"{name}@%h",
            ],
            env,
        )

    def beat(self, env: dict) -> None:
        schedule = self.log_dir / "beat-schedule"
        self.start(
            "beat", [str(VENV_BIN / "celery"), "-A", "reviewqueue", "beat", "-l", "info", "-s", str(schedule)], env
        )

    def gunicorn(self, env: dict, port: int) -> str:
        self.start(
            "gunicorn",
            [
                str(VENV_BIN / "gunicorn"),
                "reviewqueue.wsgi",
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                "2",
                "--threads",
                "4",
            ],
            env,
        )
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: answers_http(url + "/healthz") or answers_http(url + "/v0/holds"), 30, "gunicorn")
        return url

    def uvicorn(self, env: dict, port: int) -> str:
        """The ASGI process (reviewqueue/asgi.py): /mcp, and the Django app for the rest."""
        self.start(
            "uvicorn",
            [str(VENV_BIN / "uvicorn"), "reviewqueue.asgi:application", "--host", "127.0.0.1", "--port", str(port)],
            env,
        )
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: answers_http(url + "/healthz"), 30, "uvicorn")
        return url

    def agent(self, env: dict, port: int, script: str = "examples/pay_invoices.py") -> str:
        self.start("agent", [sys.executable, script, "--port", str(port)], env)
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _tcp_open(port), 20, "the agent")
        return url


def _tcp_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def service_env(*, redis_url: str, public_url: str = "http://127.0.0.1:9", **extra) -> dict:
    """What the service's own processes need to share the test database and the test's keys."""
    db = connection.settings_dict
    # An embedded server's HOST is its socket directory, which a URL carries percent-encoded.
    host = quote(db["HOST"] or "127.0.0.1", safe="")
    database_url = f"postgres://{db['USER'] or 'postgres'}@{host}:{db['PORT'] or 5432}/{db['NAME']}"
    env = {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": redis_url,
        "RQ_PUBLIC_URL": public_url,
        "RQ_RELAY_INTERVAL": "1",
        "RQ_SWEEP_INTERVAL": "1",
        "RQ_LEASE_GRACE": "1",
        "RQ_RELAY_LEASE": "2",
        "DEBUG": "0",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "0",
    }
    env.update({k: str(v) for k, v in extra.items()})
    return env
