"""Reviewers must not feel the size of the history: page times at 1,000,000 holds vs 1,000.

Two scratch databases, seeded by bench.seed (about 10 % pending), and two identical gunicorn
servers, one on each; requests alternate between them. Figures are p50 ratios big/small.
Goals: the queue page <= 1.3x (issue 9), the ops page the same (issue 7: it stays fast at
1,000,000 holds), and the same again while the ops rollup is 24 hours behind (issue 21: beat is
down); the calibration page the same (issue 25), and the rules page (issue 33). Also reported: the next
queue page, the hold
page with 100 items, history.
"""

import os
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import BENCH_DB, ROOT, median, save  # noqa: E402

BIG = int(os.environ.get("RQ_BENCH_HOLDS", "1000000"))
SMALL = 1000
REQUESTS = int(os.environ.get("RQ_BENCH_PAGE_REQUESTS", "60"))
# Set while iterating on a page: measure again on the databases the last run seeded.
REUSE = os.environ.get("RQ_BENCH_PAGES_REUSE") == "1"
# Set while iterating on one page: only the pages named (comma-separated, e.g. "rules page").
ONLY = [name for name in os.environ.get("RQ_BENCH_PAGES_ONLY", "").split(",") if name]
# Every seeded hold decided (bench.seed --decided): issue 33's "1,000,000 decided holds".
DECIDED = os.environ.get("RQ_BENCH_PAGES_DECIDED") == "1"
PY = sys.executable
LAG_HOURS = 24


