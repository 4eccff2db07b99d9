"""The rules page (/capabilities/<name>/rules, issue 33): its statements are a fixed number, none of them
reads holds or items, so the page costs the same at 1,000,000 decided holds as at 1,000 (bench/pages.py's
"rules page" row: 1.06x measured, docs/benchmarks.md). A backtest runs only when asked (a POST)."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from bench.rules import twenty_rules
from bench.seeding import seed
from holds import services
from holds.auth import SYSTEM, actor_for_user
from holds.models import Capability, Hold
from tests import factories

pytestmark = pytest.mark.django_db

# The session, the user, their membership, the capability, its current rule set, its grants (at most 200)
# and its last 10 versions (tests/performance: a change that moves this says why in docs/benchmarks-notes.md).
STATEMENTS = 7


def _page_statements(client, name: str) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(f"/capabilities/{name}/rules")
    assert response.status_code == 200
    assert b"payee-14" in response.content  # the twentieth rule is on the page
    return [q["sql"] for q in queries.captured_queries]


def test_the_rules_page_costs_the_same_statements_whatever_the_number_of_decided_holds(client):
    seed(holds=20, capability_count=1, items=2, mix=(0.0, 1.0, 0.0))
    cap = Capability.objects.get(name="bench_cap_0")
    services.rules_save(capability=cap, rules=twenty_rules(), actor=SYSTEM)
    admin = factories.person("alice", role="admin")
    for n in range(3):
        services.grant_create(
            capability=cap,
            when=f"item.data.payee == 'Vendor {n}'",
            expires_at=timezone.now() + dt.timedelta(days=30),
            max_uses=10,
            actor=actor_for_user(admin),
        )
    client.force_login(admin)
    client.get(f"/capabilities/{cap.name}/rules")  # warm: compiled rules, sessions

    few = _page_statements(client, cap.name)
    seed(holds=600, capability_count=1, items=2, mix=(0.0, 1.0, 0.0))
    assert Hold.objects.filter(capability=cap, status="decided").count() == 620
    many = _page_statements(client, cap.name)

    assert len(few) == len(many) == STATEMENTS, "\n".join(many)
    # None reads holds or their items, and each is bounded: nothing there grows with the history.
    assert not [sql for sql in many if "holds_hold" in sql], many
    assert all(" LIMIT " in sql for sql in many), many
