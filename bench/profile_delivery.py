"""Where one resume delivery's time goes: the claim, the POST and the recording of the answer.

Not part of `make bench` (it prints, it does not save): run it alone before changing the delivery path,
`RQ_BENCH_DB=rq_bench_x .venv/bin/python bench/profile_delivery.py [N]`. In one process, one delivery at a
time, against bench/receiver.py's agent: N decided holds' resumes (default 400), each delivered as
holds/delivery.deliver does it, with each part timed (wall and this process's CPU) and its round trips
counted; the same N resumes' bare POSTs beside them; then a cProfile of N more deliveries, whose top
functions by own CPU time are printed (the agent's thread in this process included; waiting for
PostgreSQL counts nothing). Rows in the table are medians per delivery.
"""

import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import setup_django  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 400


def main():
    setup_django()
    from django.db import connection

    from bench.receiver import Receiver
    from bench.resume import APPROVE, held_holds, unpublished
    from holds import delivery, services
    from holds.auth import actor_for_account
    from holds.models import Invocation
    from tests import factories

    agent = Receiver()
    cap = factories.capability(name="fast", endpoint=agent.url, timeout_seconds=10.0)
    decider = actor_for_account(factories.account("bench", role="member")[0])

    def resumes(count):
        with unpublished():
            holds = held_holds([cap] * count)
            for hold in holds:
                services.hold_decide(hold_id=hold.pk, actor=decider, body=APPROVE)
        return list(Invocation.objects.filter(hold__in=holds).values_list("pk", flat=True))

    round_trips, trip_ms = [], {}

    def count(execute, sql, *args):
        start = time.perf_counter()
        try:
            return execute(sql, *args)
        finally:
            round_trips.append(1)
            # What the round trip carried, by its statements' first words (prepared: their EXECUTE names).
            key = " ; ".join(part.strip()[:24] for part in sql.split("; "))[:110]
            trip_ms.setdefault(key, []).append((time.perf_counter() - start) * 1000)

    connection.execute_wrappers.append(count)

    def timed(fn, *args, **kwargs):
        round_trips.clear()
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn(*args, **kwargs)
        return result, (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000, len(round_trips)

    parts = {name: [] for name in ("claim", "POST (build, sign, send, classify)", "record", "bare POST")}
    whole = []
    ids = resumes(N)
    for invocation_id in ids[:20]:  # warm: prepared statements, the HTTP connection
        delivery.deliver(invocation_id)
    for invocation_id in ids[20:]:
        start = time.perf_counter()
        claim, *claim_cost = timed(services.invocation_claim, invocation_id=invocation_id)
        url = claim.invocation.run.endpoint.rstrip("/") + "/invoke"
        outcome, *post_cost = timed(delivery._call, claim, url, None)
        _, *record_cost = timed(
            services.invocation_record, invocation_id=invocation_id, attempt=claim.attempt, outcome=outcome, claim=claim
        )
        whole.append((time.perf_counter() - start) * 1000)
        parts["claim"].append(claim_cost)
        parts["POST (build, sign, send, classify)"].append(post_cost)
        parts["record"].append(record_cost)
        _, *bare = timed(
            delivery.shared_client().post, url, json={"hop": invocation_id}, headers={"webhook-id": "x"}, timeout=10
        )
        parts["bare POST"].append(bare)
    print(f"{len(whole)} resume deliveries, one at a time, in process; medians per delivery")
    print("| part | wall ms | CPU ms (this process) | round trips |\n|---|---|---|---|")
    for name, costs in parts.items():
        wall, cpu, trips = (statistics.median(c[i] for c in costs) for i in range(3))
        print(f"| {name} | {wall:.2f} | {cpu:.2f} | {trips:.0f} |")
    print(f"| the whole delivery | {statistics.median(whole):.2f} | | |")
    print("\n| round trip (its statements) | count | median wall ms |\n|---|---|---|")
    for key, times in sorted(trip_ms.items(), key=lambda kv: -len(kv[1])):
        if len(times) >= N // 2:
            print(f"| `{key}` | {len(times)} | {statistics.median(times):.2f} |")

    commit_ways(cap, N)

    ids = resumes(N)
    profile = cProfile.Profile(time.process_time)
    profile.enable()
    for invocation_id in ids:
        delivery.deliver(invocation_id)
    profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(25)
    print(out.getvalue())
    agent.close()


def commit_ways(cap, n: int) -> None:
    """A transaction's COMMIT travelling with its writes, on the same two writes (a pending count's +0
    and -0), n times each, alternating: gateway.one_round_trip (the statements' rows read back) and
    gateway.transaction with gateway.write (the rows unread). One mechanism since the gateway: both should
    be one round trip, BEGIN and COMMIT in the text (before it, atomic() with the writes deferred to the
    COMMIT cost psycopg's own BEGIN, a round trip more; docs/benchmarks-notes.md). Medians of wall time
    and of this process's CPU."""
    from holds.services import gateway

    write = "INSERT INTO holds_pendingcount (capability_id, delta) VALUES (%(cap)s, %(delta)s)"
    statements = [(write, {"cap": cap.pk, "delta": 0}), (write, {"cap": cap.pk, "delta": -0})]

    def one_round_trip():
        gateway.one_round_trip([write, write], {"cap": cap.pk, "delta": 0})

    def kept():
        with gateway.transaction():
            gateway.write(*statements)

    ways = {"one_round_trip": (one_round_trip, [], []), "transaction() + write": (kept, [], [])}
    for _ in range(20):
        for way, *_ in ways.values():
            way()
    for _ in range(n):
        for way, walls, cpus in ways.values():
            wall, cpu = time.perf_counter(), time.process_time()
            way()
            walls.append((time.perf_counter() - wall) * 1000)
            cpus.append((time.process_time() - cpu) * 1000)
    # Round trips, as tests/performance/test_round_trips counts them.
    trips = {"one_round_trip": 1, "transaction() + write": 1}
    print(f"\nTwo writes and their COMMIT, {n} times each way, alternating; medians")
    print("| way | wall ms | CPU ms (this process) | round trips |\n|---|---|---|---|")
    for name, (_, walls, cpus) in ways.items():
        print(f"| {name} | {statistics.median(walls):.2f} | {statistics.median(cpus):.2f} | {trips[name]} |")


if __name__ == "__main__":
    main()
