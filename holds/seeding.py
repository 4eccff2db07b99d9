"""Bulk data for benchmarks and load tests: realistic holds, fast (COPY on PostgreSQL).

This bypasses services.py on purpose: it writes the end states that the write path would have
produced (asked, decided, expired holds with their runs, invocations, items and audit rows), a
million at a time. It assumes nothing else writes to these tables while it runs. copy_run writes
thousands of copies of one run that the write path made, for benchmarks that need them live.
"""

import hashlib
import json
import random
import secrets
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from .auth import run_token_hash
from .config import new_secret
from .models import (
    AuditEvent,
    Capability,
    DeliveryAttempt,
    Hold,
    HoldItem,
    Invocation,
    PendingCount,
    Run,
    new_invocation_id,
)

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


@dataclass(frozen=True)
class RunCopy:
    run_id: int
    invocation_id: str
    hold_id: int | None


# One row per copy: the ids it is given and the values that name them.
_COPIES = (
    "unnest(%(run_ids)s::bigint[], %(invocation_ids)s::text[], %(token_hashes)s::text[], %(answers)s::text[],"
    " %(hold_ids)s::bigint[], %(search_texts)s::text[]) WITH ORDINALITY"
    " AS x(run_id, invocation_id, token_hash, answer, hold_id, search_text, n)"
)


def copy_run(run_id: int, count: int) -> list[RunCopy]:
    """`count` copies of run `run_id`, which the write path made, with every row it wrote (PostgreSQL).

    A benchmark that needs thousands of live runs makes one through services.py (a claimed start
    invocation, or a held hold) and copies it here, a few statements for all of them instead of a
    dozen round trips each. Every column is the original's but the ids and what names them: the
    invocation's id and token hash (so each copy has its own run token, live when the original's
    is), the hold's run and invocation, its search text, the suspended answer naming the hold, the
    audit events' references and the asking run's actor. Times are the original's. A pending hold
    also gets the +1 pending count its ask wrote (that row names no hold, so it is written anew).
    The run must have exactly one invocation, its start (a run with more is refused).
    """
    invocations = list(Invocation.objects.filter(run_id=run_id))
    if len(invocations) != 1:
        raise ValueError(f"r_{run_id} has {len(invocations)} invocations; copy_run copies a run with one")
    invocation, hold = invocations[0], Hold.objects.filter(run_id=run_id).first()
    run_ids = _allocate_ids(Run, count)
    hold_ids = _allocate_ids(Hold, count) if hold else [None] * count
    invocation_ids = [new_invocation_id() for _ in range(count)]
    answer = Invocation._meta.get_field("answer")
    params = {
        "run": run_id,
        "invocation": invocation.id,
        "hold": hold.pk if hold else None,
        "capability": hold.capability_id if hold else None,
        "run_actor": f"run r_{run_id}",
        "run_ids": run_ids,
        "invocation_ids": invocation_ids,
        "token_hashes": [run_token_hash(i) for i in invocation_ids],
        "answers": [answer.get_prep_value(_answer_naming(invocation.answer, hold, h)) for h in hold_ids],
        "hold_ids": hold_ids,
        "search_texts": [_search_text_naming(hold, run_id, r) for r in run_ids] if hold else [None] * count,
    }
    statements = [
        _copy(Run, "t.id = %(run)s", {"id": "x.run_id"}),
        _copy(
            Invocation,
            "t.id = %(invocation)s",
            {"id": "x.invocation_id", "run_id": "x.run_id", "token_hash": "x.token_hash", "answer": "x.answer"},
        ),
        _copy(
            AuditEvent,
            "t.run_id_ref = %(run)s",
            {
                "run_id_ref": "x.run_id",
                "hold_id_ref": "CASE WHEN t.hold_id_ref = %(hold)s THEN x.hold_id ELSE t.hold_id_ref END",
                "invocation_id_ref": "CASE WHEN t.invocation_id_ref = %(invocation)s THEN x.invocation_id"
                " ELSE t.invocation_id_ref END",
                "actor": "CASE WHEN t.actor = %(run_actor)s THEN 'run r_' || x.run_id ELSE t.actor END",
            },
        ),
        _copy(DeliveryAttempt, "t.invocation_id = %(invocation)s", {"invocation_id": "x.invocation_id"}),
    ]
    if hold:
        statements += [
            _copy(
                Hold,
                "t.id = %(hold)s",
                {
                    "id": "x.hold_id",
                    "run_id": "x.run_id",
                    "invocation_id": "x.invocation_id",
                    "search_text": "x.search_text",
                },
            ),
            _copy(HoldItem, "t.hold_id = %(hold)s", {"hold_id": "x.hold_id"}),
        ]
    if hold and hold.status == Hold.Status.PENDING:
        statements.append(
            f"INSERT INTO {PendingCount._meta.db_table} (capability_id, delta) SELECT %(capability)s, 1 FROM {_COPIES}"
        )
    with transaction.atomic(), connection.cursor() as cursor:
        for sql in statements:
            cursor.execute(sql, params)
    return [RunCopy(*ids) for ids in zip(run_ids, invocation_ids, hold_ids, strict=True)]


def _allocate_ids(model, count: int) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
            [model._meta.db_table, count],
        )
        return [row[0] for row in cursor.fetchall()]


def _copy(model, where: str, replaced: dict[str, str]) -> str:
    """INSERT … SELECT of `model`'s rows matching `where` (alias t), once per copy (alias x), with
    `replaced` columns computed; a primary key not replaced is the table's own default. Rows go in
    copy by copy, each copy's in the original's order, as the write path would have written them."""
    quote = connection.ops.quote_name
    columns = [f.column for f in model._meta.concrete_fields if not f.primary_key or f.column in replaced]
    values = [replaced.get(column, f"t.{quote(column)}") for column in columns]
    return (
        f"INSERT INTO {model._meta.db_table} ({', '.join(quote(c) for c in columns)})"
        f" SELECT {', '.join(values)} FROM {model._meta.db_table} t, {_COPIES} WHERE {where} ORDER BY x.n, t.id"
    )


def _answer_naming(answer, hold: Hold | None, hold_id: int | None):
    """The original invocation's answer, for a copy: a suspended answer names the copy's hold."""
    if hold is not None and isinstance(answer, dict) and answer.get("hold_id") == hold.public_id:
        return {**answer, "hold_id": f"h_{hold_id}"}
    return answer


def _search_text_naming(hold: Hold, run_id: int, copy_run_id: int) -> str:
    """The hold's search text with the copy's run id in place of the original's (services._search_parts)."""
    head, found, tail = hold.search_text.partition(f" r_{run_id} ")
    if not found:
        raise ValueError(f"the search text of {hold.public_id} does not name its run r_{run_id}")
    return f"{head} r_{copy_run_id} {tail}"
