"""Shared set-up for benchmarks: a scratch PostgreSQL database, Django, the real processes, and
timing helpers. Every benchmark measures its baseline in the same run and prints ratios, because
this machine is shared and absolute times move by half from run to run."""

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "var" / "bench"
BENCH_DB = os.environ.get("RQ_BENCH_DB", "rq_bench")


def setup_django(fresh: bool = True) -> None:
    """Points Django at the scratch database (re-created when `fresh`) and migrates it."""
    sys.path.insert(0, str(ROOT))
    # bench/pooler.py points the benchmark's processes at PgBouncer; the database is made directly.
    port = os.environ.get("RQ_BENCH_DB_PORT", "5432")
    os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:{port}/{BENCH_DB}"
    os.environ.setdefault("SECRET_KEY", "bench-secret-key-not-for-production-0123456789abcdef")
    os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost")
    os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
    os.environ.setdefault("CELERY_BROKER_URL", "memory://")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewqueue.settings")
    if fresh:
        for sql in (f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)", f"CREATE DATABASE {BENCH_DB}"):
            subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-q", "-c", sql], check=True)
    import logging

    import django

    django.setup()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if fresh:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def median(values):
    return statistics.median(values)


def save(name: str, rows: list[dict]) -> None:
    """Each row: figure, goal, measured (text), ok (bool or None). scripts/bench builds the table."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "name": name,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.node()} · {os.cpu_count()} cores · Python {platform.python_version()}",
        "rows": rows,
    }
    (RESULTS / f"{name}.json").write_text(json.dumps(payload, indent=2))
    for row in rows:
        mark = {True: "ok", False: "MISSED", None: ""}[row["ok"]]
        print(f"  {row['figure']:<58} goal {row['goal']:<14} measured {row['measured']:<28} {mark}")
