"""The two-host test (tests/test_two_hosts.py: its namespaces, PgBouncer, Redis and beat) for an A2A capability.

The agent is built on the official `a2a-sdk` server and listens on host1's root-side address. Each run sends
it a message, it asks for input (`input-required`), and each decision comes back as a follow-up message on
the same task, sent by whichever host's worker took the resume; host1 is lost midway while it is sending
some. Every SendMessage the agent receives is kept (task id, message id, sender), so exactly once is
checked the way the agent sees it: one first message per run (the starts the agent answers only after the
capability's timeout are sent again, and adopt the task their first send made), one follow-up message per
held task, its message id the resume's, and the only re-sends those host1 had begun when it was lost (SPEC,
"Past one machine").
"""

import asyncio
import json
import logging
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import (
    TaskUpdater,
)
from a2a.types import Part, Task, TaskState, TaskStatus
from django.db import connection
from django.db.models import F
from django.db.models.functions import Now
from google.protobuf import json_format

from holds.models import Hold, Invocation, Run
from tests import factories
from tests.frameworks.a2a_server import a2a_app
from tests.frameworks.asgi import Served
from tests.processes import Processes, free_port, wait_until
from tests.test_two_hosts import (
    GRACE,
    RELAY,
    Host,
    deployed,
    procs,
    reported,
    two_hosts,
)

pytestmark = pytest.mark.serial  # processes timed against each other: run alone (scripts/test)

__all__ = ["procs"]  # the fixture, shared

RUNS = 200
BATCH = 100
TIMEOUT = 8  # the capability's timeout; a lease is this plus RQ_LEASE_GRACE
AGENT_DELAY = 0.2  # seconds the agent takes over a decision, so that some are in flight when host1 dies
# Runs whose first message the agent takes (its task stored) but answers only after the capability's timeout:
# their start is sent again, and must find that task rather than make a second (the run's 201st first message).
SLOW = 2
SLOW_DELAY = TIMEOUT + 3
APPROVE = {"items": [{"id": "input", "action": "approve"}]}


class Invoices(AgentExecutor):
    """Asks whether to pay, then pays per the follow-up's `{approved, data}`; counts what it acted on."""

    def __init__(self):
        self.acted: Counter = Counter()  # task id -> follow-ups it acted on
        self.seen: set[str] = set()  # first messages' ids: a slow one is slow the first time only

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        up = TaskUpdater(event_queue=event_queue, task_id=context.task_id, context_id=context.context_id)
        if context.current_task is None:
            submitted = TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)
            await event_queue.enqueue_event(
                Task(id=context.task_id, context_id=context.context_id, status=submitted, history=[context.message])
            )
            slow = any(p.HasField("data") and "slow" in p.data.struct_value.fields for p in context.message.parts)
            if slow and context.message.message_id not in self.seen:
                self.seen.add(context.message.message_id)
                await asyncio.sleep(SLOW_DELAY)
            question = Part()
            question.data.struct_value.update({"invoice": context.task_id})
            await up.requires_input(message=up.new_agent_message(parts=[Part(text="Pay it?"), question]))
            return
        self.acted[context.task_id] += 1
        await asyncio.sleep(AGENT_DELAY)
        decision = next(json_format.MessageToDict(p.data) for p in context.message.parts if p.HasField("data"))
        paid = Part()
        paid.data.struct_value.update({"approved": decision["approved"]})
        await up.add_artifact(parts=[paid], name="payment", last_chunk=True)
        await up.complete()

    async def cancel(self, context, event_queue):
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class RecordingAgent:
    """The A2A agent on `address`, behind an ASGI wrapper that keeps every SendMessage it receives:
    (task id or "" for a first message, message id, sender, monotonic), and which are being answered."""

    def __init__(self, address: str):
        # Its pushes to the lost host fail, as they may: Review Queue does not need them (its worker reads
        # SendMessage's answer, and polls a task that goes on working).
        logging.getLogger("a2a").setLevel(logging.CRITICAL)
        self.lock = threading.Lock()
        self.messages: list[tuple[str, str, str, float]] = []
        self.in_flight: dict[str, set[str]] = defaultdict(set)  # sender -> message ids being answered
        self.executor = Invoices()
        port = free_port()
        url = f"http://{address}:{port}/a2a"
        app = a2a_app(self.executor, name="invoices", url=url, push_client=httpx.AsyncClient(timeout=5))
        self.served = Served(self._recording(app), "/.well-known/agent-card.json", port=port, host=address)
        self.url = self.served.url

    def _recording(self, app):
        agent = self

        async def recorded(scope, receive, send):
            if scope["type"] != "http" or scope["method"] != "POST":
                return await app(scope, receive, send)
            chunks, more = [], True
            while more:
                event = await receive()
                chunks.append(event.get("body", b""))
                more = event.get("more_body", False)
            body = b"".join(chunks)
            try:
                call = json.loads(body)
                message = call["params"]["message"] if call.get("method") == "SendMessage" else None
            except (ValueError, KeyError, TypeError):
                message = None
            sender = scope["client"][0]
            if message is not None:
                with agent.lock:
                    agent.messages.append((message.get("taskId", ""), message["messageId"], sender, time.monotonic()))
                    agent.in_flight[sender].add(message["messageId"])
            sent = False

            async def replay():
                nonlocal sent
                if sent:
                    return await receive()
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}

            try:
                await app(scope, replay, send)
            finally:
                if message is not None:
                    with agent.lock:
                        agent.in_flight[sender].discard(message["messageId"])

        return recorded

    def follow_ups(self) -> set[str]:
        with self.lock:
            return {message_id for task, message_id, *_ in self.messages if task}

    def close(self):
        self.served.stop()


