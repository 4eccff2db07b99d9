"""POST /v0/holds with 1 and 100 items against bare INSERT views, same gunicorn and PostgreSQL.

Alternating rounds (A, B, A, B, …); the figure is the ratio of median throughputs.
Goals (issue 3/9): >= 0.60 for 1 item, >= 0.50 for 100 items.
The load generator is Python (httpx, keep-alive, one client per thread), said in the output.
"""

import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import median, save, setup_django  # noqa: E402

ROUNDS = int(os.environ.get("RQ_BENCH_ROUNDS", "9"))
PER_ROUND = int(os.environ.get("RQ_BENCH_PER_ROUND", "300"))
THREADS = 8


def ask_body(n):
    return {
        "intent": f"Pay {n} invoices",
        "actions": ["approve", "edit", "reject"],
        "items": [
            {
                "id": f"INV-{i}",
                "title": f"Acme · {i}.00",
                "data": {"payee": "Acme", "amount": f"{i}.00"},
                "confidence": {"amount": 0.7},
            }
            for i in range(n)
        ],
        "details": "Approve to pay as shown.",
        "expires_in": 86400,
    }


def make_tokens(count):
    """Live run tokens: one run started and claimed as a worker would, the others copies of it, which
    are the same rows written in a few statements instead of a dozen round trips each."""
    from bench import seeding
    from holds import services
    from holds.auth import SYSTEM, run_token_for
    from holds.models import Invocation

    run, _ = services.run_start(capability_name="bench", input={}, actor=SYSTEM)
    inv = Invocation.objects.get(run=run)
    services.invocation_claim(invocation_id=inv.id)
    copies = seeding.copy_run(run.pk, count - 1)
    return [run_token_for(invocation_id) for invocation_id in [inv.id, *(c.invocation_id for c in copies)]]


def blast(url, bodies, headers_for):
    """Sends every body once over THREADS keep-alive clients; returns requests per second."""
    import httpx

    lock, index, failures = threading.Lock(), [0], []

    def worker():
        with httpx.Client(timeout=30) as client:
            while True:
                with lock:
                    i = index[0]
                    index[0] += 1
                if i >= len(bodies):
                    return
                r = client.post(url, content=bodies[i], headers=headers_for(i))
                if r.status_code != 201:
                    failures.append((r.status_code, r.text[:200]))

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if failures:
        raise SystemExit(f"{len(failures)} failed requests, e.g. {failures[0]}")
    return len(bodies) / elapsed


def main():
    setup_django()
    from holds import services
    from holds.auth import SYSTEM
    from holds.config import CapabilitySpec, new_secret
    from holds.services.gateway import driver_cursor
    from tests.processes import Processes, free_port, service_env

    services.capabilities_sync(
        specs=[CapabilitySpec(name="bench", values={"endpoint": "http://127.0.0.1:9", "secret": new_secret()})],
        actor=SYSTEM,
    )
    with driver_cursor() as cursor:
        from bench.bare_views import TABLE

        cursor.execute(TABLE)
    total = ROUNDS * PER_ROUND * 2
    print(f"ask: preparing {total} live run tokens …", flush=True)
    tokens = make_tokens(total)
    log_dir = Path("var/bench/logs")
    log_dir.mkdir(parents=True, exist_ok=True)
    procs = Processes(log_dir)
    port = free_port()
    env = service_env(redis_url="memory://", RQ_BENCH_VIEWS="1", DB_CONN_MAX_AGE="60", LOG_LEVEL="WARNING")
    env["CELERY_BROKER_URL"] = "memory://"
    env.pop("REDIS_URL")
    try:
        base = procs.gunicorn(env, port)
        print(
            f"ask: gunicorn (2 workers x 4 threads) at {base}; load: Python httpx, {THREADS} threads; "
            f"{ROUNDS} alternating rounds of {PER_ROUND} requests",
            flush=True,
        )
        results = {}
        next_token = iter(tokens)
        for n, bare in ((1, "/bench/bare-insert"), (100, "/bench/bare-bulk")):
            body = json.dumps(ask_body(n)).encode()
            ask_rps, bare_rps = [], []
            for _ in range(ROUNDS):
                round_tokens = [next(next_token) for _ in range(PER_ROUND)]
                ask_rps.append(
                    blast(
                        base + "/v0/holds",
                        [body] * PER_ROUND,
                        lambda i, t=round_tokens: {"x-agentos-run-token": t[i], "content-type": "application/json"},
                    )
                )
                bare_rps.append(blast(base + bare, [body] * PER_ROUND, lambda i: {"content-type": "application/json"}))
            results[n] = (median(ask_rps), median(bare_rps))
            print(f"ask {n:>3} item(s): {median(ask_rps):7.0f} req/s  bare: {median(bare_rps):7.0f} req/s", flush=True)
    finally:
        procs.stop_all()
    rows = []
    for n, goal in ((1, 0.60), (100, 0.50)):
        ask, bare = results[n]
        ratio = ask / bare
        rows.append(
            {
                "figure": f"ask with {n} item(s) / bare {'INSERT' if n == 1 else '100-row INSERT'} (throughput)",
                "goal": f">= {goal:.2f}",
                "measured": f"{ratio:.2f} ({ask:.0f} vs {bare:.0f} req/s)",
                "ok": ratio >= goal,
            }
        )
    save("ask", rows)


if __name__ == "__main__":
    main()
