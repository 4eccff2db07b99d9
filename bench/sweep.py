"""The expiry sweep at 1,000,000 holds: holds expired per second, and the time of an empty sweep.

Seeds RQ_BENCH_HOLDS holds (default 1,000,000; ~10 % pending, all of those past their expiry),
runs the sweep until nothing is due, then times sweeps with nothing due.
Goals (issue 5/9): >= 20,000 holds/s; an empty sweep < 50 ms.
"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import median, save, setup_django  # noqa: E402

HOLDS = int(os.environ.get("RQ_BENCH_HOLDS", "1000000"))


def main():
    reuse = os.environ.get("RQ_BENCH_REUSE_DB")
    if reuse:
        # bench/pages.py seeded this database already; its pending holds become due here.
        import bench.common

        bench.common.BENCH_DB = reuse
    setup_django(fresh=not reuse)
    from django.db import connection

    from holds import seeding, services
    from holds.models import Hold

    start = time.monotonic()
    if reuse:
        with connection.cursor() as cursor:
            cursor.execute("UPDATE holds_hold SET expires_at = now() - interval '1 minute' WHERE status = 'pending'")
            cursor.execute("ANALYZE holds_hold")
        total = Hold.objects.count()
        counts = "reused"
    else:
        seeding.seed(
            holds=HOLDS,
            capability_count=5,
            items=2,
            due=True,
            progress=lambda n: n % 200_000 == 0 and print(f"  seeded {n}", flush=True),
        )
        total = HOLDS
        counts = "fresh"
    seeded_in = time.monotonic() - start
    print(f"sweep: {total} holds ready in {seeded_in:.0f}s ({counts})", flush=True)
    due = Hold.objects.filter(status="pending").count()
    start = time.monotonic()
    expired = 0
    while n := services.holds_expire_due():
        expired += n
    elapsed = time.monotonic() - start
    rate = expired / elapsed
    print(f"sweep: expired {expired} of {due} due holds in {elapsed:.2f}s = {rate:.0f}/s", flush=True)
    empties = []
    for _ in range(30):
        t = time.perf_counter()
        services.holds_expire_due()
        empties.append((time.perf_counter() - t) * 1000)
    empty = median(empties)
    print(f"sweep: empty sweep median {empty:.2f} ms over 30", flush=True)
    save(
        "sweep",
        [
            {
                "figure": f"sweep at {total:,} holds ({expired:,} due), holds expired per second",
                "goal": ">= 20,000/s",
                "measured": f"{rate:,.0f}/s",
                "ok": rate >= 20_000,
            },
            {
                "figure": "sweep with nothing due (median of 30)",
                "goal": "< 50 ms",
                "measured": f"{empty:.2f} ms",
                "ok": empty < 50,
            },
        ],
    )


if __name__ == "__main__":
    main()