@pytest.mark.django_db(transaction=True)
@pytest.mark.needs_redis
def test_two_hosts_one_lost_midway_every_a2a_decision_reaches_its_task_once(procs, capsys):
    with two_hosts() as hosts, reported(procs, capsys, "two hosts, A2A") as report:
        agent = RecordingAgent(hosts[0].outside)
        try:
            _run(procs, hosts, agent, report)
        finally:
            agent.close()


def _run(procs: Processes, hosts: list[Host], agent: RecordingAgent, report: dict) -> None:
    cap = factories.capability(endpoint=agent.url, protocol="a2a", timeout_seconds=float(TIMEOUT))
    key = factories.account("ci-bot", role="member")[1]
    with deployed(procs, hosts, key) as clients:
        # The runs, started through both hosts: each host's worker sends the first message and the agent's
        # input-required answer becomes a hold.
        started = []
        with ThreadPoolExecutor(8) as pool:
            for at in range(0, RUNS, BATCH):
                started += pool.map(
                    lambda n: clients[f"host{n % 2 + 1}"].post(
                        "/v0/runs", json={"capability": cap.name, "input": {"slow": True} if n < SLOW else {}}
                    ),
                    range(at, at + BATCH),
                )
                wait_until(lambda at=at: Hold.objects.count() == at + BATCH, 90, f"{at + BATCH} holds")
        assert Counter(r.status_code for r in started) == {201: RUNS}
        firsts = Counter(sender for task, _m, sender, _at in agent.messages if not task)
        starts = Invocation.objects.filter(kind=Invocation.Kind.START)
        report["first_messages_per_host"] = sorted(firsts.values())
        # Starts claimed again (a timed-out send retried): each adopts the task its first send made.
        report["starts_sent_again"] = starts.filter(attempts__gt=1).count()
        assert set(firsts) == {h.inside for h in hosts} and sum(firsts.values()) == RUNS, firsts
        slow = [i.attempts for i in starts.select_related("run") if i.run.input.get("slow")]
        assert len(slow) == SLOW and min(slow) > 1, f"a slow start was not sent again: attempts {slow}"

        # Decisions through both hosts; midway, while host1 is sending follow-ups, host1 is lost.
        holds = list(Hold.objects.order_by("?").values_list("pk", flat=True))
        public = {pk: Hold(pk=pk).public_id for pk in holds}
        lost = threading.Event()
        answers: dict[int, list[int]] = defaultdict(list)
        done = Counter()

        def decide(index: int, hold: int) -> None:
            name = "host2" if lost.is_set() or index % 2 else "host1"
            try:
                status = clients[name].post(f"/v0/holds/{public[hold]}/decision", json=APPROVE).status_code
            except httpx.TransportError:  # dropped by the lost host: sent again through the other
                assert lost.is_set() or name == "host1"
                status = clients["host2"].post(f"/v0/holds/{public[hold]}/decision", json=APPROVE).status_code
            answers[hold].append(status)
            done["decided"] += 1

        killed = {}

        def lose_host1() -> None:
            wait_until(lambda: done["decided"] >= len(holds) // 2, 120, "half the decisions")
            wait_until(lambda: agent.in_flight[hosts[0].inside], 60, "host1 sending follow-ups", interval=0.005)
            killed["at"] = time.monotonic()
            killed["processes"] = hosts[0].kill_everything()
            lost.set()
            with agent.lock:
                killed["in_flight"] = set(agent.in_flight[hosts[0].inside])
            try:
                leases = Invocation.objects.filter(pk__in=killed["in_flight"]).annotate(left=F("lease_until") - Now())
                killed["lease_left"] = max(i.left.total_seconds() for i in leases)
            finally:
                connection.close()
            killed["decided"] = done["decided"]

        killer = threading.Thread(target=lose_host1, daemon=True)
        killer.start()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(decide, range(len(holds)), holds))
        killer.join(timeout=60)
        assert lost.is_set(), "host1 was never lost"
        for name in ("host1-web", "host1-worker"):
            procs.procs.pop(name).wait(timeout=30)
        assert not hosts[0].pids()

        finished = Run.objects.filter(status__in=[Run.Status.COMPLETED, Run.Status.FAILED])
        wait_until(lambda: finished.count() == RUNS, 150, f"{RUNS} finished runs")

    follow_ups = [(task, m, sender, at) for task, m, sender, at in agent.messages if task]
    counts = Counter(m for _task, m, *_ in follow_ups)
    resent = {m for m, n in counts.items() if n > 1}
    first_sender, last_sender = {}, {}
    for _task, m, sender, _at in follow_ups:
        first_sender.setdefault(m, sender)
        last_sender[m] = sender
    allowed = {m for m in resent if first_sender[m] == hosts[0].inside and last_sender[m] == hosts[1].inside}
    allowed = {m for m in allowed if counts[m] == 2}
    takeover = [max(at for _t, m2, _s, at in follow_ups if m2 == m) - killed["at"] for m in resent]
    report.update(
        {
            "runs": RUNS,
            "processes_killed": killed["processes"],
            "decided_before_kill": killed["decided"],
            "in_flight_at_kill": len(killed["in_flight"]),
            "resent_after_loss": len(resent),
            "duplicates": len(resent - allowed),
            "lease_s": TIMEOUT + GRACE,
            "lease_left_at_kill_s": round(killed["lease_left"], 2),
            "takeover_s": [round(t, 2) for t in sorted(takeover)],
            "acted_twice": sum(1 for n in agent.executor.acted.values() if n > 1),
        }
    )

    # Every hold decided once (a 200 lost with host1 answers no one; its re-post is a 409).
    assert Hold.objects.filter(status=Hold.Status.DECIDED).count() == RUNS
    assert all(set(statuses) <= {200, 409} and statuses.count(200) <= 1 for statuses in answers.values()), answers

    # Each held task got one follow-up message, whose message id is its hold's resume: none lost, none
    # doubled but the re-sends of what host1 had begun; and the agent acted on each decision once.
    starts = Invocation.objects.filter(kind=Invocation.Kind.START)
    tasks = {start.run_id: start.answer["a2a"]["task_id"] for start in starts}
    resumes = {i.id: tasks[i.run_id] for i in Invocation.objects.filter(kind=Invocation.Kind.RESUME)}
    assert len(resumes) == RUNS and len(set(resumes.values())) == RUNS
    assert {(task, m) for task, m, *_ in follow_ups} == {(task, m) for m, task in resumes.items()}, "lost decisions"
    assert resent - allowed == set(), f"duplicates: {[(m, counts[m], first_sender[m]) for m in resent - allowed]}"
    assert killed["in_flight"] <= resent, "a follow-up host1 was sending was not sent again"
    assert set(agent.executor.acted.values()) == {1} and len(agent.executor.acted) == RUNS, agent.executor.acted

    # Every run finished as its agent did: completed with its payment, the re-sent ones too.
    assert Run.objects.filter(status=Run.Status.COMPLETED).count() == RUNS, list(
        Run.objects.exclude(status=Run.Status.COMPLETED).values_list("status", "error")[:5]
    )
    assert Invocation.objects.exclude(status=Invocation.Status.ANSWERED).count() == 0
    assert resent and max(takeover) <= killed["lease_left"] + RELAY + 5, (takeover, killed["lease_left"])
