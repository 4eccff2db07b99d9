"""tests/emptying.py: what a transactional test leaves behind is gone, as after Django's flush."""

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection

from holds.models import AuditEvent, Hold
from holds.services import gateway
from tests import factories
from tests.emptying import KEPT, empty_tables


def counts() -> dict[str, int]:
    tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
    quote = connection.ops.quote_name
    return dict(gateway.fetch(" UNION ALL ".join(f"SELECT '{t}', count(*) FROM {quote(t)}" for t in tables)))


@pytest.mark.django_db(transaction=True)
def test_it_empties_every_table_but_content_types_and_permissions():
    factories.person("alice", role="admin")
    factories.account("robot", role="member")
    cap = factories.capability()
    factories.held_hold(cap)
    before = counts()
    assert Hold.objects.exists() and AuditEvent.objects.exists()  # the append-only log has rows to remove
    assert sum(1 for table, n in before.items() if n and table not in KEPT) >= 8
    kinds, permissions = list(ContentType.objects.values_list("pk", "model")), Permission.objects.count()

    empty_tables()

    after = counts()
    assert {table: n for table, n in after.items() if n and table not in KEPT} == {}
    assert list(ContentType.objects.values_list("pk", "model")) == kinds and kinds
    assert Permission.objects.count() == permissions > 0
    empty_tables()  # with nothing to remove, the audit log's branch included
    assert counts() == after
