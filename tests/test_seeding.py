"""seeding.seed, which `python -m bench.seed --holds N` and the benchmarks fill a database with: the
shape of the history it writes (its threads and foreign-key check: tests/performance)."""

import pytest

from bench import seed, seeding
from holds.models import Hold, Invocation, milliseconds, new_invocation_id
from holds.services import gateway


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


def test_the_bench_command_writes_the_mix(db, capsys):
    seed.main(["--holds", "500", "--capabilities", "2", "--items", "3"])
    assert Hold.objects.count() == 500
    assert set(Hold.objects.values_list("status", flat=True)) == {"pending", "decided", "expired"}
    assert Hold.objects.filter(status="pending").count() < 100  # about 10 %
    assert "seeded 500 holds" in capsys.readouterr().out


@pytest.mark.django_db(transaction=True)
def test_the_bench_command_leaves_the_database_vacuumed_as_after_any_bulk_load():
    import time

    seed.main(["--holds", "50", "--capabilities", "1", "--items", "1"])
    vacuumed = "SELECT last_vacuum IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'holds_hold'"
    for _ in range(50):  # the statistics views are written a moment after the command
        if gateway.fetch(vacuumed)[0][0]:
            break
        time.sleep(0.1)
    else:
        pytest.fail("holds_hold was not vacuumed")
