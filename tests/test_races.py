"""Exactly one winner and exactly one resume, under real concurrency on PostgreSQL.

Each contender is a thread with its own database connection, released together by a barrier.
"""

import datetime as dt
import threading
import time

import pytest
from django.db import connections, transaction
from django.utils import timezone

from bench import seeding
from holds import services
from holds.auth import actor_for_account
from holds.errors import Conflict
from holds.models import AuditEvent, Hold, Invocation
from tests import factories

pytestmark = [pytest.mark.django_db(transaction=True)]

TRIALS = 200
APPROVE = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
EXTEND = {"expires_in": 3600, "reason": "more time"}
REJECT = {"items": [{"id": "INV-1", "action": "reject"}, {"id": "INV-2", "action": "reject"}], "comment": "no"}


def race(*contenders):
    """Runs each callable in its own thread at the same moment; returns their results or errors."""
    barrier = threading.Barrier(len(contenders))
    results = [None] * len(contenders)

    def run(i, fn):
        try:
            barrier.wait()
            results[i] = fn()
        except Exception as exc:  # the loser's 409 is a result here
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.fixture
def deciders(db):
    return [actor_for_account(factories.account(f"bot{n}", role="member")[0]) for n in range(2)]


def decide(actor, hold, body):
    return lambda: services.hold_decide(hold_id=hold.pk, actor=actor, body=body)


def test_two_concurrent_approvals_have_one_winner(cap, deciders):
    winners = 0
    for _ in range(TRIALS):
        run, hold = factories.held_hold(cap)
        results = race(decide(deciders[0], hold, APPROVE), decide(deciders[1], hold, APPROVE))
        wins = [r for r in results if isinstance(r, Hold)]
        losses = [r for r in results if isinstance(r, Conflict)]
        assert len(wins) == 1 and len(losses) == 1, results
        assert losses[0].code == "already_decided" and losses[0].extra["decided_by"] == wins[0].decided_by
        assert Invocation.objects.filter(hold=hold).count() == 1
        winners += 1
    assert winners == TRIALS


def test_approve_against_reject_has_one_final_state(cap, deciders):
    for _ in range(TRIALS):
        run, hold = factories.held_hold(cap)
        results = race(decide(deciders[0], hold, APPROVE), decide(deciders[1], hold, REJECT))
        assert sum(isinstance(r, Hold) for r in results) == 1, results
        resume = Invocation.objects.get(hold=hold).resume
        actions = {i["action"] for i in resume["items"]}
        assert actions in ({"approve"}, {"reject"})
        assert set(Hold.objects.get(pk=hold.pk).items.values_list("action", flat=True)) == actions


def test_approve_against_the_sweep_at_expires_at(cap, deciders):
    outcomes = {"decided": 0, "expired": 0}
    for _ in range(TRIALS):
        run, hold = factories.held_hold(cap)
        at = timezone.now() + dt.timedelta(milliseconds=30)
        Hold.objects.filter(pk=hold.pk).update(expires_at=at)

        def at_expiry(fn, at=at):
            def wrapped():
                time.sleep(max(0.0, (at - timezone.now()).total_seconds()))
                return fn()

            return wrapped

        race(at_expiry(decide(deciders[0], hold, APPROVE)), at_expiry(services.holds_expire_due))
        if Hold.objects.get(pk=hold.pk).status == "pending":
            services.holds_expire_due()  # the sweep ran a hair early; the clock has passed now
        final = Hold.objects.get(pk=hold.pk).status
        assert final in outcomes
        outcomes[final] += 1
        resumes = list(Invocation.objects.filter(hold=hold).values_list("resume", flat=True))
        assert len(resumes) == 1
        assert resumes[0]["resolved_by"] == ("human" if final == "decided" else "expired")
    assert sum(outcomes.values()) == TRIALS


