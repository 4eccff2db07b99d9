"""bench/seeding.py's internals: its two writer threads and the foreign-key check that stands in for
the per-row checks those threads skip (private names, so they live here; issue 29.7)."""

import pytest
from django.db import IntegrityError

from bench import seeding
from holds.models import AuditEvent, Hold, HoldItem, Invocation, Run
from holds.services import gateway


@pytest.mark.django_db(transaction=True)
def test_two_threads_write_the_chunks_and_every_foreign_key_is_checked_once(monkeypatch):
    checks = []
    check = seeding._check_foreign_keys
    monkeypatch.setattr(seeding, "_check_foreign_keys", lambda: checks.append(1) or check())
    threads = set()
    write = seeding._write_chunk

    def recorded(*args, **kwargs):
        import threading

        threads.add(threading.get_ident())
        return write(*args, **kwargs)

    monkeypatch.setattr(seeding, "_write_chunk", recorded)
    counts = seeding.seed(holds=300, capability_count=2, items=2, chunk=50)

    assert sum(counts.values()) == 300 == Hold.objects.count() == Run.objects.count()
    assert len(threads) == 2 and checks == [1]
    hold_ids = list(Hold.objects.order_by("pk").values_list("pk", flat=True))
    assert hold_ids == list(range(hold_ids[0], hold_ids[0] + 300))  # every chunk, once
    assert HoldItem.objects.count() == 600
    finished = counts["decided"] + counts["expired"]
    assert Invocation.objects.filter(kind="start").count() == 300
    assert Invocation.objects.filter(kind="resume").count() == finished
    assert AuditEvent.objects.count() == 300 + finished
    assert Hold.objects.filter(status="pending").count() == counts["pending"]


def test_the_foreign_key_check_finds_a_row_that_points_nowhere(db):
    seeding.seed(holds=10, capability_count=1, items=1)
    seeding._check_foreign_keys()  # what the seed wrote is whole
    hold = Hold.objects.first()
    gateway.fetch("SET LOCAL session_replication_role = replica")  # as a seeding chunk does
    gateway.fetch(
        "INSERT INTO holds_holditem (hold_id, position, item_id, title, data, confidence, action)"
        " VALUES (%s, 5, 'x', 'x', '{}', '{}', '')",
        [hold.pk + 1000],
    )
    gateway.fetch("SET LOCAL session_replication_role = origin")
    with pytest.raises(IntegrityError, match="holds_holditem"):
        seeding._check_foreign_keys()
