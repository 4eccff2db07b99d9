"""The queue's order (urgency bucket, unclaimed first, expiry, age) read as one UNION ALL whose arms
each walk a partial index, on 20,000 pending holds. Pins the plan, so it lives with the internals."""

import datetime as dt
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from holds import queries
from holds.auth import actor_for_user
from holds.models import Capability, Hold
from holds.services import gateway
from tests import factories
from tests.test_view_queue import bulk_holds

pytestmark = pytest.mark.django_db


def test_every_arm_of_the_queue_walks_an_index(cap, member):
    bulk_holds(cap, 20_000)
    some = list(Hold.objects.order_by("pk").values_list("pk", flat=True)[:200:10])
    Hold.objects.filter(pk__in=some).update(claimed_by=member, claimed_until=timezone.now() + dt.timedelta(minutes=15))
    gateway.fetch("ANALYZE holds_hold")
    caps, actor = list(Capability.objects.all()), actor_for_user(member)
    for capability in (None, cap):
        page = queries.queue_page(actor, caps, capability=capability)
        assert len(page.rows) == 50
        with CaptureQueriesContext(connection) as captured:
            queries.queue_page(actor, caps, capability=capability)
        plan = "\n".join(row[0] for row in gateway.fetch("EXPLAIN " + captured.captured_queries[-1]["sql"]))
        assert "Seq Scan on holds_hold" not in plan, plan
        # Each of the eight arms reads one of the queue's partial indexes: in order, or (a claimed arm of
        # a few rows) as a bitmap of hold_queue_claimed.
        bitmaps = plan.count("Bitmap Index Scan on hold_queue_claimed")
        assert plan.count("Bitmap Heap Scan on holds_hold") == bitmaps, plan
        assert plan.count("Index Scan using hold_queue") + bitmaps >= 8, plan
        if capability is None:
            assert "Index Scan using hold_queue_claimed on" in plan, plan


def test_claimed_holds_come_after_unclaimed_ones_of_the_same_bucket_across_pages(client, cap, member):
    ana = factories.person("ana", role="member")
    now = timezone.now()
    expiries = {
        "soon-claimed": now + dt.timedelta(minutes=20),
        "soon-later": now + dt.timedelta(minutes=50),
        "day-claimed": now + dt.timedelta(hours=2),
        "day-free": now + dt.timedelta(hours=20),
        "week-free": now + dt.timedelta(days=7),
        "never-claimed": None,
        "never-free": None,
    }
    for intent, expires in expiries.items():
        run, hold = factories.held_hold(cap, factories.ask_body(intent=intent))
        fields = {"expires_at": expires}
        if "claimed" in intent:
            fields.update(claimed_by=ana, claimed_until=now + dt.timedelta(minutes=15))
        Hold.objects.filter(pk=hold.pk).update(**fields)
    bulk_holds(cap, 60)  # pending holds that expire in a day or more, to make the page break
    caps, actor = list(Capability.objects.all()), actor_for_user(member)
    seen, cursor = [], ""
    while True:
        page = queries.queue_page(actor, caps, cursor=cursor)
        seen += [h.intent for h in page.rows]
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    mine = [i for i in seen if i in expiries]
    assert mine == ["soon-later", "soon-claimed", "day-free", "day-claimed", "week-free", "never-free", "never-claimed"]
    assert len(seen) == len(set(seen)) == 67


def test_the_queue_pages_by_keyset_with_no_count_and_no_offset(client, cap, member):
    # Moved from test_view_queue (issue 29.7): it reads the SQL text the pages send.
    bulk_holds(cap, 130)
    client.force_login(member)
    with CaptureQueriesContext(connection) as captured:
        first = client.get("/")
        nxt = re.search(r'href="([^"]+)" rel="next"', first.content.decode()).group(1).replace("&amp;", "&")
        client.get(nxt)
    sql = " ".join(q["sql"].upper() for q in captured.captured_queries)
    assert 'FROM "HOLDS_HOLD"' in sql and "COUNT(" not in sql and "OFFSET" not in sql