def test_two_sweepers_expire_each_of_1000_holds_once(db):
    seeding.seed(holds=1000, capability_count=2, items=1, mix=(1.0, 0.0, 0.0), due=True)
    assert Hold.objects.filter(status="pending", expires_at__lte=timezone.now()).count() == 1000

    def sweeper():
        total = 0
        while (n := services.holds_expire_due(limit=100)) or total == 0:
            total += n
            if n == 0:
                break
        return total

    results = race(sweeper, sweeper)
    assert not any(isinstance(r, Exception) for r in results), results
    assert sum(results) == 1000
    assert Hold.objects.filter(status="expired").count() == 1000
    assert Invocation.objects.filter(kind="resume").count() == 1000


def test_two_workers_claiming_one_resume_have_one_winner(cap, deciders):
    for _ in range(TRIALS):
        run, hold = factories.held_hold(cap)
        services.hold_decide(hold_id=hold.pk, actor=deciders[0], body=APPROVE)
        resume = Invocation.objects.get(hold=hold)

        def claim(invocation_id=resume.id):
            return services.invocation_claim(invocation_id=invocation_id)

        results = race(claim, claim)
        claims = [r for r in results if isinstance(r, services.Claim)]
        assert len(claims) == 1 and results.count(None) == 1, results
        assert claims[0].attempt == 1 and claims[0].invocation.run.status == "running"
        resume.refresh_from_db()
        run.refresh_from_db()
        assert (resume.status, resume.attempts) == ("delivering", 1)
        assert (run.status, run.seq) == ("running", resume.seq)


# --- a resume published before its decision commits (decisions.write_decision) --------------------


def waiting_for_a_lock(at_least: int = 1, within: float = 10) -> None:
    """Returns once `at_least` sessions of this database wait for an advisory lock (pg_locks), asked on a
    connection of its own: the caller's may be inside the transaction that holds the lock."""
    own = connections.create_connection("default")
    try:
        with own.cursor() as cursor:
            deadline = time.monotonic() + within
            while time.monotonic() < deadline:
                cursor.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                )
                if cursor.fetchone()[0] >= at_least:
                    return
                time.sleep(0.005)
    finally:
        own.close()
    raise AssertionError("no claim waited for the decision's lock")


def test_a_claim_that_comes_before_the_decision_commits_waits_for_it_and_sends_the_resume(
    agent, acap, deciders, monkeypatch
):
    """The resume is published while the decision's writes go out. Here the worker has the message at
    once and its claim is already waiting when they are sent: it waits for the COMMIT and then sends the
    resume, once. Without the decision's lock the claim found no resume and sent nothing."""
    from holds import delivery
    from holds.services import gateway, ports

    workers, results, read = [], [], gateway.read

    def deliver(invocation_id):
        try:
            results.append(delivery.deliver(invocation_id))
        finally:
            connections.close_all()

    def publish(ids):
        (invocation_id,) = ids
        workers.append(threading.Thread(target=deliver, args=(invocation_id,)))
        workers[-1].start()

    def read_once_a_claim_waits(statements, *, commit=False):
        if commit:
            waiting_for_a_lock()  # the writes and their COMMIT go out only once the claim waits
        return read(statements, commit=commit)

    for n in range(5):
        run, hold = factories.held_hold(acap)
        monkeypatch.setitem(ports._handlers, "publish", publish)
        monkeypatch.setattr(gateway, "read", read_once_a_claim_waits)
        decided = services.hold_decide(hold_id=hold.pk, actor=deciders[0], body=APPROVE)
        monkeypatch.undo()
        workers[-1].join(20)
        resume = Invocation.objects.get(hold=hold)
        assert decided.status == Hold.Status.DECIDED and results == ["answered"] * (n + 1)
        assert [r["headers"]["webhook-id"] for r in agent.requests[n:]] == [resume.id]
        run.refresh_from_db()
        assert (resume.status, resume.attempts, run.status) == ("answered", 1, "completed")


