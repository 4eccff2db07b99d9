"""Two hosts on this machine, one of them lost midway, and every resume still delivered exactly once.

Each host is a network namespace made here with a veth pair to the root namespace, and runs gunicorn
and a Celery worker. PostgreSQL (behind PgBouncer in transaction mode), Redis, one beat and the agent
stay in the root namespace; PgBouncer, Redis and the agent listen on the root side of the veth pairs.
Everything is built and torn down here, on failure too.
"""

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from agentos.tls import tls_context
from django.db import connection, connections
from django.db.models import F, Sum
from django.db.models.functions import Now
from django.utils import timezone

from holds import delivery, notifications, notify_tasks, rollup, services, tasks
from holds.models import AuditEvent, AuditKind, Hold, Invocation, Notification, OpsHour, OpsTotal, PendingCount, Run
from tests import factories
from tests.agent_double import AgentDouble
from tests.conftest import require
from tests.processes import VENV_BIN, Processes, free_port, service_client, wait_until
from tests.test_pooler import pgbouncer

pytestmark = pytest.mark.serial  # processes timed against each other: run alone (scripts/test)

RUNS = 1000
CONTESTED = RUNS // 10  # holds that 8 decisions race for
RACERS = 8
TIMEOUT = 8  # the capability's timeout: a lease is this plus RQ_LEASE_GRACE (long enough for a busy CI)
GRACE = 4
RELAY = 5  # seconds between beat's relays, as in production (each relay publishes every due row again)
DRAIN = 150  # resumes in each burst that the workers of one host, then of both, drain
BATCH = 200  # runs started at once: the asks of one batch are in before the next starts
AGENT_DELAY = 0.05  # seconds the agent takes over a resume, so that some are in flight when a host dies
APPROVE = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True, timeout=30)


@dataclass
class Host:
    name: str
    namespace: str
    outside: str  # the root namespace's end of its veth pair
    inside: str  # the host's address

    def pids(self) -> list[int]:
        return [int(pid) for pid in _ip("netns", "pids", self.namespace, check=False).stdout.split()]

    def kill_everything(self) -> int:
        pids = self.pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(pids)


def _free_subnet() -> ipaddress.IPv4Network:
    """A 10.213.x.0/24 that no address or route on this machine uses yet."""
    used = _ip("-o", "addr").stdout + _ip("route").stdout
    for third in range(7, 255):
        if f"10.213.{third}." not in used:
            return ipaddress.ip_network(f"10.213.{third}.0/24")
    raise AssertionError("no free 10.213.x.0/24")


@contextmanager
def two_hosts():
    """Two namespaces, each with a veth pair (a /30 of one private /24) and a route to the rest of the /24
    through the root namespace. Removes them (and anything still running in them) when it ends."""
    require("root and iproute2 for `ip netns`", os.geteuid() == 0 and shutil.which("ip") is not None)
    subnet = _free_subnet()
    addresses = list(subnet.hosts())
    tag = f"{os.getpid() % 100000}"
    hosts: list[Host] = []
    try:
        for n in (1, 2):
            outside, inside = str(addresses[4 * n - 4]), str(addresses[4 * n - 3])  # .1/.2, .5/.6
            host = Host(f"host{n}", f"rq-pool-{tag}-{n}", outside, inside)
            _ip("netns", "add", host.namespace)
            hosts.append(host)
            out_link, in_link = f"rq{tag}o{n}", f"rq{tag}i{n}"
            _ip("link", "add", out_link, "type", "veth", "peer", "name", in_link)
            _ip("link", "set", in_link, "netns", host.namespace)
            _ip("addr", "add", f"{outside}/30", "dev", out_link)
            _ip("link", "set", out_link, "up")
            _ip("-n", host.namespace, "addr", "add", f"{inside}/30", "dev", in_link)
            _ip("-n", host.namespace, "link", "set", in_link, "up")
            _ip("-n", host.namespace, "link", "set", "lo", "up")
            _ip("-n", host.namespace, "route", "add", str(subnet), "via", outside)
        yield hosts
    finally:
        for host in hosts:
            host.kill_everything()
            # Deleting the namespace deletes its end of the veth pair, and so the pair.
            _ip("netns", "del", host.namespace, check=False)


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # a burst of sends from two workers' threads
    daemon_threads = True


