"""The MCP waiter (holds/mcp/waiter.py) wakes many waiting calls without a database poll per waiter:
with LISTEN, a decision wakes its call through the trigger's NOTIFY (well before the 30 s look); behind
a transaction pooler, one query per interval looks at every waited hold at once."""

import asyncio
import threading
import time

import pytest
from django.db import connection

from holds import services
from holds.auth import actor_for_account, actor_for_user
from holds.mcp.waiter import FALLBACK, Waiter
from holds.services.mcp_calls import mcp_call_ask
from tests import aio, factories

pytestmark = pytest.mark.django_db(transaction=True)
WAITERS = 10


def ask_holds(n: int) -> list[int]:
    factories.capability(name="mcp", endpoint="http://127.0.0.1:9")
    actor = actor_for_account(factories.account("bot")[0])
    ask = {"intent": "Allow?", "items": [{"id": "call", "title": "Bash", "data": {"command": "ls"}}]}
    return [
        mcp_call_ask(capability_name="mcp", actor=actor, input={"n": n}, ask=ask, key=None).hold_id for n in range(n)
    ]


def decide_all(hold_ids: list[int]) -> None:
    try:
        reviewer = actor_for_user(factories.person("rev"))
        for hold_id in hold_ids:
            body = {"items": [{"id": "call", "action": "approve"}]}
            services.hold_decide(hold_id=hold_id, actor=reviewer, body=body)
    finally:
        if threading.current_thread() is not threading.main_thread():
            connection.close()  # this thread's own connection, or the test database cannot be dropped


async def wait_then_decide(waiter: Waiter, hold_ids: list[int], settle: float) -> float:
    waiting = [asyncio.create_task(waiter.wait(hold_id)) for hold_id in hold_ids]
    await asyncio.sleep(settle)
    assert not any(task.done() for task in waiting)
    started = time.monotonic()
    await asyncio.to_thread(decide_all, hold_ids)
    await asyncio.wait_for(asyncio.gather(*waiting), FALLBACK / 3)
    return time.monotonic() - started


def test_with_listen_a_decision_wakes_its_call_by_notification():
    hold_ids = ask_holds(WAITERS)
    waiter = Waiter()
    aio.run(wait_then_decide(waiter, hold_ids, settle=1.0))
    # The listener's one look for all (at connect); no look per waiter, none per decision.
    assert waiter.polls <= 1


def test_behind_a_pooler_one_query_per_interval_looks_at_every_waiter(settings):
    settings.RQ_TRANSACTION_POOLER = True
    settings.RQ_MCP_POLL_INTERVAL = 0.2
    hold_ids = ask_holds(WAITERS)
    waiter = Waiter()
    aio.run(wait_then_decide(waiter, hold_ids, settle=1.0))
    # About one look per 0.2 s while the ten calls waited (1 s, then the decisions): a look per interval,
    # not one per waiter per interval (which would be 50 and more).
    assert 3 <= waiter.polls < 2 * WAITERS


def test_a_hold_settled_before_the_wait_returns_at_once():
    (hold_id,) = ask_holds(1)
    decide_all([hold_id])
    waiter = Waiter()
    aio.run(asyncio.wait_for(waiter.wait(hold_id), 5))  # its own look at registration found it