def test_a_decision_that_loses_publishes_a_message_that_claims_nothing(agent, acap, deciders, monkeypatch):
    """The loser of two decisions published its resume's id before it knew it had lost: that id was never
    written, so a worker that gets it claims nothing and sends nothing."""
    from holds import delivery
    from holds.services import gateway, ports

    run, hold = factories.held_hold(acap)
    published, read, first = [], gateway.read, threading.get_ident()

    def read_after_another_decides(statements, *, commit=False):
        if commit and threading.get_ident() == first:  # the first decider's writes: the second decides first
            race(decide(deciders[1], hold, APPROVE))
        return read(statements, commit=commit)

    monkeypatch.setitem(ports._handlers, "publish", published.extend)
    monkeypatch.setattr(gateway, "read", read_after_another_decides)
    with pytest.raises(Conflict) as lost:
        services.hold_decide(hold_id=hold.pk, actor=deciders[0], body=REJECT)
    assert lost.value.code == "already_decided"
    resume = Invocation.objects.get(hold=hold)
    assert len(published) == 2 and published[1] == resume.id
    assert not Invocation.objects.filter(pk=published[0]).exists()
    assert delivery.deliver(published[0]) == "not-due" and agent.requests == []
    assert delivery.deliver(published[1]) == "answered"
    assert [r["headers"]["webhook-id"] for r in agent.requests] == [resume.id]
    assert {i["action"] for i in resume.resume["items"]} == {"approve"}


def test_a_worker_whose_clock_is_a_little_behind_finds_a_published_resume_due(acap, deciders, monkeypatch):
    """The resume is due from before its publish, less a second: a worker on a host whose clock is half a
    second behind this one claims it at once, instead of leaving it to the relay."""
    from holds.services import delivery, ports

    run, hold = factories.held_hold(acap)
    published = []
    monkeypatch.setitem(ports._handlers, "publish", published.extend)
    services.hold_decide(hold_id=hold.pk, actor=deciders[0], body=APPROVE)
    behind = timezone.now() - dt.timedelta(seconds=0.5)
    monkeypatch.setattr(delivery.timezone, "now", lambda: behind)
    claim = services.invocation_claim(invocation_id=published[0])
    assert claim is not None and claim.invocation.hold_id == hold.pk


def test_a_decision_inside_a_callers_transaction_publishes_its_resume_after_that_commits(cap, deciders, monkeypatch):
    """hold_decide cannot commit a caller's transaction, so the worker's claim would wait for it: the
    resume is published once it commits, as every other outbox row is, and not at all if it rolls back."""
    from holds.services import ports

    (_, hold), (_, undone) = factories.held_hold(cap), factories.held_hold(cap)
    published = []
    monkeypatch.setitem(ports._handlers, "publish", published.extend)
    with transaction.atomic():
        services.hold_decide(hold_id=hold.pk, actor=deciders[0], body=APPROVE)
        assert published == []
    assert published == [Invocation.objects.get(hold=hold).id]
    with transaction.atomic():
        services.hold_decide(hold_id=undone.pk, actor=deciders[0], body=APPROVE)
        transaction.set_rollback(True)
    assert len(published) == 1 and Hold.objects.get(pk=undone.pk).status == Hold.Status.PENDING


def test_an_asker_answering_while_a_person_decides_releases_one_resume(cap, deciders):
    """The resume is decided while its asker is still answering: whichever commits first, the resume
    ends up pending exactly once (released by the answer, or pending at once), and neither fails."""
    for _ in range(TRIALS):
        run = factories.start_run(cap)
        asker, _ = factories.deliver_now(run)
        hold = services.hold_ask(invocation=asker, body=factories.ask_body())
        suspended = services.Outcome(
            kind="answer", answer={"status": "suspended", "hold_id": hold.public_id}, status_code=200
        )

        def answer(asker=asker, suspended=suspended):
            return services.invocation_record(invocation_id=asker.id, attempt=asker.attempts, outcome=suspended)

        results = race(answer, decide(deciders[0], hold, APPROVE))
        assert results[0] == "answered" and isinstance(results[1], Hold), results
        resume = Invocation.objects.get(hold=hold)
        assert resume.status == "pending" and resume.next_attempt_at is not None
        run.refresh_from_db()
        assert run.status == "held"


# --- lock order: a decision against an answer or a finishing run ---------------------------------