class CountingAgent:
    """The agent: asks through the api_url it is sent (its host's web) and suspends, and completes on its
    resume. Every delivery is kept with its webhook-id, the sending host's address and when it came."""

    def __init__(self, address: str):
        self.lock = threading.Lock()
        self.deliveries: list[tuple[str, str, str, float]] = []  # (webhook-id, kind, sender, monotonic)
        self.in_flight: dict[str, set[str]] = defaultdict(set)  # sender -> webhook-ids being answered
        self.asks: Counter = Counter()
        agent = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                body, webhook_id, sender = json.loads(raw), self.headers["webhook-id"], self.client_address[0]
                invocation = body["invocation"]
                with agent.lock:
                    agent.deliveries.append((webhook_id, invocation["kind"], sender, time.monotonic()))
                    agent.in_flight[sender].add(webhook_id)
                try:
                    if body["resume"] is not None:
                        time.sleep(AGENT_DELAY)
                        answer = {"status": "completed", "output": {"by": body["resume"]["resolved_by"]}}
                    else:
                        # A connection of its own, as before, with the one TLS context (a client of its
                        # own would load the CA bundle again, 27 ms of CPU). Keeping one client's
                        # connections alive raced gunicorn closing them: "connection reset" on an ask.
                        asked = httpx.post(
                            f"{invocation['api_url']}/v0/holds",
                            json=factories.ask_body(),
                            headers={"x-agentos-run-token": invocation["run_token"]},
                            timeout=30,
                            verify=tls_context(),
                        )
                        asked.raise_for_status()
                        with agent.lock:
                            agent.asks[invocation["api_url"]] += 1
                        answer = {"status": "suspended", "hold_id": asked.json()["hold_id"]}
                    payload = json.dumps(answer).encode()
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the sender was killed
                finally:
                    with agent.lock:
                        agent.in_flight[sender].discard(webhook_id)

            def log_message(self, *args):
                pass

        self.server = _Server((address, 0), Handler)
        self.url = f"http://{address}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()

    def resumes(self) -> set[str]:
        with self.lock:
            return {webhook_id for webhook_id, kind, *_ in self.deliveries if kind == "resume"}

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def procs(tmp_path):
    processes = Processes(tmp_path)
    yield processes
    processes.stop_all()
    connections.close_all()


def _redis(procs: Processes, binds: list[str], port: int) -> None:
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    args = ["--port", str(port), "--bind", *binds, "--protected-mode", "no", "--save", "", "--appendonly", "no"]
    procs.start("redis", [binary, *args])
    wait_until(lambda: _open(binds[0], port), 10, "redis")


