"""A quorum decision beside a single decision (issue 34).

The span timed is the deciding request's work up to the committed resume (services.hold_decide, the
same call the API and the page make, in this process, against the same PostgreSQL): for a single
decision the one decision; for a quorum of 2 the second, deciding approval (the first is timed too,
as the 202 it is). What follows the commit (the publish, the worker, the agent's POST) is the same path
for both, so the decision → resume ratio is this span's ratio plus nothing. Alternating rounds; medians
of the per-round means. No goal yet: the issue asks for the figure beside a single decision's.
"""

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("RQ_BENCH_DB", "rq_bench_quorum")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import median, save, setup_django  # noqa: E402

ROUNDS = int(os.environ.get("RQ_BENCH_ROUNDS", "7"))
PER_ROUND = int(os.environ.get("RQ_BENCH_PER_ROUND", "60"))
APPROVE = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}


def main():
    setup_django()
    from bench.resume import held_holds
    from holds import services
    from holds.auth import actor_for_account
    from holds.models import Hold, Invocation
    from holds.services import ports
    from tests import factories

    ports._handlers["publish"] = lambda ids: None  # no broker here: the resume rows are what is timed
    single = factories.capability(name="single")
    deciders = [actor_for_account(factories.account(f"bench{n}", role="member")[0]) for n in range(2)]
    quorum = factories.capability(name="quorum", quorum={"approvals": 2, "from": ["member"]})
    print(f"quorum: preparing {2 * ROUNDS * PER_ROUND} held runs …", flush=True)
    holds = {
        "single": iter(held_holds([single] * ROUNDS * PER_ROUND)),
        "quorum": iter(held_holds([quorum] * ROUNDS * PER_ROUND)),
    }
    spans = {"single": [], "first": [], "deciding": []}
    for _ in range(ROUNDS):
        batch = [next(holds["single"]) for _ in range(PER_ROUND)]
        start = time.perf_counter()
        for hold in batch:
            assert services.hold_decide(hold_id=hold.pk, actor=deciders[0], body=APPROVE).status == Hold.Status.DECIDED
        spans["single"].append((time.perf_counter() - start) / PER_ROUND * 1000)
        batch = [next(holds["quorum"]) for _ in range(PER_ROUND)]
        first = deciding = 0.0
        for hold in batch:
            t0 = time.perf_counter()
            assert services.hold_decide(hold_id=hold.pk, actor=deciders[0], body=APPROVE).status == Hold.Status.PENDING
            t1 = time.perf_counter()
            assert services.hold_decide(hold_id=hold.pk, actor=deciders[1], body=APPROVE).status == Hold.Status.DECIDED
            t2 = time.perf_counter()
            first, deciding = first + (t1 - t0), deciding + (t2 - t1)
        spans["first"].append(first / PER_ROUND * 1000)
        spans["deciding"].append(deciding / PER_ROUND * 1000)
    assert Invocation.objects.filter(kind="resume", hold__capability=quorum).count() == ROUNDS * PER_ROUND
    one, first, deciding = (median(spans[k]) for k in ("single", "first", "deciding"))
    ratio = deciding / one
    print(f"quorum: single {one:.2f} ms; quorum first approval {first:.2f} ms, deciding {deciding:.2f} ms", flush=True)
    save(
        "quorum",
        [
            {
                "figure": "Quorum of 2: deciding approval → resume vs a single decision",
                "goal": "shown",
                "measured": f"{deciding:.2f} ms vs {one:.2f} ms = {ratio:.2f}x",
                "ok": None,
            },
            {
                "figure": "Quorum of 2: an approval that does not decide (202)",
                "goal": "",
                "measured": f"{first:.2f} ms ({first / one:.2f}x a single decision)",
                "ok": None,
            },
        ],
    )


if __name__ == "__main__":
    main()
