"""A quorum under real concurrency on PostgreSQL: N approvals and a reject at once, each a thread with its
own connection, give exactly one resume and the right outcome (SPEC "Quorum": races tested)."""

import threading

import pytest
from django.db import connections

from holds import services
from holds.auth import actor_for_account
from holds.errors import Conflict
from holds.models import Hold, HoldApproval, Invocation
from tests import factories

pytestmark = [pytest.mark.django_db(transaction=True)]

TRIALS = 1000
APPROVE = {"items": [{"id": "INV-1", "action": "approve"}]}
REJECT = {"items": [{"id": "INV-1", "action": "reject"}], "comment": "no"}
N = 2


class Contenders:
    """Threads that each keep their own connection across trials (opening one per trial would make
    1,000 trials take minutes): each round, they start together on the hold the main thread set."""

    def __init__(self, calls):
        self.calls, self.hold, self.results, self.done = calls, None, [None] * len(calls), False
        self.start, self.end = threading.Barrier(len(calls) + 1), threading.Barrier(len(calls) + 1)
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(len(calls))]
        for thread in self.threads:
            thread.start()

    def _run(self, i):
        try:
            while True:
                self.start.wait()
                if self.done:
                    return
                try:
                    self.results[i] = self.calls[i](self.hold)
                except Exception as exc:  # a loser's 409 is a result here
                    self.results[i] = exc
                self.end.wait()
        finally:
            connections.close_all()

    def race(self, hold):
        self.hold = hold
        self.start.wait()
        self.end.wait()
        return list(self.results)

    def stop(self):
        self.done = True
        self.start.wait()
        for thread in self.threads:
            thread.join()


def decide(actor, body):
    return lambda hold: services.hold_decide(hold_id=hold.pk, actor=actor, body=body)


def test_n_approvals_and_a_reject_at_once_resume_exactly_once():
    actors = [actor_for_account(factories.account(f"bot{n}", role="member")[0]) for n in range(N + 1)]
    cap = factories.capability("pay_big", quorum={"approvals": N, "from": ["member"]})
    outcomes = {"approve": 0, "reject": 0}
    contenders = Contenders([*(decide(a, APPROVE) for a in actors[:N]), decide(actors[N], REJECT)])
    try:
        for _ in range(TRIALS):
            trial(cap, contenders, outcomes)
    finally:
        contenders.stop()
    # Both orders happen, or the race was not a race.
    assert outcomes["approve"] > 0 and outcomes["reject"] > 0, outcomes


def trial(cap, contenders, outcomes):
    _, hold = factories.held_hold(cap, body=factories.ask_body(n_items=1))
    results = contenders.race(hold)
    assert all(isinstance(r, (Hold, Conflict)) for r in results), results
    (resume,) = Invocation.objects.filter(hold=hold, kind=Invocation.Kind.RESUME)
    action = resume.resume["items"][0]["action"]
    outcomes[action] += 1
    reject = results[N]
    if action == "reject":
        # The reject came first: it won, and every approval after it was refused.
        assert isinstance(reject, Hold) and reject.status == Hold.Status.DECIDED, results
    else:
        # All N approvals came first: the last of them decided; the reject found the hold decided.
        assert isinstance(reject, Conflict) and reject.code == "already_decided", results
        assert all(isinstance(r, Hold) for r in results[:N]), results
        assert sum(r.status == Hold.Status.DECIDED for r in results[:N]) == 1, results
        assert HoldApproval.objects.filter(hold=hold).count() == N


def test_the_same_person_approving_twice_at_once_counts_once():
    actors = [actor_for_account(factories.account(f"bot{n}", role="member")[0]) for n in range(2)]
    cap = factories.capability("pay_big", quorum={"approvals": 2, "from": ["member"]})
    contenders = Contenders([decide(actors[0], APPROVE), decide(actors[0], APPROVE)])
    try:
        for _ in range(200):
            twice(cap, contenders)
    finally:
        contenders.stop()


def twice(cap, contenders):
    _, hold = factories.held_hold(cap, body=factories.ask_body(n_items=1))
    results = contenders.race(hold)
    assert sorted(type(r).__name__ for r in results) == ["Conflict", "Hold"], results
    assert next(r for r in results if isinstance(r, Conflict)).code == "already_approved"
    assert Hold.objects.get(pk=hold.pk).status == Hold.Status.PENDING
    assert not Invocation.objects.filter(hold=hold, kind=Invocation.Kind.RESUME).exists()
