"""Bulk data for benchmarks and load tests: realistic holds, fast (COPY on PostgreSQL).

This bypasses services.py on purpose: it writes the end states that the write path would have
produced (asked, decided, expired holds with their runs, invocations, items and audit rows), a
million at a time. It assumes nothing else writes to these tables while it runs.
"""

import hashlib
import json
import random
import secrets
from collections import Counter
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from .auth import run_token_hash
from .config import new_secret
from .models import AuditEvent, Capability, Hold, HoldItem, Invocation, PendingCount, Run

PAYEES = ["Aksa Lojistik", "Acme", "Globex", "Initech", "Umbrella", "Stark Industries", "Wayne Ent.", "Hooli"]
CHUNK = 20_000

COLUMNS = {
    Run: [
        "id",
        "capability_id",
        "version",
        "endpoint",
        "status",
        "seq",
        "input",
        "output",
        "error",
        "created_at",
        "finished_at",
    ],
    Invocation: [
        "id",
        "run_id",
        "kind",
        "seq",
        "status",
        "token_hash",
        "resume",
        "hold_id",
        "attempts",
        "answered_at",
        "answer",
        "last_error",
        "created_at",
        "first_sent_at",
        "next_attempt_at",
    ],
    Hold: [
        "id",
        "run_id",
        "invocation_id",
        "capability_id",
        "status",
        "intent",
        "actions",
        "details",
        "files",
        "expires_at",
        "created_at",
        "item_count",
        "min_confidence",
        "search_text",
        "fingerprint",
        "decided_at",
        "decided_by",
        "comment",
    ],
    HoldItem: ["hold_id", "position", "item_id", "title", "data", "confidence", "action", "decided_data", "comment"],
    AuditEvent: ["at", "actor", "kind", "run_id_ref", "hold_id_ref", "invocation_id_ref", "data"],
}


def capabilities(count: int) -> list[Capability]:
    caps = []
    for n in range(count):
        cap, _ = Capability.objects.get_or_create(
            name=f"bench_cap_{n}",
            defaults={"endpoint": "http://127.0.0.1:9", "secret": new_secret(), "approvers": ["admin", "member"]},
        )
        caps.append(cap)
    return caps


def _next_id(model) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COALESCE(MAX(id), 0) FROM {model._meta.db_table}")
        return cursor.fetchone()[0] + 1


def _write(model, rows: list[tuple]) -> None:
    if not rows:
        return
    table, columns = model._meta.db_table, COLUMNS[model]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            raw = cursor.cursor  # psycopg's own cursor: COPY is several times faster than INSERT
            with raw.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
    else:
        marks = ", ".join(["%s"] * len(columns))
        with connection.cursor() as cursor:
            cursor.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)


def _sync_sequences() -> None:
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for model in (Run, Hold, HoldItem, AuditEvent):
            table = model._meta.db_table
            cursor.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT COALESCE(MAX(id), 1) FROM {table}))"
            )