def prepare(db: str, holds: int) -> float:
    """Re-creates `db`, seeds it, and adds a reviewer and one 100-item hold (run as a subprocess).
    Returns the seconds bench.seed took (the rest is migrate, the reviewer, and the ops rollup)."""
    for sql in (f"DROP DATABASE IF EXISTS {db} WITH (FORCE)", f"CREATE DATABASE {db}"):
        subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-q", "-c", sql], check=True)
    env = {**os.environ, **db_env(db)}
    subprocess.run([PY, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    start = time.monotonic()
    subprocess.run(
        [PY, "-m", "bench.seed", "--holds", str(holds), "--capabilities", "5", "--items", "2"]
        + (["--decided"] if DECIDED else []),
        cwd=ROOT,
        env=env,
        check=True,
        stderr=subprocess.DEVNULL,
    )
    seeded = time.monotonic() - start
    script = (
        "from holds import services; from holds.auth import SYSTEM;"
        "from holds.models import Capability, Invocation; from tests import factories;"
        "services.person_add(username='bench', role='admin', password='bench-pass-123', actor=SYSTEM);"
        "cap = Capability.objects.order_by('pk').first();"
        "run, hold = factories.held_hold(cap, factories.ask_body(100));"
        # The rules page shows 20 rules (bench/rules.py's) and a grant.
        "from bench.rules import twenty_rules; import datetime;"
        "services.rules_save(capability=cap, rules=twenty_rules(), actor=SYSTEM);"
        "from holds.auth import actor_for_user; from django.contrib.auth import get_user_model;"
        "services.grant_create(capability=cap, when='item.data.payee == \\'Acme\\'', max_uses=10,"
        " expires_at=datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=30),"
        " actor=actor_for_user(get_user_model().objects.get(username='bench')));"
        # What beat does in production: seal finished hours of the ops counters (every minute) and
        # fold the pending counters' delta rows (every 10 s).
        "from holds import rollup\nwhile rollup.rollup(): pass\nrollup.fold_pending()\n"
        "print('HOLD', hold.public_id)"
    )
    out = subprocess.run(
        [PY, "manage.py", "shell", "-c", script], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    ).stdout
    (ROOT / "var" / "bench" / f"{db}.hold").write_text(re.search(r"HOLD (h_\d+)", out).group(1))
    return seeded


def shell(db: str, script: str) -> None:
    subprocess.run(
        [PY, "manage.py", "shell", "-c", script],
        cwd=ROOT,
        env={**os.environ, **db_env(db)},
        check=True,
        stdout=subprocess.DEVNULL,
    )


def stop_rollup(hours: int) -> None:
    """The state after beat stopped `hours` ago (run inside the database's Django): the audit log's
    newest day is moved to end a minute ago, so the live minutes hold what they hold at the
    history's rate however long ago it was seeded, and every seal of the last `hours` is undone
    (rows and totals, the ops page's and calibration's), so the rollup is that far behind."""
    from django.db import transaction
    from django.db.models import F, Sum
    from django.utils import timezone

    from holds import calibration
    from holds.models import AuditEvent, CalibrationTotal, OpsHour, OpsTotal
    from holds.rollup import floor_hour, sealed_until
    from holds.services.gateway import driver_cursor

    now = timezone.now()
    cutoff = floor_hour(now) - timedelta(hours=hours)
    newest = AuditEvent.objects.order_by("-at").values_list("at", flat=True).first()
    sealed = sealed_until()
    with transaction.atomic(), driver_cursor() as cursor:
        # Calibration's totals of the seals undone below, tallied before the events move.
        if sealed is not None and sealed > cutoff:
            for (capability_id, field, bucket), (n, edited, total) in calibration.tally(cutoff, sealed).items():
                totals = CalibrationTotal.objects.filter(capability_id=capability_id, field=field, bucket=bucket)
                totals.update(
                    decisions=F("decisions") - n,
                    edited=F("edited") - edited,
                    confidence_sum=F("confidence_sum") - total,
                )
        # The audit log refuses updates (a trigger); a scratch database may skip it, as the seeder does.
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(
            f"UPDATE {AuditEvent._meta.db_table} SET at = at + %s WHERE at >= %s",
            [now - timedelta(minutes=1) - newest, cutoff],
        )
        undone = OpsHour.objects.filter(hour__gte=cutoff).exclude(metric="sealed")
        for metric, label, value in undone.values_list("metric", "label").annotate(v=Sum("value")).order_by():
            OpsTotal.objects.filter(metric=metric, label=label).update(value=F("value") - value)
        OpsHour.objects.filter(hour__gte=cutoff).delete()


def db_env(db: str) -> dict:
    return {
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{db}",
        "SECRET_KEY": "bench-secret-key-not-for-production-0123456789abcdef",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "0",
        "SESSION_COOKIE_SECURE": "0",
        "CSRF_COOKIE_SECURE": "0",
        "CELERY_BROKER_URL": "memory://",
        "DB_CONN_MAX_AGE": "60",
        "LOG_LEVEL": "WARNING",
        "RQ_RATE_SIGNIN": "1000/60",
    }


def signed_in(base: str):
    import httpx

    client = httpx.Client(base_url=base, timeout=30)
    client.get("/login/")
    token = client.cookies["csrftoken"]
    response = client.post(
        "/login/",
        data={"username": "bench", "password": "bench-pass-123", "csrfmiddlewaretoken": token},
        headers={"referer": base + "/login/"},
    )
    assert response.status_code in (302, 200) and "sessionid" in client.cookies, response.text[:300]
    return client


def timed(client, path: str) -> float:
    start = time.perf_counter()
    response = client.get(path)
    elapsed = (time.perf_counter() - start) * 1000
    assert response.status_code == 200, (path, response.status_code)
    return elapsed


def main():
    (ROOT / "var" / "bench").mkdir(parents=True, exist_ok=True)
    dbs = {"small": (f"{BENCH_DB}_small", SMALL), "big": (f"{BENCH_DB}_big", BIG)}
    seed_seconds = {}
    for name, (db, holds) in dbs.items():
        start = time.monotonic()
        if REUSE and (ROOT / "var" / "bench" / f"{db}.hold").exists():
            print(f"pages: {name}: reusing {db} as seeded by an earlier run (RQ_BENCH_PAGES_REUSE)", flush=True)
            continue
        seed_seconds[name] = prepare(db, holds)
        print(
            f"pages: {name}: {holds:,} holds seeded in {seed_seconds[name]:.0f}s,"
            f" ready in {time.monotonic() - start:.0f}s",
            flush=True,
        )
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewqueue.settings")
    from tests.processes import Processes, free_port

    procs = Processes(ROOT / "var" / "bench" / "logs")
    (ROOT / "var" / "bench" / "logs").mkdir(parents=True, exist_ok=True)
    try:
        clients, holds = {}, {}
        for name, (db, _) in dbs.items():
            port = free_port()
            procs.start(
                f"gunicorn-{name}",
                [
                    str(Path(PY).parent / "gunicorn"),
                    "reviewqueue.wsgi",
                    "--bind",
                    f"127.0.0.1:{port}",
                    "--workers",
                    "2",
                ],
                db_env(db),
            )
            base = f"http://127.0.0.1:{port}"
            for _ in range(100):
                try:
                    clients[name] = signed_in(base)
                    break
                except Exception:
                    time.sleep(0.3)
            holds[name] = (ROOT / "var" / "bench" / f"{db}.hold").read_text()
        pages = {
            "queue": lambda n: "/",
            "queue, next page": lambda n: "/?all=1",
            "hold page, 100 items": lambda n: f"/holds/{holds[n]}",
            "history": lambda n: "/history",
            "calibration": lambda n: "/calibration",
            # Issue 33: it reads no holds unless a backtest is asked for.
            "rules page": lambda n: "/capabilities/bench_cap_0/rules",
        }
        results = {}

        def measure(page: str, path) -> None:
            times = {"small": [], "big": []}
            for name in times:  # warm up
                for _ in range(3):
                    timed(clients[name], path(name))
            for _ in range(REQUESTS):
                for name in ("small", "big"):
                    times[name].append(timed(clients[name], path(name)))
            results[page] = (median(times["small"]), median(times["big"]))
            print(
                f"pages: {page:<22} p50 {results[page][0]:7.1f} ms at {SMALL:,}  {results[page][1]:7.1f} ms "
                f"at {BIG:,}  = {results[page][1] / results[page][0]:.2f}x",
                flush=True,
            )

        for page, path in pages.items():
            if not ONLY or page in ONLY:
                measure(page, path)
        if ONLY:
            return _report(seed_seconds, results)
        # The ops page while beat is down, then again once it has caught up (as it is in production).
        for db, _ in dbs.values():
            shell(db, f"from bench.pages import stop_rollup\nstop_rollup({LAG_HOURS})\n")
        measure(f"ops, rollup {LAG_HOURS} h behind", lambda n: "/ops")
        measure(f"calibration, rollup {LAG_HOURS} h behind", lambda n: "/calibration")
        for db, _ in dbs.values():
            shell(db, "from holds import rollup\nwhile rollup.rollup(): pass\n")
        measure("ops", lambda n: "/ops")
    finally:
        procs.stop_all()
    _report(seed_seconds, results)


def _report(seed_seconds: dict, results: dict) -> None:
    rows = []
    if "big" in seed_seconds:
        rows.append(
            {
                "figure": f"python -m bench.seed --holds {BIG:,} --items 2 (with its VACUUM ANALYZE)",
                "goal": "a few minutes (<= 5)",
                "measured": f"{seed_seconds['big']:.0f} s",
                "ok": seed_seconds["big"] <= 300,
            }
        )
    for page, (small, big) in results.items():
        # The queue's goal is issue 9's; the ops page is held to the same one, as issue 7's
        # "stays fast with 1,000,000 holds", and so is it while the rollup lags (issue 21).
        # Calibration too, lagging included (issue 39); the rules page reads no holds (issue 33).
        goal = 1.3 if page in ("queue", "rules page") or page.startswith(("ops", "calibration")) else None
        ratio = big / small
        rows.append(
            {
                "figure": f"{page}: p50 at {BIG:,} {'decided ' if DECIDED else ''}holds / at {SMALL:,}",
                "goal": f"<= {goal}x" if goal else "(reported)",
                "measured": f"{ratio:.2f}x ({big:.1f} vs {small:.1f} ms)",
                "ok": (ratio <= goal) if goal else None,
            }
        )
    save("pages_only" if ONLY else "pages", rows)


if __name__ == "__main__":
    main()
