"""seeding.seed, which `python -m bench.seed --holds N` and the benchmarks fill a database with: the shape of
the history it writes, its two writer threads on PostgreSQL, and the foreign-key check that
stands in for the per-row checks those threads skip."""

import pytest
from django.db import IntegrityError, connection

from bench import seed, seeding
from holds.models import AuditEvent, Hold, HoldItem, Invocation, Run, milliseconds, new_invocation_id


def test_ids_follow_the_asks_and_the_pending_holds_are_the_newest(db):
    counts = seeding.seed(holds=400, capability_count=2, items=1)
    holds = list(Hold.objects.order_by("pk").values_list("pk", "created_at", "status"))
    assert [h[1] for h in holds] == sorted(h[1] for h in holds)
    assert counts["pending"] + counts["decided"] + counts["expired"] == 400
    # With 10 % pending, only the newest eighth of the asks can still be waiting.
    first = holds[0][0]
    assert all(pk - first >= 400 * 7 // 8 - 1 for pk, _, status in holds if status == "pending")
    assert counts["pending"] > 0


def test_invocation_ids_carry_their_time_as_the_write_path_makes_them(db):
    seeding.seed(holds=50, capability_count=1, items=1)
    invocations = list(Invocation.objects.values_list("pk", "created_at"))
    assert len(invocations) > 50  # the starts and the finished holds' resumes
    for pk, created in invocations:
        assert len(pk) == len(new_invocation_id())
        assert int(pk[4:16], 16) == milliseconds(created), pk


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
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")  # as a seeding chunk does
        cursor.execute(
            "INSERT INTO holds_holditem (hold_id, position, item_id, title, data, confidence, action)"
            " VALUES (%s, 5, 'x', 'x', '{}', '{}', '')",
            [hold.pk + 1000],
        )
        cursor.execute("SET LOCAL session_replication_role = origin")
    with pytest.raises(IntegrityError, match="holds_holditem"):
        seeding._check_foreign_keys()


def test_the_bench_command_writes_the_mix(db, capsys):
    seed.main(["--holds", "500", "--capabilities", "2", "--items", "3"])
    assert Hold.objects.count() == 500
    assert set(Hold.objects.values_list("status", flat=True)) == {"pending", "decided", "expired"}
    assert Hold.objects.filter(status="pending").count() < 100  # about 10 %
    assert "seeded 500 holds" in capsys.readouterr().out


@pytest.mark.django_db(transaction=True)
def test_the_bench_command_leaves_the_database_vacuumed_as_after_any_bulk_load():
    import time

    from django.db import connection

    seed.main(["--holds", "50", "--capabilities", "1", "--items", "1"])
    with connection.cursor() as cursor:
        for _ in range(50):  # the statistics views are written a moment after the command
            cursor.execute("SELECT last_vacuum IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'holds_hold'")
            if cursor.fetchone()[0]:
                break
            time.sleep(0.1)
        else:
            pytest.fail("holds_hold was not vacuumed")
