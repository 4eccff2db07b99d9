"""Rules at the ask and the backtest (issue 33).

- An ask through 20 rules vs an ask with none: the same service call the ask view makes
  (services.hold_ask_by_token), in this process, against the same PostgreSQL; alternating rounds, one
  capability with 20 rules (none of which matches, so every rule is evaluated for every item) and one
  without. Goal: <= 1.15x (ratio of median per-ask times).
- A backtest of those 20 rules over 100,000 recorded human decisions (50,000 decided holds of 2 items,
  seeded as bench/seeding.py seeds them). Goal: <= 2 s (median of 3). The rules are within the part of
  CEL that holds/rules_shortcut.py evaluates in Python; bench/profile_backtest.py sets it beside CEL alone.
The rules page at 1,000,000 decided holds vs 1,000 is measured with the other pages (bench/pages.py).
"""

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("RQ_BENCH_DB", "rq_bench_rules")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import median, save, setup_django  # noqa: E402

ROUNDS = int(os.environ.get("RQ_BENCH_ROUNDS", "7"))
PER_ROUND = int(os.environ.get("RQ_BENCH_PER_ROUND", "200"))
BACKTEST_HOLDS = 50_000  # x 2 items = 100,000 recorded decisions


def twenty_rules() -> list[dict]:
    """What a capability's rules look like: amounts, payees, confidence, flags, the run's input."""
    rules = [{"id": "flagged", "when": "size(item.flags) > 0", "then": "ask"}]
    rules += [
        {"id": f"payee-{n}", "when": f"item.data.payee == 'Vendor {n}' && item.confidence > 0.9", "then": "approve"}
        for n in range(15)
    ]
    rules += [
        {"id": "huge", "when": "double(item.data.amount) > 1000000.0", "then": "reject", "comment": "over the limit"},
        {"id": "tiny", "when": "double(item.data.amount) < 0.5 && item.confidence > 0.95", "then": "approve"},
        {"id": "trusted-run", "when": "has(run.input.trusted) && run.input.trusted == true", "then": "approve"},
        {"id": "titled", "when": "item.title.startsWith('Refund ')", "then": "approve"},
    ]
    assert len(rules) == 20
    return rules


def tokens_for(capability_name: str, count: int) -> list[str]:
    from bench import seeding
    from holds import services
    from holds.auth import SYSTEM, run_token_for
    from holds.models import Invocation

    run, _ = services.run_start(capability_name=capability_name, input={}, actor=SYSTEM)
    inv = Invocation.objects.get(run=run)
    services.invocation_claim(invocation_id=inv.id)
    copies = seeding.copy_run(run.pk, count - 1)
    return [run_token_for(invocation_id) for invocation_id in [inv.id, *(c.invocation_id for c in copies)]]


def main():
    setup_django()
    from bench.ask import ask_body
    from bench.seeding import seed
    from holds import services
    from holds.auth import SYSTEM
    from holds.backtest import backtest
    from holds.config import CapabilitySpec, new_secret
    from holds.models import Capability, Hold
    from holds.rules import check_rules

    specs = [
        CapabilitySpec(name=name, values={"endpoint": "http://127.0.0.1:9", "secret": new_secret()})
        for name in ("rules_none", "rules_20")
    ]
    services.capabilities_sync(specs=specs, actor=SYSTEM)
    services.rules_save(capability=Capability.objects.get(name="rules_20"), rules=twenty_rules(), actor=SYSTEM)

    # --- the ask ---
    print(f"rules: preparing {2 * ROUNDS * PER_ROUND} live run tokens …", flush=True)
    tokens = {name: iter(tokens_for(name, ROUNDS * PER_ROUND)) for name in ("rules_none", "rules_20")}
    body = ask_body(1)
    per_ask = {"rules_none": [], "rules_20": []}
    for _ in range(ROUNDS):
        for name in per_ask:
            batch = [next(tokens[name]) for _ in range(PER_ROUND)]
            start = time.perf_counter()
            for token in batch:
                hold = services.hold_ask_by_token(token=token, body=body)
                assert hold is not None and hold.status == Hold.Status.PENDING
            per_ask[name].append((time.perf_counter() - start) / PER_ROUND * 1000)
    none, twenty = median(per_ask["rules_none"]), median(per_ask["rules_20"])
    print(f"rules: ask, no rules {none:.2f} ms; through 20 rules {twenty:.2f} ms = {twenty / none:.2f}x", flush=True)

    # --- the backtest ---
    print(f"rules: seeding {BACKTEST_HOLDS:,} decided holds of 2 items …", flush=True)
    seed(holds=BACKTEST_HOLDS, capability_count=1, items=2, mix=(0.0, 1.0, 0.0))
    capability = Capability.objects.get(name="bench_cap_0")
    rules, problems = check_rules(twenty_rules())
    assert not problems, problems
    timings, cpu, result = [], [], None
    for _ in range(3):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = backtest(capability, rules=rules)
        timings.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)  # this process's CPU: the shared machine's load left out
    print(
        f"rules: backtest of 20 rules over {result.items:,} items: {median(timings):.2f} s"
        f" ({median(cpu):.2f} s CPU in Python, load {os.getloadavg()[0]:.1f})"
        f" (would decide {result.decided:,}, decided otherwise {result.differ:,})",
        flush=True,
    )
    load = os.getloadavg()[0]  # the shared machine's: wall time waits for a core above 2
    grant_timings, grant_cpu = [], []
    for _ in range(3):
        start, start_cpu = time.perf_counter(), time.process_time()
        grant = backtest(capability, grant_when="item.data.payee == 'Acme' && double(item.data.amount) < 500.0")
        grant_timings.append(time.perf_counter() - start)
        grant_cpu.append(time.process_time() - start_cpu)
    print(
        f"rules: backtest of one grant over {grant.items:,} items: {median(grant_timings):.2f} s"
        f" ({median(grant_cpu):.2f} s CPU in Python)",
        flush=True,
    )
    save(
        "rules",
        [
            {
                "figure": "ask (1 item) through 20 rules / with none (per-ask time, in process)",
                "goal": "<= 1.15x",
                "measured": f"{twenty / none:.2f}x ({twenty:.2f} vs {none:.2f} ms)",
                "ok": twenty / none <= 1.15,
            },
            {
                "figure": f"backtest of 20 rules over {result.items:,} recorded decisions",
                "goal": "<= 2 s",
                "measured": f"{median(timings):.2f} s ({median(cpu):.2f} s CPU, load {load:.1f})",
                "ok": median(timings) <= 2 and result.items >= 100_000,
            },
            {
                "figure": f"backtest of one grant over {grant.items:,} recorded decisions",
                "goal": "<= 2 s",
                "measured": f"{median(grant_timings):.2f} s ({median(grant_cpu):.2f} s CPU)",
                "ok": median(grant_timings) <= 2 and grant.items >= 100_000,
            },
        ],
    )


if __name__ == "__main__":
    main()