def seed(
    *,
    holds: int,
    capability_count: int = 5,
    items: int = 2,
    mix: tuple[float, float, float] = (0.1, 0.8, 0.1),
    due: bool = False,
    seed_value: int = 7,
    progress=None,
) -> dict:
    """Writes `holds` holds in the pending/decided/expired `mix`. With `due`, pending ones are past
    their expiry (for sweep tests and benchmarks). Returns counts per status."""
    rng = random.Random(seed_value)
    caps = capabilities(capability_count)
    now = timezone.now()
    counts = {"pending": 0, "decided": 0, "expired": 0}
    run_id, hold_id = _next_id(Run), _next_id(Hold)
    done = 0
    while done < holds:
        size = min(CHUNK, holds - done)
        runs, invs, hold_rows, item_rows, audits = [], [], [], [], []
        pending = Counter()
        for _ in range(size):
            cap = caps[rng.randrange(len(caps))]
            roll = rng.random()
            status = "pending" if roll < mix[0] else "decided" if roll < mix[0] + mix[1] else "expired"
            counts[status] += 1
            if status == "pending":
                pending[cap.pk] += 1
            created = now - timedelta(seconds=rng.randrange(60, 30 * 24 * 3600))
            if status == "pending":
                expires = (
                    now - timedelta(seconds=rng.randrange(1, 3600))
                    if due
                    else (None if rng.random() < 0.2 else now + timedelta(seconds=rng.randrange(600, 3 * 24 * 3600)))
                )
                decided_at = None
            elif status == "expired":
                # Finished holds finished in the past, as in a real history.
                expires = created + timedelta(seconds=min(3600, (now - created).total_seconds() - 1))
                decided_at = expires
            else:
                expires = None if rng.random() < 0.5 else created + timedelta(days=3)
                # Decided within 36 h of the ask, and before now: no burst of decisions at "now".
                waited = (now - created).total_seconds() - 1
                decided_at = created + timedelta(seconds=rng.uniform(min(30, waited), min(36 * 3600, waited)))
            start_id = f"inv_{secrets.token_hex(12)}"
            finished = status != "pending"
            runs.append(
                (
                    run_id,
                    cap.pk,
                    cap.version,
                    cap.endpoint,
                    "completed" if finished else "held",
                    2 if finished else 1,
                    "{}",
                    "{}" if finished else None,
                    "",
                    created,
                    decided_at if finished else None,
                )
            )
            invs.append(
                (
                    start_id,
                    run_id,
                    "start",
                    1,
                    "answered",
                    run_token_hash(start_id),
                    None,
                    None,
                    1,
                    created,
                    json.dumps({"status": "suspended", "hold_id": f"h_{hold_id}"}),
                    "",
                    created,
                    created,
                    created,
                )
            )
            item_list, confidences, decided = [], [], []
            for n in range(items):
                payee = rng.choice(PAYEES)
                amount = f"{rng.randrange(10, 50000)}.{rng.randrange(100):02d}"
                conf = round(rng.uniform(0.3, 1.0), 2)
                confidences.append(conf)
                item_list.append(
                    {
                        "id": f"INV-{hold_id}-{n}",
                        "title": f"{payee} · {amount}",
                        "data": {"payee": payee, "amount": amount},
                        "confidence": {"amount": conf},
                    }
                )
            intent = f"Pay {items} invoices for {item_list[0]['data']['payee']}"
            for n, item in enumerate(item_list):
                action = rng.choice(["approve", "approve", "approve", "reject", "edit"]) if status == "decided" else ""
                item_rows.append(
                    (
                        hold_id,
                        n,
                        item["id"],
                        item["title"],
                        json.dumps(item["data"]),
                        json.dumps(item["confidence"]),
                        action,
                        json.dumps(item["data"]) if action == "edit" else None,
                        None,
                    )
                )
                decided.append({"id": item["id"], "action": action, "data": item["data"], "comment": None})
            fingerprint = hashlib.sha256(f"{hold_id}:{intent}".encode()).hexdigest()
            hold_rows.append(
                (
                    hold_id,
                    run_id,
                    start_id,
                    cap.pk,
                    status,
                    intent,
                    '["approve", "edit", "reject"]',
                    "",
                    "[]",
                    expires,
                    created,
                    items,
                    min(confidences),
                    " ".join(
                        [intent, f"r_{run_id}"] + [i["id"] for i in item_list] + [i["title"] for i in item_list]
                    ).lower(),
                    fingerprint,
                    decided_at,
                    {"decided": "member", "expired": "expired"}.get(status, ""),
                    None,
                )
            )
            audits.append((created, f"run r_{run_id}", "hold.asked", run_id, hold_id, start_id, "{}"))
            if finished:
                resume_id = f"inv_{secrets.token_hex(12)}"
                resume = {
                    "hold_id": f"h_{hold_id}",
                    "resolved_by": "human" if status == "decided" else "expired",
                    "items": decided if status == "decided" else [],
                    "comment": None,
                }
                invs.append(
                    (
                        resume_id,
                        run_id,
                        "resume",
                        2,
                        "answered",
                        run_token_hash(resume_id),
                        json.dumps(resume),
                        hold_id,
                        1,
                        decided_at,
                        json.dumps({"status": "completed", "output": {}}),
                        "",
                        decided_at,
                        decided_at,
                        decided_at,
                    )
                )
                audits.append(
                    (
                        decided_at,
                        "member" if status == "decided" else "system",
                        f"hold.{status}",
                        run_id,
                        hold_id,
                        resume_id,
                        "{}",
                    )
                )
            run_id += 1
            hold_id += 1
        with transaction.atomic():
            _write(Run, runs)
            # Holds point at their start invocation and resumes at their hold: both rows go in one
            # transaction, and the foreign keys are deferred until commit.
            _write(Invocation, [row for row in invs if row[2] == "start"])
            _write(Hold, hold_rows)
            _write(Invocation, [row for row in invs if row[2] == "resume"])
            _write(HoldItem, item_rows)
            _write(AuditEvent, audits)
            # The ops counters learn of these pending holds as they would of asked ones.
            PendingCount.objects.bulk_create(PendingCount(capability_id=c, delta=n) for c, n in pending.items())
        done += size
        if progress:
            progress(done)
    _sync_sequences()
    if connection.vendor == "postgresql" and not connection.in_atomic_block:
        # As after any bulk load: statistics for the planner, and the visibility map that a
        # database which grew over months has from autovacuum (index-only scans depend on it).
        with connection.cursor() as cursor:
            cursor.execute("VACUUM (ANALYZE)")
    elif connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")  # VACUUM cannot run inside a transaction (tests seed in one)
    return counts