def _open(host: str, port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _host_env(host: Host, *, database: str, redis_port: int, web_port: int) -> dict:
    redis = f"redis://{host.outside}:{redis_port}/0"
    return {
        "DATABASE_URL": database.replace("@127.0.0.1:", f"@{host.outside}:"),
        "RQ_TRANSACTION_POOLER": "1",
        "REDIS_URL": redis,
        "CELERY_BROKER_URL": redis,
        "RQ_PUBLIC_URL": f"http://{host.inside}:{web_port}",
        "RQ_RELAY_INTERVAL": str(RELAY),
        "RQ_LEASE_GRACE": str(GRACE),
        "RQ_RATE_ASK": "off",
        "RQ_RATE_DECISION": "off",
        "RQ_RATE_RUN_START": "off",
        "DEBUG": "0",
        "ALLOWED_HOSTS": host.inside,
        "SECURE_SSL_REDIRECT": "0",
    }


def _start_host(procs: Processes, host: Host, env: dict, web_port: int) -> str:
    inside = ["ip", "netns", "exec", host.namespace]
    procs.start(
        f"{host.name}-web",
        [*inside, str(VENV_BIN / "gunicorn"), "reviewqueue.wsgi", "--bind", f"{host.inside}:{web_port}"]
        + ["--workers", "2", "--threads", "4"],
        env,
    )
    procs.start(
        f"{host.name}-worker",
        [*inside, str(VENV_BIN / "celery"), "-A", "reviewqueue", "worker", "-l", "warning"]
        + ["--pool", "threads", "--concurrency", "8", "-n", f"{host.name}@%h"],
        env,
    )
    return f"http://{host.inside}:{web_port}"


@pytest.mark.django_db(transaction=True)
@pytest.mark.needs_redis
def test_two_hosts_one_lost_midway_every_resume_delivered_exactly_once(procs, capsys):
    with two_hosts() as hosts, reported(procs, capsys, "two hosts") as report:
        agent = CountingAgent(hosts[0].outside)
        try:
            _run(procs, hosts, agent, report)
        finally:
            agent.close()


@contextmanager
def reported(procs: Processes, capsys, title: str):
    """Yields the report a two-host run writes its figures into, and prints it, however the run ends;
    on a failure, the hosts' errors first (their logs go with the test's temp dir)."""
    began, report = time.monotonic(), {}
    try:
        yield report
    except BaseException:
        with capsys.disabled():
            print(_server_errors(procs))
        raise
    finally:
        procs.stop_all()
        report["test_s"] = round(time.monotonic() - began)
        with capsys.disabled():
            print(f"\n{title}: {json.dumps(report)}")


def _server_errors(procs: Processes) -> str:
    lines = []
    for log in sorted(procs.log_dir.glob("host*.log")):
        errors = [
            line for line in log.read_text(errors="replace").splitlines() if "ERROR" in line or "Traceback" in line
        ]
        lines += [f"{log.name}: {len(errors)} error lines", *errors[-10:]]
    return "\n".join(lines)


@contextmanager
def deployed(procs: Processes, hosts: list[Host], key: str):
    """The deployment: Redis and PgBouncer in the root namespace, each host's web and worker, one beat.
    Yields an API client (with `key`) per host once every web answers."""
    connections.close_all()
    redis_port, web_port, bouncer_port = free_port(), free_port(), free_port()
    _redis(procs, ["127.0.0.1", *(h.outside for h in hosts)], redis_port)
    with pgbouncer(procs, ["127.0.0.1", *(h.outside for h in hosts)], bouncer_port, pool_size=10) as database:
        envs = {h.name: _host_env(h, database=database, redis_port=redis_port, web_port=web_port) for h in hosts}
        webs = {h.name: _start_host(procs, h, envs[h.name], web_port) for h in hosts}
        beat_env = {**envs["host1"], "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0", "DATABASE_URL": database}
        beat_env["CELERY_BROKER_URL"] = beat_env["REDIS_URL"]
        schedule = procs.log_dir / "beat-schedule"
        procs.start("beat", [str(VENV_BIN / "celery"), "-A", "reviewqueue", "beat", "-s", str(schedule)], beat_env)
        for url in webs.values():
            wait_until(lambda url=url: _answers(url + "/healthz"), 60, f"{url}")
        yield {name: service_client(url, key, timeout=30) for name, url in webs.items()}


def _run(procs: Processes, hosts: list[Host], agent: CountingAgent, report: dict) -> None:
    """Does it all, and writes what it measured into `report` before it checks anything."""
    cap = factories.capability(endpoint=agent.url, timeout_seconds=float(TIMEOUT))
    key = factories.account("ci-bot", role="member")[1]
    with deployed(procs, hosts, key) as clients:
        report_began = time.monotonic()

        # 1,000 runs started through both hosts; the workers deliver them and the agent asks through the
        # web of the host that delivered its start.
        started = []
        with ThreadPoolExecutor(8) as pool:
            for at in range(0, RUNS, BATCH):
                started += pool.map(
                    lambda n: clients[f"host{n % 2 + 1}"].post("/v0/runs", json={"capability": cap.name, "input": {}}),
                    range(at, at + BATCH),
                )
                wait_until(lambda at=at: Hold.objects.count() == at + BATCH, 60, f"{at + BATCH} asks")
        assert Counter(r.status_code for r in started) == {201: RUNS}
        unanswered = Invocation.objects.filter(kind=Invocation.Kind.START).exclude(status=Invocation.Status.ANSWERED)
        wait_until(lambda: not unanswered.exists(), 60, "the starts' answers recorded")
        report["asked_s"] = round(time.monotonic() - report_began, 1)
        assert len(agent.asks) == 2 and sum(agent.asks.values()) == RUNS, agent.asks

        # Decisions through both hosts, 8 at once on a tenth of the holds; midway host1 is lost.
        holds = list(Hold.objects.order_by("?").values_list("pk", flat=True))
        public = {pk: Hold(pk=pk).public_id for pk in holds}
        contested = set(holds[:CONTESTED])
        lost = threading.Event()
        answers: dict[int, list[int]] = defaultdict(list)
        done = Counter()

        def post(n: int, hold: int) -> int:
            """One decision, through host1 or host2 until host1 is lost; a request that the lost host
            dropped is sent again through the other, as a load balancer would."""
            name = "host2" if lost.is_set() or n % 2 else "host1"
            try:
                return clients[name].post(f"/v0/holds/{public[hold]}/decision", json=APPROVE).status_code
            except httpx.TransportError:
                assert lost.is_set() or name == "host1"
                return clients["host2"].post(f"/v0/holds/{public[hold]}/decision", json=APPROVE).status_code

        def decide(index: int, hold: int) -> None:
            if hold in contested:
                barrier = threading.Barrier(RACERS)

                def race(n):
                    barrier.wait()
                    return post(n, hold)

                with ThreadPoolExecutor(RACERS) as racers:
                    statuses = list(racers.map(race, range(RACERS)))
            else:
                statuses = [post(index, hold)]
            answers[hold].extend(statuses)
            done["decided"] += 1

        killed = {}

        def lose_host1() -> None:
            """Midway, when host1 is sending resumes to the agent, every process of it is SIGKILLed."""
            wait_until(lambda: done["decided"] >= len(holds) // 2, 120, "half the decisions")
            wait_until(lambda: len(agent.in_flight[hosts[0].inside]) >= 2, 60, "host1 sending resumes", interval=0.005)
            killed["at"] = time.monotonic()
            killed["processes"] = hosts[0].kill_everything()
            lost.set()
            with agent.lock:
                killed["in_flight"] = set(agent.in_flight[hosts[0].inside])
            try:  # how long their leases had left, by the database's clock
                leases = Invocation.objects.filter(pk__in=killed["in_flight"]).annotate(left=F("lease_until") - Now())
                killed["lease_left"] = max(i.left.total_seconds() for i in leases)
            finally:
                connection.close()
            killed["decided"] = done["decided"]

        def drain(part: list[int], running: list[str]) -> float:
            """Resumes per second that the workers of `running` hosts send, once they wake up to a queue
            of `part`'s resumes (decided while every worker was stopped)."""
            workers = [proc.pid for name, proc in procs.procs.items() if name.endswith("-worker")]
            for pid in workers:
                os.kill(pid, signal.SIGSTOP)
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(decide, range(len(part)), part))
            ids = set(Invocation.objects.filter(hold_id__in=part).values_list("id", flat=True))
            began = time.monotonic()
            for name in running:
                os.kill(procs.procs[f"{name}-worker"].pid, signal.SIGCONT)
            # 90 %: a stopped worker may have taken up to 8 messages off the queue; the relay re-sends them later.
            wait_until(lambda: len(ids & agent.resumes()) >= len(ids) * 0.9, 120, "a drain", interval=0.05)
            rate = len(ids) * 0.9 / (time.monotonic() - began)
            for pid in workers:
                os.kill(pid, signal.SIGCONT)
            wait_until(lambda: ids <= agent.resumes(), 60, "the rest of a drain")
            return round(rate, 1)

        # A burst of DRAIN resumes drained by both hosts' workers now, another by host2's alone once
        # host1 is gone (while host1 lived, a stopped worker of it would hold messages).
        report["drain_per_s_two_hosts"] = drain(holds[-DRAIN:], ["host1", "host2"])
        one_host = holds[-2 * DRAIN : -DRAIN]
        holds = holds[: -2 * DRAIN]
        done["decided"] = 0

        killer = threading.Thread(target=lose_host1, daemon=True)
        killer.start()
        decisions_began = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(decide, range(len(holds)), holds))
        killer.join(timeout=60)
        assert lost.is_set(), "host1 was never lost"
        for name in ("host1-web", "host1-worker"):
            procs.procs.pop(name).wait(timeout=30)
        assert not hosts[0].pids()

        completed = Run.objects.filter(status=Run.Status.COMPLETED)
        wait_until(lambda: completed.count() == RUNS - DRAIN, 150, f"{RUNS - DRAIN} completed runs")
        drained = time.monotonic()
        report["drain_per_s_one_host"] = drain(one_host, ["host2"])
        wait_until(lambda: completed.count() == RUNS, 60, f"{RUNS} completed runs")

    lease = TIMEOUT + GRACE
    counts = Counter(webhook_id for webhook_id, *_ in agent.deliveries)
    first = {}
    for webhook_id, _kind, sender, at in agent.deliveries:
        first.setdefault(webhook_id, (sender, at))
    resent = {w for w, n in counts.items() if n > 1}
    # Allowed (SPEC): an id the lost host sent (a dead host sends nothing, so it began before the kill; the
    # agent may record its arrival a few ms later) and the surviving host sent once more after the lease.
    last_sender = {w: sender for w, _kind, sender, _at in agent.deliveries}
    allowed = {
        w for w in resent if first[w][0] == hosts[0].inside and last_sender[w] == hosts[1].inside and counts[w] == 2
    }
    takeover = [max(at for w2, _k, _s, at in agent.deliveries if w2 == w) - killed["at"] for w in resent]
    last_resume = max(at for _w, kind, _s, at in agent.deliveries if kind == "resume" and at <= drained)
    phase = [(at, w) for w, kind, _s, at in agent.deliveries if kind == "resume" and at >= decisions_began]
    before = {w for at, w in phase if at <= killed["at"]}
    after = {w for at, w in phase if killed["at"] < at <= drained} - before
    report.update(
        {
            "runs": RUNS,
            "asks_per_host": sorted(agent.asks.values()),
            "decision_posts": sum(len(s) for s in answers.values()),
            "processes_killed": killed["processes"],
            "decided_before_kill": killed["decided"],
            "in_flight_at_kill": len(killed["in_flight"]),
            "resent_after_loss": len(resent),
            "duplicates": len(resent - allowed),
            "lease_s": lease,
            "takeover_s": [round(t, 2) for t in sorted(takeover)],
            "lease_left_at_kill_s": round(killed["lease_left"], 2),
            "taken_over_after_lease_end_s": round(max(takeover) - killed["lease_left"], 2),
            # While decisions come in (their pace, not the workers', sets these), before and after the loss.
            "resumes_per_s_before_loss": round(len(before) / max(killed["at"] - decisions_began, 1e-9), 1),
            "resumes_per_s_after_loss": round(len(after) / max(last_resume - killed["at"], 1e-9), 1),
            "drain_s": round(drained - decisions_began, 1),
        }
    )

    # Every hold decided by exactly one of its decisions (a 200 lost with host1 answers no one).
    assert Hold.objects.filter(status=Hold.Status.PENDING).count() == 0
    assert Hold.objects.filter(status=Hold.Status.DECIDED).count() == RUNS
    assert all(set(statuses) <= {200, 409} and statuses.count(200) <= 1 for statuses in answers.values()), answers
    assert sum(statuses.count(200) for statuses in answers.values()) >= RUNS - RACERS * 2
    assert sum(len(s) for hold, s in answers.items() if hold in contested) == CONTESTED * RACERS

    # Exactly once at the agent, by webhook-id: one resume per decided hold, none lost, and the only
    # re-sends are of deliveries that host1 had begun when it was lost.
    resumes = set(Invocation.objects.filter(kind=Invocation.Kind.RESUME).values_list("id", flat=True))
    assert len(resumes) == RUNS
    assert {w for w, kind, *_ in agent.deliveries if kind == "resume"} == resumes, "lost resumes"
    sends = defaultdict(list)
    for webhook_id, _kind, sender, at in agent.deliveries:
        sends[webhook_id].append((sender, round(at - killed["at"], 2)))
    why = {i.id: (i.attempts, i.last_error, sends[i.id]) for i in Invocation.objects.filter(pk__in=resent - allowed)}
    assert resent - allowed == set(), f"duplicates (attempts, last error, sends after the kill): {why}"
    assert killed["in_flight"] <= resent, "a delivery host1 was sending was not sent again"
    assert Invocation.objects.exclude(status=Invocation.Status.ANSWERED).count() == 0

    # The lost host's leased deliveries were taken over once their lease ran out.
    # Then the next relay publishes them; the slack is for the queue ahead of them on a busy machine.
    assert resent and max(takeover) <= killed["lease_left"] + RELAY + 5, (takeover, killed["lease_left"])


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


