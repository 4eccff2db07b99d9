"""Decision → the agent receives its resume, and how fast a burst of resumes drains.

Latency: >= 300 decisions, each against a bare Celery delay() → worker → HTTP POST hop in the
same run (alternating), p50/p95/p99. Goal (issue 39): decision p50 <= 2x the bare hop's p50.
Drain: 2,000 resumes queued at once, then 2 worker processes start; resumes per second from the
first arrival to the last. Beside them, in the same rounds, the same workers drain two baselines
(bench/hop.py): bare delay() → POST hops (the ceiling, no database) and the floor of exactly once
(the hop between a claim and the recording of the answer). Goal: the drain >= 75 % of the floor.
Then again with 10 % of them going to an agent that hangs until its timeout: the others still drain
at >= 90 % of their rate in the same burst with that 10 % going to an agent that answers at once, as
the median of the rounds' ratios (the 10 % cost work either way: answered, or claimed and handed
back). Five rounds of the five, alternating; medians.
Real parts: PostgreSQL, a private Redis, `celery worker` processes (2 processes, RQ_BENCH_THREADS each).
"""

import os
import sys
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import median, percentile, save, setup_django  # noqa: E402

DECISIONS = int(os.environ.get("RQ_BENCH_DECISIONS", "300"))
BURST = int(os.environ.get("RQ_BENCH_BURST", "2000"))
DRAIN_ROUNDS = int(os.environ.get("RQ_BENCH_DRAIN_ROUNDS", "5"))
# Threads per worker process, as production runs them (README). More threads cost every drain here,
# the bare hop's too (24: a fifth of the rate, the threads contending for each process's GIL); a
# hanging agent holds only a few of them, because its slow calls are capped per endpoint
# (RQ_ENDPOINT_MAX_IN_FLIGHT) and, after its first timeout, tried one at a time.
THREADS = int(os.environ.get("RQ_BENCH_THREADS", "16"))
APPROVE = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}


def held_holds(capabilities):
    """Held holds of these capabilities, in this order: the first of each capability made by
    tests.factories.held_hold, the others copies of it (the same rows, written in a few statements
    instead of a dozen round trips each). Copies publish nothing: the factory's holds also queued a
    delivery of their start invocation (answered already: a no-op) and an "asked" notification
    (none configured), which the workers met ahead of the resumes."""
    from bench import seeding
    from holds.models import Hold
    from tests import factories

    made = {}
    for capability, count in Counter(capabilities).items():
        run, hold = factories.held_hold(capability)
        made[capability] = iter([hold.pk, *(c.hold_id for c in seeding.copy_run(run.pk, count - 1))])
    ids = [next(made[capability]) for capability in capabilities]
    holds = Hold.objects.in_bulk(ids)
    return [holds[hold_id] for hold_id in ids]


@contextmanager
def unpublished():
    """Decisions in this block write their resumes but publish no message for them."""
    from holds.services import ports

    publish = ports._handlers["publish"]
    ports._handlers["publish"] = lambda ids: None
    try:
        yield
    finally:
        ports._handlers["publish"] = publish