def overlap(first, second):
    """`first` runs in a transaction that stays open (its row locks held) while `second` starts;
    returns what each raised, or None. Shows a lock-order deadlock every time, not by luck."""
    started, errors = threading.Event(), [None, None]

    def run_first():
        try:
            with transaction.atomic():
                first()
                started.set()
                time.sleep(0.5)
        except Exception as exc:
            errors[0] = exc
        finally:
            started.set()
            connections.close_all()

    def run_second():
        started.wait(10)
        try:
            second()
        except Exception as exc:
            errors[1] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run_first), threading.Thread(target=run_second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_a_run_failing_while_its_hold_is_decided_waits_and_keeps_the_decision(cap, deciders):
    admin = actor_for_account(factories.account("ops", role="admin")[0])
    hold = factories.held_hold(cap)[1]
    errors = overlap(
        lambda: services.hold_decide(hold_id=hold.pk, actor=deciders[0], body=APPROVE),
        lambda: services.run_fail(run_id=hold.run_id, actor=admin, reason="stop"),
    )
    assert errors == [None, None]
    hold.refresh_from_db()
    assert hold.status == "decided" and hold.resumes.count() == 1
    assert Hold.objects.get(pk=hold.pk).run.status == "failed"


def test_an_answer_arriving_while_the_hold_is_decided_waits_and_releases_the_resume(cap, deciders):
    run = factories.start_run(cap)
    invocation, _ = factories.deliver_now(run)
    hold = services.hold_ask(invocation=invocation, body=factories.ask_body())
    errors = overlap(
        lambda: services.hold_decide(hold_id=hold.pk, actor=deciders[0], body=APPROVE),
        lambda: factories.answer(invocation, {"status": "suspended", "hold_id": hold.public_id}),
    )
    assert errors == [None, None]
    resume = Invocation.objects.get(hold=hold)
    assert resume.status != "waiting"  # the answer saw the resume and released it


def test_an_answer_arriving_while_the_sweep_expires_its_hold_waits_and_releases_the_resume(cap):
    run = factories.start_run(cap)
    invocation, _ = factories.deliver_now(run)
    hold = services.hold_ask(invocation=invocation, body=factories.ask_body())
    Hold.objects.filter(pk=hold.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    errors = overlap(
        lambda: services.holds_expire_due(),
        lambda: factories.answer(invocation, {"status": "suspended", "hold_id": hold.public_id}),
    )
    assert errors == [None, None]
    hold.refresh_from_db()
    assert hold.status == "expired"
    assert Invocation.objects.get(hold=hold).status != "waiting"


def test_an_extension_against_the_sweep_at_expires_at_has_one_winner(cap, deciders):
    outcomes = {"extended": 0, "expired": 0}
    for trial in range(TRIALS):
        run, hold = factories.held_hold(cap)
        at = timezone.now() + dt.timedelta(milliseconds=60)
        Hold.objects.filter(pk=hold.pk).update(expires_at=at)
        # The extension's checks take a few milliseconds before its UPDATE: it starts 0-40 ms early, so
        # that its UPDATE meets the deadline and the sweep from both sides.
        early = dt.timedelta(milliseconds=trial % 21 * 2)

        def at_expiry(fn, at=at):
            def wrapped():
                time.sleep(max(0.0, (at - timezone.now()).total_seconds()))
                return fn()

            return wrapped

        extend = at_expiry(
            lambda hold=hold: services.hold_extend(hold_id=hold.pk, actor=deciders[0], body=EXTEND), at - early
        )
        extended, swept = race(extend, at_expiry(services.holds_expire_due))
        final = Hold.objects.get(pk=hold.pk)
        if isinstance(extended, Hold):
            assert final.status == "pending" and final.expires_at > at + dt.timedelta(minutes=59)
            assert swept == 0 and not Invocation.objects.filter(hold=hold).exists()
            outcomes["extended"] += 1
        else:
            assert isinstance(extended, Conflict) and extended.code == "expired", extended
            if final.status == "pending":
                assert services.holds_expire_due() == 1  # the sweep ran a hair early; the clock has passed now
            assert Hold.objects.get(pk=hold.pk).status == "expired"
            assert Invocation.objects.filter(hold=hold, kind="resume").count() == 1
            outcomes["expired"] += 1
    assert AuditEvent.objects.filter(kind="hold.extended").count() == outcomes["extended"]
    # Both sides won some trials: the deadline was really contended.
    assert outcomes["extended"] > 0 and outcomes["expired"] > 0, outcomes
