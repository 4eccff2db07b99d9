"""Bulk data for benchmarks and load tests: realistic holds, fast (COPY).
`python -m bench.seed --holds N` runs `seed`; the benchmarks call it and `copy_run` directly.
The product never imports bench/ (an import-linter contract).

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
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import timedelta

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from holds.auth import run_token_hash
from holds.config import new_secret
from holds.models import (
    INVOCATION_ID_RANDOM_BYTES,
    AuditEvent,
    Capability,
    DeliveryAttempt,
    Hold,
    HoldItem,
    Invocation,
    PendingCount,
    Run,
    invocation_id_at,
    milliseconds,
    new_invocation_id,
)
from holds.services.gateway import driver_cursor

PAYEES = ["Aksa Lojistik", "Acme", "Globex", "Initech", "Umbrella", "Stark Industries", "Wayne Ent.", "Hooli"]
# The generator writes its JSON from parts encoded once: json.dumps per value was half its time.
PAYEES_JSON = {payee: json.dumps(payee) for payee in PAYEES}
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
    with driver_cursor() as cursor:
        cursor.execute(f"SELECT COALESCE(MAX(id), 0) FROM {model._meta.db_table}")
        return cursor.fetchone()[0] + 1


def _write(model, rows: list[tuple]) -> None:
    if not rows:
        return
    table, columns = model._meta.db_table, COLUMNS[model]
    with driver_cursor() as cursor:
        raw = cursor.cursor  # psycopg's own cursor: COPY is several times faster than INSERT
        with raw.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)


def _sync_sequences() -> None:
    with driver_cursor() as cursor:
        for model in (Run, Hold, HoldItem, AuditEvent):
            table = model._meta.db_table
            cursor.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT COALESCE(MAX(id), 1) FROM {table}))"
            )


@dataclass(frozen=True)
class _Plan:
    """What every chunk of one seed shares. Chunk `k` draws from its own generator, so a chunk
    writes the same holds whichever thread writes it and whenever."""

    holds: int
    caps: list
    items: int
    mix: tuple[float, float, float]
    due: bool
    seed_value: int
    now: object
    first_run_id: int
    first_hold_id: int

    @property
    def pending_window(self) -> float:
        # Pending holds are the newest ones: a hold is decided or expires within days of its ask,
        # so in a history of months only the last stretch can still be pending. 80 % of the holds
        # asked in that stretch are, the rest of the mix is spread over the whole history.
        return min(1.0, self.mix[0] / 0.8) if self.mix[0] else 0.0


def seed(
    *,
    holds: int,
    capability_count: int = 5,
    items: int = 2,
    mix: tuple[float, float, float] = (0.1, 0.8, 0.1),
    due: bool = False,
    seed_value: int = 7,
    progress=None,
    chunk: int = CHUNK,
) -> dict:
    """Writes `holds` holds in about the pending/decided/expired `mix`, ids in the order of their
    asks over the last 30 days. With `due`, pending ones are past their expiry (for sweep tests
    and benchmarks). Returns counts per status.

    Outside a transaction the chunks are written by two threads, each with its own
    connection and a transaction per chunk: one generates rows while PostgreSQL stores the other's.
    If the role may (a superuser), each chunk skips the per-row foreign-key checks
    (session_replication_role, as pg_dump's --disable-triggers does) and every foreign key of the
    seeded tables is checked once at the end, one join per key (the per-row checks at commit were
    a quarter of the seed's time).
    """
    caps = capabilities(capability_count)
    plan = _Plan(
        holds=holds,
        caps=[(cap.pk, cap.version, cap.endpoint) for cap in caps],
        items=items,
        mix=mix,
        due=due,
        seed_value=seed_value,
        now=timezone.now(),
        first_run_id=_next_id(Run),
        first_hold_id=_next_id(Hold),
    )
    chunks = [(start, min(chunk, holds - start)) for start in range(0, holds, chunk)]
    counts = Counter({"pending": 0, "decided": 0, "expired": 0})
    done = 0
    if not connection.in_atomic_block and len(chunks) > 1:
        unchecked = _may_skip_foreign_key_checks()
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = {
                pool.submit(_chunk_on_own_connection, plan, start, size, unchecked): size for start, size in chunks
            }
            for future in as_completed(futures):
                counts.update(future.result())
                done += futures[future]
                if progress:
                    progress(done)
        if unchecked:
            _check_foreign_keys()
    else:
        for start, size in chunks:
            counts.update(_write_chunk(plan, start, size, unchecked=False))
            done += size
            if progress:
                progress(done)
    _sync_sequences()
    with driver_cursor() as cursor:
        # As after any bulk load: statistics for the planner, and the visibility map that a
        # database which grew over months has from autovacuum (index-only scans depend on it).
        # VACUUM cannot run inside a transaction (tests seed in one): ANALYZE there.
        cursor.execute("ANALYZE" if connection.in_atomic_block else "VACUUM (ANALYZE)")
    return dict(counts)


SEEDED_TABLES = (Run, Invocation, Hold, HoldItem, AuditEvent, PendingCount)


def _may_skip_foreign_key_checks() -> bool:
    with driver_cursor() as cursor:
        cursor.execute("SELECT current_setting('is_superuser') = 'on'")
        return cursor.fetchone()[0]


def _check_foreign_keys() -> None:
    """Every foreign key of the seeded tables, checked once over the whole table (an anti-join),
    after chunks that skipped the per-row checks. Raises if a seeded row points nowhere."""
    tables = [model._meta.db_table for model in SEEDED_TABLES]
    with driver_cursor() as cursor:
        cursor.execute(
            """
            SELECT c.conname, c.conrelid::regclass::text, a.attname, c.confrelid::regclass::text, fa.attname
            FROM pg_constraint c
            JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
            JOIN pg_attribute fa ON fa.attrelid = c.confrelid AND fa.attnum = c.confkey[1]
            WHERE c.contype = 'f' AND c.conrelid::regclass::text = ANY(%s) AND cardinality(c.conkey) = 1
            """,
            [tables],
        )
        keys = cursor.fetchall()
        for name, table, column, target, target_column in keys:
            cursor.execute(
                f"SELECT count(*) FROM {table} t WHERE t.{column} IS NOT NULL"
                f" AND NOT EXISTS (SELECT 1 FROM {target} f WHERE f.{target_column} = t.{column})"
            )
            if dangling := cursor.fetchone()[0]:
                raise IntegrityError(f"seeding left {dangling} rows of {table} that break {name}")


def _chunk_on_own_connection(plan: _Plan, start: int, size: int, unchecked: bool) -> Counter:
    try:
        return _write_chunk(plan, start, size, unchecked=unchecked)
    finally:
        connection.close()  # this thread's own connection


def _write_chunk(plan: _Plan, start: int, size: int, *, unchecked: bool) -> Counter:
    """Holds number `start` to `start + size - 1` of the plan, with everything they imply, in one
    transaction."""
    runs, invs, hold_rows, item_rows, audits, pending, counts = _generate(plan, start, size)
    with transaction.atomic():
        if unchecked:
            with driver_cursor() as cursor:
                cursor.execute("SET LOCAL session_replication_role = replica")
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
    return counts


HISTORY = 30 * 24 * 3600  # seconds of asks the seeded holds span


def _generate(plan: _Plan, start: int, size: int):
    rng = random.Random(plan.seed_value * 1_000_003 + start)
    now, items, mix = plan.now, plan.items, plan.mix
    counts, pending = Counter(), Counter()
    runs, invs, hold_rows, item_rows, audits = [], [], [], [], []
    # Invocation ids as the write path makes them (models.new_invocation_id: their time, then random
    # bytes), the random part read from one draw per chunk; a call of secrets.token_hex per id was a
    # sixth of the generator's time.
    width = 2 * INVOCATION_ID_RANDOM_BYTES
    pool = secrets.token_bytes(INVOCATION_ID_RANDOM_BYTES * 2 * size).hex()
    random_hex = (pool[i : i + width] for i in range(0, len(pool), width))
    for n in range(start, start + size):
        run_id, hold_id = plan.first_run_id + n, plan.first_hold_id + n
        cap_id, cap_version, cap_endpoint = plan.caps[rng.randrange(len(plan.caps))]
        # Asked in order over the history, the last one a minute ago: ids follow time, as they do.
        newness = (n + rng.random()) / plan.holds  # 0: the first ask, 1: the last
        created = now - timedelta(seconds=60 + (1 - newness) * (HISTORY - 60))
        if 1 - newness < plan.pending_window and rng.random() < plan.mix[0] / plan.pending_window:
            status = "pending"
        else:
            rest = mix[1] + mix[2]
            status = "decided" if rest and rng.random() < mix[1] / rest else "expired"
        counts[status] += 1
        if status == "pending":
            pending[cap_id] += 1
            expires = (
                now - timedelta(seconds=rng.randrange(1, 3600))
                if plan.due
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
        start_id = invocation_id_at(milliseconds(created), next(random_hex))
        finished = status != "pending"
        runs.append(
            (
                run_id,
                cap_id,
                cap_version,
                cap_endpoint,
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
                f'{{"status": "suspended", "hold_id": "h_{hold_id}"}}',
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
            # (id, title, data as JSON, confidence as JSON); PostgreSQL's jsonb input checks each.
            item_list.append(
                (
                    f"INV-{hold_id}-{n}",
                    f"{payee} · {amount}",
                    f'{{"payee": {PAYEES_JSON[payee]}, "amount": "{amount}"}}',
                    f'{{"amount": {conf!r}}}',
                )
            )
        intent = f"Pay {items} invoices for {item_list[0][1].partition(' · ')[0]}"  # the first payee
        for n, (item_id, title, data, confidence) in enumerate(item_list):
            action = rng.choice(["approve", "approve", "approve", "reject", "edit"]) if status == "decided" else ""
            item_rows.append(
                (hold_id, n, item_id, title, data, confidence, action, data if action == "edit" else None, None)
            )
            decided.append(f'{{"id": "{item_id}", "action": "{action}", "data": {data}, "comment": null}}')
        fingerprint = hashlib.sha256(f"{hold_id}:{intent}".encode()).hexdigest()
        hold_rows.append(
            (
                hold_id,
                run_id,
                start_id,
                cap_id,
                status,
                intent,
                '["approve", "edit", "reject"]',
                "",
                "[]",
                expires,
                created,
                items,
                min(confidences),
                " ".join([intent, f"r_{run_id}"] + [i[0] for i in item_list] + [i[1] for i in item_list]).lower(),
                fingerprint,
                decided_at,
                {"decided": "member", "expired": "expired"}.get(status, ""),
                None,
            )
        )
        audits.append((created, f"run r_{run_id}", "hold.asked", run_id, hold_id, start_id, "{}"))
        if finished:
            resume_id = invocation_id_at(milliseconds(decided_at), next(random_hex))
            resume = (
                f'{{"hold_id": "h_{hold_id}", "resolved_by": "{"human" if status == "decided" else "expired"}",'
                f' "items": [{", ".join(decided) if status == "decided" else ""}], "comment": null}}'
            )
            invs.append(
                (
                    resume_id,
                    run_id,
                    "resume",
                    2,
                    "answered",
                    run_token_hash(resume_id),
                    resume,
                    hold_id,
                    1,
                    decided_at,
                    '{"status": "completed", "output": {}}',
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
    return runs, invs, hold_rows, item_rows, audits, pending, counts


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
    with transaction.atomic(), driver_cursor() as cursor:
        for sql in statements:
            cursor.execute(sql, params)
    return [RunCopy(*ids) for ids in zip(run_ids, invocation_ids, hold_ids, strict=True)]


def _allocate_ids(model, count: int) -> list[int]:
    with driver_cursor() as cursor:
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
    """The hold's search text with the copy's run id in place of the original's (services.asks.search_parts)."""
    head, found, tail = hold.search_text.partition(f" r_{run_id} ")
    if not found:
        raise ValueError(f"the search text of {hold.public_id} does not name its run r_{run_id}")
    return f"{head} r_{copy_run_id} {tail}"