def main():
    from tests.processes import Processes, free_port

    log_dir = ROOT_LOGS
    procs = Processes(log_dir)
    redis_port = free_port()
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    os.environ["CELERY_BROKER_URL"] = redis_url
    setup_django()
    from bench import hop
    from bench.receiver import Receiver
    from holds import services
    from holds.auth import actor_for_account
    from holds.models import Capability, Invocation
    from tests import factories
    from tests.processes import service_env

    fast, slow, other = Receiver(), Receiver(hang_seconds=30), Receiver()
    try:
        procs.redis(redis_port)
        cap = factories.capability(name="fast", endpoint=fast.url, timeout_seconds=10.0)
        hanging = factories.capability(name="hanging", endpoint=slow.url, timeout_seconds=3.0)
        answering = factories.capability(name="answering", endpoint=other.url, timeout_seconds=3.0)
        decider = actor_for_account(factories.account("bench", role="member")[0])
        env = service_env(redis_url=redis_url, RQ_CELERY_IMPORTS="bench.hop", DB_CONN_MAX_AGE="60", LOG_LEVEL="WARNING")

        def workers():
            for n in (1, 2):
                procs.start(
                    f"worker{n}",
                    [
                        str(Path(sys.executable).parent / "celery"),
                        "-A",
                        "reviewqueue",
                        "worker",
                        "-l",
                        "warning",
                        "--pool",
                        "threads",
                        "--concurrency",
                        str(THREADS),
                        "-n",
                        f"bench{n}@%h",
                    ],
                    env,
                )

        def decide(hold):
            services.hold_decide(hold_id=hold.pk, actor=decider, body=APPROVE)
            return Invocation.objects.get(hold=hold).id

        def decide_all(holds):
            """The resumes' ids, in the holds' order. Four threads, each with its own connection: a
            burst's 2,000 decisions one after another took half a minute of the bench's time."""
            from django.db import connection

            def decide_part(part):
                try:
                    return [decide(hold) for hold in part]
                finally:
                    connection.close()

            size = -(-len(holds) // 4)
            with ThreadPoolExecutor(4) as pool:
                parts = pool.map(decide_part, [holds[at : at + size] for at in range(0, len(holds), size)])
                return [invocation_id for part in parts for invocation_id in part]

        print(f"resume: preparing {DECISIONS} held runs …", flush=True)
        held = held_holds([cap] * DECISIONS)
        workers()
        time.sleep(3)
        # warm both paths
        for hold in held[:5]:
            fast.wait_for([decide(hold)], 20)
            hop_id = uuid.uuid4().hex
            hop.post.delay(fast.url + "/invoke", hop_id)
            fast.wait_for([hop_id], 20)
        decision_ms, decide_ms, hop_ms = [], [], []
        for hold in held[5:]:
            # The span is the decision itself and the way to the agent: nothing else runs in it (the
            # receiver finds the resume by its hold id, so no query for the invocation id is timed).
            t0 = time.time()
            services.hold_decide(hold_id=hold.pk, actor=decider, body=APPROVE)
            decide_ms.append((time.time() - t0) * 1000)
            arrived = fast.wait_for_hold(hold.public_id, 20)
            assert arrived is not None, "a resume did not arrive"
            decision_ms.append((arrived - t0) * 1000)
            hop_id = uuid.uuid4().hex
            t0 = time.time()
            hop.post.delay(fast.url + "/invoke", hop_id)
            assert fast.wait_for([hop_id], 20), "a bare hop did not arrive"
            hop_ms.append((fast.arrivals[hop_id] - t0) * 1000)
        d50, d95, d99 = (percentile(decision_ms, p) for p in (50, 95, 99))
        h50, h95, h99 = (percentile(hop_ms, p) for p in (50, 95, 99))
        print(
            f"resume: decision→agent p50 {d50:.1f} p95 {d95:.1f} p99 {d99:.1f} ms; "
            f"bare hop p50 {h50:.1f} p95 {h95:.1f} p99 {h99:.1f} ms ({len(decision_ms)} each); "
            f"the decision's own call p50 {percentile(decide_ms, 50):.1f} ms",
            flush=True,
        )

        def drained(ids, within: float) -> float:
            """Starts the workers on what was queued while they were stopped, and returns the rate at
            which `ids` reached the agent, from the first arrival to the last. Every burst, resumes and
            baselines alike, is measured this one way."""
            workers()
            assert fast.wait_for(ids, within), f"a burst did not drain within {within:g} s"
            times = sorted(fast.arrivals[i] for i in ids)
            return len(ids) / (times[-1] - times[0])

        def burst(odd=None):
            """The rate of the resumes to `fast`; with `odd`, every 10th resume goes to that capability
            instead (spread through the queue, as in life: queued after all the others they would only
            be met once the others had drained)."""
            procs.kill("worker1")
            procs.kill("worker2")
            holds = held_holds([odd if odd and i % 10 == 0 else cap for i in range(BURST)])
            ids = decide_all(holds)
            started = time.time()
            rate = drained([inv for i, inv in enumerate(ids) if not (odd and i % 10 == 0)], 180)
            return rate, started

        def hop_burst(task, ids):
            """The same workers draining BURST messages of a baseline task, queued before they start."""
            procs.kill("worker1")
            procs.kill("worker2")
            for key in ids:
                task.delay(fast.url + "/invoke", key)
            return drained(ids, 600)

        def floor_burst():
            # Invocation rows due for sending: a started run's, and copies of it. The start publishes no
            # message, the copies none either: the floor task is what sends them.
            from bench import seeding

            with unpublished():
                run = factories.start_run(cap)
            ids = [Invocation.objects.get(run=run).id, *(c.invocation_id for c in seeding.copy_run(run.pk, BURST - 1))]
            return hop_burst(hop.floor, ids)

        # Alternating rounds, medians compared: one burst's rate moves by a fifth from run to run here.
        # Each hanging round starts cold, its endpoint not yet known to be stalled.
        rates, rates_answering, rates_hanging, held, hop_rates, floor_rates = [], [], [], [], [], []
        for n in range(DRAIN_ROUNDS):
            print(f"resume: draining a burst of {BURST} (round {n + 1} of {DRAIN_ROUNDS}) …", flush=True)
            rates.append(burst()[0])
            rates_answering.append(burst(answering)[0])
            Capability.objects.filter(pk=hanging.pk).update(endpoint_stalled_at=None, endpoint_probe_until=None)
            rate_hanging, started = burst(hanging)
            rates_hanging.append(rate_hanging)
            # The calls the hanging agent received before its first timeout: each held a worker thread
            # for the whole 3 s (the workers started at `started`, after the decisions).
            held.append(sum(started <= at < started + 3.0 for at in slow.arrivals.values()))
            slow.arrivals.clear()
            # The ceiling for a drain here: the same workers draining bare delay() -> POST hops, with
            # no database at all. And the floor of what exactly once costs: the hop between a claim
            # and the recording of the answer, two statements. A delivery cannot drain faster.
            hop_rates.append(hop_burst(hop.post, [uuid.uuid4().hex for _ in range(BURST)]))
            floor_rates.append(floor_burst())
            print(
                f"resume: drained at {rates[-1]:.0f}/s; with 10 % answering elsewhere, the others at "
                f"{rates_answering[-1]:.0f}/s; with 10 % hanging, at {rates_hanging[-1]:.0f}/s ({held[-1]} calls"
                " held a thread for the timeout);"
                f" bare hops at {hop_rates[-1]:.0f}/s; the two-write floor at {floor_rates[-1]:.0f}/s",
                flush=True,
            )
        rate, rate_hanging = median(rates), median(rates_hanging)
        # The hanging ratio round by round (each round's bursts ran side by side), then its median: one
        # burst's rate moves by a fifth from round to round here.
        hanging_ratio = median([h / r for h, r in zip(rates_hanging, rates_answering, strict=True)])
        against_plain = median([h / r for h, r in zip(rates_hanging, rates, strict=True)])
        answering_ratio = median([a / r for a, r in zip(rates_answering, rates, strict=True)])
        hop_rate, floor_rate = median(hop_rates), median(floor_rates)
    finally:
        procs.stop_all()
        fast.close()
        slow.close()
        other.close()
    save(
        "resume",
        [
            {
                "figure": f"decision → agent receives resume, p50 (vs bare delay→POST hop, {len(decision_ms)} each)",
                "goal": "<= 2.0x hop",
                "measured": f"{d50 / h50:.2f}x ({d50:.1f} vs {h50:.1f} ms)",
                "ok": d50 <= 2 * h50,
            },
            {
                "figure": "decision → agent receives resume, p95 / p99",
                "goal": "(reported)",
                "measured": f"{d95:.1f} / {d99:.1f} ms (hop {h95:.1f} / {h99:.1f}); "
                f"the decision's own call p50 {percentile(decide_ms, 50):.1f} ms",
                "ok": None,
            },
            {
                "figure": f"burst of {BURST} resumes drains (2 worker processes × {THREADS} threads; "
                f"median of {DRAIN_ROUNDS} rounds)",
                "goal": "(reported; the floor's ratio below is the goal)",
                "measured": f"{rate:.0f}/s (rounds: {', '.join(f'{r:.0f}' for r in rates)})",
                "ok": None,
            },
            {
                "figure": f"ceiling: the same workers drain {BURST} bare delay→POST hops (no database; "
                f"median of {DRAIN_ROUNDS} rounds, alternating)",
                "goal": "(reported)",
                "measured": f"{hop_rate:.0f}/s (rounds: {', '.join(f'{r:.0f}' for r in hop_rates)}); "
                f"the resumes' drain is {rate / hop_rate:.0%} of it",
                "ok": None,
            },
            {
                "figure": f"floor of exactly once: the same hop between a claim and the recording of the answer "
                f"(two statements, nothing else; {BURST} due invocations; median of {DRAIN_ROUNDS} rounds)",
                "goal": "drain >= 75 % of it",
                "measured": f"{floor_rate:.0f}/s (rounds: {', '.join(f'{r:.0f}' for r in floor_rates)}); "
                f"the resumes' drain is {rate / floor_rate:.0%} of it",
                "ok": rate >= 0.75 * floor_rate,
            },
            {
                "figure": f"10 % of the burst's agents hanging until timeout: the others' rate / their rate with "
                f"that 10 % answering at once (median of the {DRAIN_ROUNDS} rounds' ratios)",
                "goal": ">= 90 %",
                "measured": f"{hanging_ratio:.0%}, {rate_hanging:.0f}/s (rounds, hanging / answering: "
                + ", ".join(
                    f"{h:.0f} / {a:.0f} = {h / a:.0%}" for h, a in zip(rates_hanging, rates_answering, strict=True)
                )
                + ")",
                "ok": hanging_ratio >= 0.9,
            },
            {
                "figure": "the same, against the burst with no 10 % at all (the earlier figure: it counts "
                "the 10 %'s own work as lost) / the 10 % answering against it",
                "goal": "(reported)",
                "measured": f"{against_plain:.0%} / {answering_ratio:.0%}",
                "ok": None,
            },
            {
                "figure": "calls the hanging agent got in the burst's first 3 s, each holding a worker thread for "
                "its whole timeout (2 processes × 16 threads)",
                "goal": "(reported)",
                "measured": f"rounds: {', '.join(str(h) for h in held)}",
                "ok": None,
            },
        ],
    )


ROOT_LOGS = Path(__file__).resolve().parent.parent / "var" / "bench" / "logs"
ROOT_LOGS.mkdir(parents=True, exist_ok=True)

if __name__ == "__main__":
    main()
