"""Waiting for holds to be settled, many calls per process, without a database poll per waiter.

One listener per process: a trigger on holds_hold (migration 0019) NOTIFYs `rq_hold_settled` with the
hold's id when it leaves `pending` (decided, expired, cancelled) or is written already decided (rules).
The listener wakes the calls waiting on that id. A notification can be lost with its connection, so
every FALLBACK seconds, and after each (re)connect, one query looks at every waited hold at once.
Behind a transaction pooler (RQ_TRANSACTION_POOLER=1) a LISTEN would sit in a shared server session,
so the listener only polls, every RQ_MCP_POLL_INTERVAL seconds: still one query per process.
"""

import asyncio
import logging

import psycopg
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections, connections

from reviewqueue.settings import libpq_dsn

from ..models import Hold

CHANNEL = "rq_hold_settled"
FALLBACK = 30.0
log = logging.getLogger(__name__)


def _settled(hold_ids: list[int]) -> set[int]:
    close_old_connections()
    try:
        return set(
            Hold.objects.filter(pk__in=hold_ids).exclude(status=Hold.Status.PENDING).values_list("pk", flat=True)
        )
    finally:
        close_old_connections()


settled = sync_to_async(_settled, thread_sensitive=False)


class Waiter:
    """`await waiter.wait(hold_id)` returns once the hold is no longer pending."""

    def __init__(self) -> None:
        self._waiting: dict[int, set[asyncio.Event]] = {}
        self._task: asyncio.Task | None = None
        self.polls = 0  # looks at the database for all waiters (tests count them)

    async def wait(self, hold_id: int) -> None:
        event = asyncio.Event()
        self._waiting.setdefault(hold_id, set()).add(event)
        try:
            self._ensure_listening()
            # Registered first, then looked at: a decision that came before this point is seen here,
            # one that comes after is notified.
            if hold_id not in await settled([hold_id]):
                await event.wait()
        finally:
            events = self._waiting.get(hold_id, set())
            events.discard(event)
            if not events:
                self._waiting.pop(hold_id, None)

    def _ensure_listening(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._listen())

    def _wake(self, hold_ids) -> None:
        for hold_id in hold_ids:
            for event in self._waiting.get(hold_id, ()):
                event.set()

    async def _poll(self) -> None:
        if self._waiting:
            self.polls += 1
            self._wake(await settled(list(self._waiting)))

    async def _listen(self) -> None:
        # It runs as long as the process does (one idle connection), so that no call can register
        # while it is on its way out.
        while True:
            if settings.RQ_TRANSACTION_POOLER:
                await self._poll()
                await asyncio.sleep(settings.RQ_MCP_POLL_INTERVAL)
                continue
            try:
                dsn = libpq_dsn(connections["default"].settings_dict)
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    while True:
                        await self._poll()
                        async for notify in conn.notifies(timeout=FALLBACK):
                            if notify.payload.isdigit():
                                self._wake([int(notify.payload)])
            except (psycopg.Error, OSError) as exc:
                log.warning("mcp waiter: LISTEN failed (%s); polling until it reconnects", exc)
                await self._poll()
                await asyncio.sleep(settings.RQ_MCP_POLL_INTERVAL)


waiter = Waiter()