# --- two beats ---------------------------------------------------------------------------------------


def twice_at_once(job, *args, busy: bool = False, **kwargs) -> list:
    """Runs `job` in two threads released together, as the same tick of two beats would on two workers.
    With `busy`, a notifications.Busy raised by one of them is its result."""
    barrier = threading.Barrier(2)

    def one():
        barrier.wait()
        try:
            return job(*args, **kwargs)
        except notifications.Busy as exc:
            if not busy:
                raise
            return exc
        finally:
            connection.close()

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(one) for _ in range(2)]
        return [future.result() for future in futures]


@pytest.mark.django_db(transaction=True)
def test_two_beats_double_nothing():
    """Each periodic job run twice at once (two beats' ticks): the sweep expires each hold once, relayed
    deliveries reach the agent once, a reminder is sent once, an hour is sealed and counted once, and the
    pending counters keep their sum."""
    agent = AgentDouble()
    try:
        cap = factories.capability(endpoint=agent.url, notify={"email": False, "webhook": agent.url + "/notify"})
        holds = [factories.held_hold(cap)[1] for _ in range(6)]
        expiring = [hold.pk for hold in holds[:3]]
        Hold.objects.filter(pk__in=expiring).update(expires_at=timezone.now() - timedelta(seconds=1))

        # The sweep: FOR UPDATE SKIP LOCKED, and an UPDATE that re-checks `pending`.
        assert sum(twice_at_once(tasks.sweep_expired)) == 3
        assert Hold.objects.filter(status=Hold.Status.EXPIRED).count() == 3
        assert AuditEvent.objects.filter(kind=AuditKind.HOLD_EXPIRED).count() == 3
        assert Invocation.objects.filter(kind=Invocation.Kind.RESUME).count() == 3

        # The relay: both see the same due rows, but each row is published by one of them (SKIP LOCKED and
        # a lease); were both to publish it, the claim (a conditional UPDATE) would let one send through.
        relayed = twice_at_once(services.invocations_due)
        assert sorted(relayed[0]) == sorted(relayed[1]) and len(relayed[0]) == 3
        assert sum(twice_at_once(tasks.relay_due)) == 3
        for invocation_id in relayed[0]:
            twice_at_once(delivery.deliver, invocation_id)
        sent = Counter(r["headers"]["webhook-id"] for r in agent.requests if r["path"] != "/notify")
        assert sorted(sent) == sorted(relayed[0]) and set(sent.values()) == {1}

        # Reminders: both enqueue them; the unique notification row lets one send through.
        soon = holds[3].expires_at - timedelta(minutes=30)
        assert twice_at_once(notify_tasks.remind_due, soon) == [3, 3]
        for hold in holds[3:]:
            both = twice_at_once(notifications.deliver, hold_id=hold.pk, kind="reminder", channel="webhook", busy=True)
            # The loser finds the row sent, or claimed (Busy: its task retries later, and then finds it sent).
            outcomes = sorted(outcome if isinstance(outcome, str) else "busy" for outcome in both)
            assert outcomes in (["already-sent", "posted"], ["busy", "posted"]), both
            assert notifications.deliver(hold_id=hold.pk, kind="reminder", channel="webhook") == "already-sent"
        reminded = [r for r in agent.requests if r["path"] == "/notify"]
        assert len(reminded) == 3 and Notification.objects.filter(kind="reminder").count() == 3

        # Rollups: the unique `sealed` row of an hour lets one sealer write it; totals count it once.
        later = timezone.now() + timedelta(hours=3)
        sealed = twice_at_once(rollup.rollup, now=later)
        assert sum(sealed) == OpsHour.objects.filter(metric="sealed").count() > 0
        hours = OpsHour.objects.exclude(metric="sealed").values("metric", "label").annotate(total=Sum("value"))
        totals = {(t.metric, t.label): t.value for t in OpsTotal.objects.all()}
        assert totals and totals == {(h["metric"], h["label"]): h["total"] for h in hours}

        # The pending counters: two folds lock the same rows; the sum stays the number of pending holds.
        before = PendingCount.objects.aggregate(n=Sum("delta"))["n"]
        twice_at_once(notify_tasks.fold_pending)
        assert PendingCount.objects.aggregate(n=Sum("delta"))["n"] == before == 3
        assert PendingCount.objects.count() == 1
    finally:
        agent.close()
