"""The backtest alone, on bench/rules.py's data (50,000 decided holds of 2 items = 100,000 recorded
decisions, one capability, bench/rules.py's 20 rules and one grant): the shortcut (holds/backtest.py
evaluating the rules in Python where it can) against the plain evaluation (every item through CEL), side
by side, their results compared. Wall and CPU time (time.process_time) of this process, and the load
average, because the machine is shared. `RQ_BENCH_REUSE_DB=1`: measure again on the database an
earlier run seeded (rq_btbench_backtest unless RQ_BENCH_DB says otherwise).
"""

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("RQ_BENCH_DB", "rq_btbench_backtest")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import median, setup_django  # noqa: E402

ROUNDS = int(os.environ.get("RQ_BENCH_ROUNDS", "3"))
REUSE = os.environ.get("RQ_BENCH_REUSE_DB") == "1"


def timed(call, *args) -> tuple[float, float, object]:
    start, start_cpu = time.perf_counter(), time.process_time()
    result = call(*args)
    return time.perf_counter() - start, time.process_time() - start_cpu, result


def main():
    setup_django(fresh=not REUSE)
    from bench.rules import BACKTEST_HOLDS, twenty_rules
    from bench.seeding import seed
    from holds.backtest import backtest
    from holds.models import Capability
    from holds.rules import check_rules

    if not REUSE:
        print(f"seeding {BACKTEST_HOLDS:,} decided holds of 2 items …", flush=True)
        seed(holds=BACKTEST_HOLDS, capability_count=1, items=2, mix=(0.0, 1.0, 0.0))
    capability = Capability.objects.get(name="bench_cap_0")
    rules, problems = check_rules(twenty_rules())
    assert not problems, problems
    grant = "item.data.payee == 'Acme' && double(item.data.amount) < 500.0"
    cases = {
        "20 rules": lambda plain: backtest(capability, rules=rules, plain=plain),
        "one grant": lambda plain: backtest(capability, grant_when=grant, plain=plain),
    }
    for name, call in cases.items():
        figures = {True: ([], []), False: ([], [])}
        results = {}
        for _ in range(ROUNDS):
            for plain in (False, True):
                wall, cpu, results[plain] = timed(call, plain)
                figures[plain][0].append(wall)
                figures[plain][1].append(cpu)
        same = [{k: v for k, v in results[plain].as_json().items() if k != "since"} for plain in (True, False)]
        assert same[0] == same[1], name
        for plain, label in ((True, "plain CEL"), (False, "shortcut")):
            walls, cpus = figures[plain]
            print(
                f"backtest, {name}, {label}: {median(walls):.2f} s wall, {median(cpus):.2f} s CPU"
                f" (CPU per round {', '.join(f'{c:.2f}' for c in cpus)})"
                f" over {results[plain].items:,} items, would decide {results[plain].decided:,},"
                f" load {os.getloadavg()[0]:.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
