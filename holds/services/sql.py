"""Every hand-written statement of the write path, in one place.

Each is written by hand because it is hot: one round trip where the ORM needs several, and prepared
once per connection (services/gateway.py). Statuses and kinds are rendered from the models' enums as
literals, not bound as parameters: a prepared statement's generic plan can use a partial index
(`WHERE status = 'pending'`) only when the literal is in its text (docs/decisions.md, "One database").
Each statement's comment says what it does and names the test that pins it.
"""

import functools
import zlib

from ..auth import SYSTEM, TOKEN_PREFIX
from ..models import FINISHED_RUN, Action, AuditKind, Capability, Experiment, Hold, HoldItem, Invocation, Run
from . import gateway


def lit(value: str) -> str:
    """An enum value as a SQL literal (enum values are plain words; the assert keeps them so)."""
    assert value.replace("_", "").replace(".", "").isalnum(), value
    return f"'{value}'"


PENDING_HOLD = lit(Hold.Status.PENDING)
WAITING = lit(Invocation.Status.WAITING)
PENDING = lit(Invocation.Status.PENDING)
DELIVERING = lit(Invocation.Status.DELIVERING)
PARKED = lit(Invocation.Status.PARKED)
CANCELLED_INVOCATION = lit(Invocation.Status.CANCELLED)
RESUME = lit(Invocation.Kind.RESUME)
LIVE_INVOCATION = f"({DELIVERING}, {PENDING})"  # an invocation being delivered or due: its agent may answer


# /healthz: the database answers.
PING = "SELECT 1"

# The transaction this starts commits without waiting for the disk (the claim: a claim lost in a crash
# only means a second send with the same webhook-id, which delivery is built for).
COMMIT_WITHOUT_WAITING = "SET LOCAL synchronous_commit TO OFF"


# A person's decision publishes its resume while its writes run, before its COMMIT (services/decisions.py).
# Its transaction takes LOCK_RESUME, keyed by the resume's id, with its first read, before the publish; a
# claim first waits for the same lock, shared (WAIT_FOR_RESUME), so a worker that gets the message at once
# sees the committed resume. The two-key form: its keys never meet the single-key locks taken elsewhere.
# Pinned by test_races (a claim that arrives before the decision's COMMIT; a decision that loses publishes
# an id that claims nothing) and performance/test_round_trips (the statements of a decision and a claim).
RESUME_LOCK_SPACE = 0x52510001
LOCK_RESUME = f"SELECT pg_advisory_xact_lock({RESUME_LOCK_SPACE}, %(resume_lock)s::int)"
WAIT_FOR_RESUME = f"SELECT pg_advisory_xact_lock_shared({RESUME_LOCK_SPACE}, %(resume_lock)s::int)"


def resume_lock(invocation_id: str) -> int:
    """The lock's second key, from the invocation's id: 31 bits, never negative (bound on the client, as
    with RQ_TRANSACTION_POOLER, -2147483648::int would not parse); two ids that share one only wait for
    each other."""
    return zlib.crc32(invocation_id.encode()) & 0x7FFFFFFF


# --- run tokens ---------------------------------------------------------------------------------

# When the run token of invocation `i` (of run `r`) is live: from the invocation's first delivery
# until it answers or is given up, never while the run is held or finished, nor once a later
# invocation has superseded it. One predicate for the token lookup and for the ask, which checks its
# token inside its own INSERT statement (services.hold_ask_by_token). Both select it as a column
# of the row found by primary key, never as a WHERE condition: there the planner would walk the
# partial index of live invocations (the outbox's) looking for the id, which grows with the backlog.
LIVE_TOKEN = (
    f"i.status IN ({DELIVERING}, {PENDING}) AND i.attempts > 0"
    f" AND r.status = {lit(Run.Status.RUNNING)} AND i.seq = r.seq"
)


def _token() -> tuple:
    columns = (gateway.Columns(Invocation, "i"), gateway.Columns(Run, "r"), gateway.Columns(Capability, "c"))
    statement = (
        f"SELECT {', '.join(c.select() for c in columns)}, ({LIVE_TOKEN}) AS live"
        f" FROM {Invocation._meta.db_table} i JOIN {Run._meta.db_table} r ON r.id = i.run_id"
        f" JOIN {Capability._meta.db_table} c ON c.id = r.capability_id WHERE i.id = %s"
    )
    return statement, columns


# An invocation, its run and capability by the id a run token names, and whether the token is live (the
# last column): every agent request starts with this lookup. Pinned by test_security_tokens and
# performance/test_explain (by primary key).
TOKEN = gateway.Query(_token)

# auth.run_token_hash(id) in PostgreSQL's own functions, for writes that create many invocations in one
# statement (the sweep): HMAC-SHA256 spelt out as sha256(key^opad || sha256(key^ipad || id)), with
# the two padded keys passed as parameters (auth.run_token_sql_params), then the token's base64url and
# its sha256. The key is 32 bytes, shorter than SHA-256's 64-byte block, so it is zero-padded as HMAC
# does. Pinned by test_task_sweep (against run_token_hash).
RUN_TOKEN_HASH = (
    "encode(sha256(convert_to('" + TOKEN_PREFIX + "' || {id} || '.' || rtrim(translate(encode("
    "sha256(%(token_opad)s || sha256(%(token_ipad)s || convert_to({id}, 'UTF8'))), "
    "'base64'), '+/', '-_'), '='), 'UTF8')), 'hex')"
)


# --- runs ---------------------------------------------------------------------------------------

# A run finishes: lock its pending holds (a decision or sweep committing meanwhile is waited for), then,
# with a snapshot taken after those locks, write the run's status, cancel its pending holds and unsent
# invocations, count the holds out and audit it. Pinned by test_services_transitions (the cancel
# cases) and test_races::test_a_run_failing_while_its_hold_is_decided_waits_and_keeps_the_decision.
FINISH_RUN = (
    f"SELECT id FROM holds_hold WHERE run_id = %(run)s AND status = {PENDING_HOLD} FOR UPDATE",
    f"""
WITH finished AS (
    UPDATE holds_run SET status = %(status)s, output = %(output)s, error = %(error)s, finished_at = %(now)s
    WHERE id = %(run)s
), holds AS (
    UPDATE holds_hold SET status = {lit(Hold.Status.CANCELLED)}, decided_at = %(now)s
    WHERE run_id = %(run)s AND status = {PENDING_HOLD} RETURNING id
), counted AS (
    INSERT INTO holds_pendingcount (capability_id, delta)
    SELECT %(capability)s, -count(*) FROM holds HAVING count(*) > 0
), invocations AS (
    UPDATE holds_invocation SET status = {CANCELLED_INVOCATION}, lease_until = NULL
    WHERE run_id = %(run)s AND status = ANY(%(unsent)s) RETURNING id
)
INSERT INTO holds_auditevent (at, actor, kind, run_id_ref, hold_id_ref, invocation_id_ref, data)
SELECT %(now)s, %(actor)s, %(kind)s, %(run)s, NULL, '', jsonb_build_object(
    'error', %(error)s::text,
    'cancelled_holds', COALESCE((SELECT jsonb_agg('h_' || id ORDER BY id) FROM holds), '[]'),
    'cancelled_invocations', COALESCE((SELECT jsonb_agg(id ORDER BY id) FROM invocations), '[]'))
""",
)


# --- evals --------------------------------------------------------------------------------------

# An experiment finishes once every run of it (its items' runs; children of eval runs do not count) has
# finished: a conditional UPDATE on `running`, audited in the same statement, so two beats, or a beat and
# the last run's own attempt, finish it once. NULL experiment: every running one. Pinned by test_evals
# (test_it_finishes_an_experiment_once_when_two_beats_race).
FINISH_EXPERIMENTS = f"""
WITH done AS (
    UPDATE holds_experiment e SET status = {lit(Experiment.Status.FINISHED)}, finished_at = %(now)s
    WHERE e.status = {lit(Experiment.Status.RUNNING)}
      AND (%(experiment)s::bigint IS NULL OR e.id = %(experiment)s::bigint)
      AND NOT EXISTS (
          SELECT 1 FROM holds_run r WHERE r.experiment_id = e.id AND r.parent_id IS NULL
            AND r.status IN ({lit(Run.Status.RUNNING)}, {lit(Run.Status.HELD)}))
    RETURNING e.id, e.dataset_id
), audited AS (
    INSERT INTO holds_auditevent (at, actor, kind, run_id_ref, hold_id_ref, invocation_id_ref, data)
    SELECT %(now)s, {lit(SYSTEM.label)}, {lit(AuditKind.EXPERIMENT_FINISHED)}, NULL, NULL, '',
           jsonb_build_object('experiment', 'ex_' || id, 'dataset', 'ds_' || dataset_id)
    FROM done
)
SELECT id FROM done
"""


# --- asks ---------------------------------------------------------------------------------------


@functools.cache
def ask(hold_columns: tuple[str, ...], event_columns: tuple[str, ...], *, by_token: bool) -> str:
    """An ask in one statement: the hold, its items (one JSON array of rows, services.asks.item_rows: one
    text serves 1 to 100 items, and a large item costs one JSON encoding, not a second pass into array
    literals), its audit event and its +1 pending count, written only if the run's token is live. Its first
    part, `t`, is the run: the given one, or the token's, found by primary key and MATERIALIZED so that the
    liveness test stays a filter on that one row. Pinned by test_api_ask (the dead-token cases) and performance/
    (test_round_trips: one statement; test_explain: the token by primary key)."""
    if by_token:
        source = (
            # An eval run never asks (services.eval_ask_refusal answers it when this writes nothing).
            f"SELECT i.run_id, r.capability_id, ({LIVE_TOKEN} AND r.experiment_id IS NULL) AS live"
            " FROM holds_invocation i"
            " JOIN holds_run r ON r.id = i.run_id WHERE i.id = %s AND i.token_hash = %s"
        )
    else:
        source = "SELECT %s::bigint AS run_id, %s::bigint AS capability_id, true AS live"
    return (
        f"WITH t AS MATERIALIZED ({source}),"
        f" h AS (INSERT INTO holds_hold (run_id, capability_id, search_text, {', '.join(hold_columns)})"
        f" SELECT t.run_id, t.capability_id, %s || 'r_' || t.run_id || %s, {', '.join(['%s'] * len(hold_columns))}"
        " FROM t WHERE t.live RETURNING id, run_id, capability_id),"
        " i AS (INSERT INTO holds_holditem"
        " (hold_id, position, item_id, title, data, confidence, actions, details, details_html, schema,"
        " action, decided_data, comment)"
        " SELECT h.id, x.position, x.item_id, x.title, x.data::text, x.confidence, x.actions, x.details,"
        " x.details_html, x.schema::text, '', NULL, NULL"
        # json, not jsonb: a json value's text is kept as written, so data and schema arrive exact.
        " FROM h, json_to_recordset(%s::json) AS x(position int, item_id text, title text, data json,"
        " confidence jsonb, actions jsonb, details text, details_html text, schema json)),"
        f" a AS (INSERT INTO holds_auditevent (hold_id_ref, run_id_ref, actor, {', '.join(event_columns)})"
        f" SELECT h.id, h.run_id, 'run r_' || h.run_id, {', '.join(['%s'] * len(event_columns))} FROM h),"
        " p AS (INSERT INTO holds_pendingcount (capability_id, delta) SELECT h.capability_id, 1 FROM h)"
        # What rules and grants need (services/rules.py), read with the hold: the capability's versions,
        # and its name and the run's input only when it has rules or grants.
        " SELECT h.id, h.run_id, h.capability_id, c.rules_version, c.grants_version,"
        " CASE WHEN c.rules_version + c.grants_version > 0 THEN c.name END,"
        " CASE WHEN c.rules_version + c.grants_version > 0 THEN r.input END"
        " FROM h JOIN holds_capability c ON c.id = h.capability_id JOIN holds_run r ON r.id = h.run_id"
    )


# --- decisions ----------------------------------------------------------------------------------


def _decide() -> tuple:
    columns = (
        gateway.Columns(Hold, "h"),
        gateway.Columns(Capability, "c"),
        gateway.Columns(Run, "r"),
        gateway.Columns(HoldItem, "i"),
    )
    statement = (
        f"SELECT {', '.join(c.select() for c in columns)} FROM holds_hold h"
        " JOIN holds_capability c ON c.id = h.capability_id JOIN holds_run r ON r.id = h.run_id"
        " LEFT JOIN holds_holditem i ON i.hold_id = h.id WHERE h.id = %s ORDER BY i.position"
    )
    return statement, columns


# The hold a decision starts from, with its capability, run and items, one row per item: one round trip
# where the ORM needs two. Pinned by performance/test_round_trips (a decision's queries).
DECIDE = gateway.Query(_decide)

# The conditional UPDATE that takes a hold for one decision: pending, and not expired by the database's
# clock. A concurrent decision or sweep waits on its row lock and then updates nothing. Pinned by
# test_races (approve against approve, reject and the sweep) and test_api_decision's 409 cases.
TAKE_HOLD = (
    f"UPDATE holds_hold SET {{stamp}} WHERE id = %(hold)s AND status = {PENDING_HOLD}"
    " AND (expires_at IS NULL OR expires_at > STATEMENT_TIMESTAMP()) RETURNING id"
)

# A quorum's approval (services/quorum.py) takes the hold's row lock first, so that approvals and
# decisions of one hold queue behind each other; it answers whether the hold is still open by the
# database's clock (no row: not pending any more).
LOCK_OPEN_HOLD = (
    "SELECT id, (expires_at IS NULL OR expires_at > STATEMENT_TIMESTAMP()) FROM holds_hold"
    f" WHERE id = %s AND status = {PENDING_HOLD} FOR UPDATE"
)

# An escalation step's claim (services/escalation.py): the unique (hold, step) row; no row back: taken.
TAKE_ESCALATION_STEP = (
    "INSERT INTO holds_holdescalation (hold_id, step, notified, at) VALUES (%s, %s, %s::jsonb, %s)"
    " ON CONFLICT (hold_id, step) DO NOTHING RETURNING id"
)


@functools.cache
def write_decision(invocation_columns: tuple[str, ...], event_columns: tuple[str, ...]) -> str:
    """What a won decision writes, in the same round trip as TAKE_HOLD: only where the hold carries this
    decision's stamp and has no resume yet, the -1 pending count, the items' decisions (one array per
    column), the resume (its seq after the asker's, waiting while the asker is still answering, read with
    this statement's newer snapshot) and the audit event. Pinned by test_api_decision (the resume's body),
    test_races (an asker answering meanwhile) and performance/test_round_trips."""
    return (
        "WITH won AS (SELECT h.id FROM holds_hold h WHERE h.id = %(hold)s AND h.status = %(status)s"
        " AND h.decided_at = %(decided_at)s AND h.decided_by = %(decided_by)s"
        f" AND NOT EXISTS (SELECT 1 FROM holds_invocation x WHERE x.hold_id = h.id AND x.kind = {RESUME})),"
        " p AS (INSERT INTO holds_pendingcount (capability_id, delta) SELECT %(capability)s, -1 FROM won),"
        " t AS (UPDATE holds_holditem AS t SET action = v.action, decided_data = v.decided_data,"
        " comment = v.comment, decided_by = v.decided_by::jsonb FROM won, unnest(%(item_ids)s::bigint[],"
        " %(actions)s::text[], %(decided_data)s::text[], %(comments)s::text[], %(item_decided_by)s::text[])"
        " AS v(id, action, decided_data, comment, decided_by) WHERE t.id = v.id),"
        " asker AS (SELECT x.seq, x.status FROM holds_invocation x, won WHERE x.id = %(asker)s),"
        f" r AS (INSERT INTO holds_invocation ({', '.join(invocation_columns)}, seq, status, next_attempt_at)"
        f" SELECT {', '.join(f'%(r{n})s' for n in range(len(invocation_columns)))}, asker.seq + 1, w.status,"
        f" CASE WHEN w.status = {PENDING} THEN %(now)s::timestamptz END FROM asker,"
        f" LATERAL (SELECT CASE WHEN asker.status IN {LIVE_INVOCATION} THEN {WAITING} ELSE {PENDING} END"
        " AS status) AS w RETURNING seq, status, next_attempt_at),"
        f" a AS (INSERT INTO holds_auditevent ({', '.join(event_columns)})"
        f" SELECT {', '.join(f'%(a{n})s' for n in range(len(event_columns)))} FROM won)"
        " SELECT seq, status, next_attempt_at FROM r"
    )


# --- expiry -------------------------------------------------------------------------------------

# A sweep batch's writes on the locked holds, set-based: the holds' UPDATE, their resumes (ids made as
# models.new_invocation_id makes them: `inv_`, 12 hex digits of milliseconds, 8 random bytes; the token
# hash as auth.run_token_hash), their audit rows and the pending counts' -n per capability. `resumes` is
# MATERIALIZED so that each row's random id is drawn once and read by both INSERTs. The 8 bytes are the
# random bytes 0-5 and 10-11 of one version-4 UUID (bytes 6 and 8 carry its version and variant), drawn
# in a subquery that PostgreSQL never flattens (a volatile target list), so read twice but drawn once: two
# UUIDs a row were a sixth of the time of its expressions (1.8 of about 10 us a hold). Pinned by
# test_task_sweep (what it writes, row for row; fresh ids and token hashes). A resume's receipt is signed
# when it is sent (holds/delivery.py, services.receipts.for_expired), not here: signing in the sweep made
# it 3x slower.
EXPIRE_LOCKED = (
    f"""
WITH expired AS (
    UPDATE holds_hold SET status = {lit(Hold.Status.EXPIRED)}, decided_at = %(now)s, decided_by = 'expired'
    WHERE id = ANY(%(hold_ids)s::bigint[]) AND status = {PENDING_HOLD}
    RETURNING id, run_id, invocation_id, capability_id, expires_at
), resumes AS MATERIALIZED (
    SELECT e.id, e.run_id, e.capability_id, e.expires_at, asker.seq + 1 AS seq,
           CASE WHEN asker.status IN {LIVE_INVOCATION} THEN {WAITING} ELSE {PENDING} END AS status,
           'inv_' || lpad(to_hex(floor(extract(epoch FROM %(now)s::timestamptz) * 1000)::bigint), 12, '0')
           || encode(substring(e.draw FROM 1 FOR 6) || substring(e.draw FROM 11 FOR 2), 'hex') AS invocation_id
    FROM (SELECT *, uuid_send(gen_random_uuid()) AS draw FROM expired) e
    JOIN holds_invocation asker ON asker.id = e.invocation_id
), resume_rows AS (
    INSERT INTO holds_invocation (id, run_id, kind, seq, status, token_hash, resume, hold_id, attempts,
                                  next_attempt_at, last_error, created_at)
    SELECT invocation_id, run_id, {RESUME}, seq, status, """
    + RUN_TOKEN_HASH.format(id="invocation_id")
    + f""",
           '{{"hold_id": "h_' || id || '", "resolved_by": "expired", "items": [], "comment": null}}',
           id, 0, CASE WHEN status = {PENDING} THEN %(now)s END, '', %(now)s
    FROM resumes
), audit_rows AS (
    INSERT INTO holds_auditevent (at, actor, kind, run_id_ref, hold_id_ref, invocation_id_ref, data)
    SELECT %(now)s, %(actor)s, {lit(AuditKind.HOLD_EXPIRED)}, run_id, id, invocation_id,
           jsonb_build_object('expires_at',
           to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
           || CASE WHEN extract(microseconds FROM expires_at) %% 1000000 = 0 THEN ''
                   ELSE to_char(expires_at AT TIME ZONE 'UTC', '.US') END
           || '+00:00')
    FROM resumes
), pending_counts AS (
    INSERT INTO holds_pendingcount (capability_id, delta)
    SELECT capability_id, -count(*) FROM expired GROUP BY capability_id
)
SELECT id, capability_id, invocation_id, status FROM resumes
"""
)


# What an expired hold's receipt states besides its resume's facts: when it expired and its items' asked
# data, one row per item (services.receipts.for_expired).
EXPIRED_FOR_RECEIPT = (
    "SELECT h.decided_at, i.item_id, i.data FROM holds_hold h LEFT JOIN holds_holditem i ON i.hold_id = h.id"
    " WHERE h.id = %s ORDER BY i.position"
)


# --- delivery -----------------------------------------------------------------------------------

# A worker claims a due invocation (or one whose lease ran out) with a lease, or parks it when its
# endpoint is disabled, and moves a held run on to its resume, looked up by the run's key (joined, the
# planner preferred to scan every held run). Pinned by test_races (two workers, one winner), test_task_deliver
# (leases, parking) and performance/test_explain (the held run by primary key).
CLAIM = f"""
WITH claimed AS (
    UPDATE holds_invocation AS i
    SET status = CASE WHEN c.endpoint_disabled_at IS NULL THEN {DELIVERING} ELSE {PARKED} END,
        lease_until = CASE WHEN c.endpoint_disabled_at IS NULL
                           THEN %(now)s + make_interval(secs => c.timeout_seconds + %(grace)s) END,
        attempts = i.attempts + CASE WHEN c.endpoint_disabled_at IS NULL THEN 1 ELSE 0 END,
        first_sent_at = CASE WHEN c.endpoint_disabled_at IS NULL
                             THEN COALESCE(i.first_sent_at, %(now)s) ELSE i.first_sent_at END
    FROM holds_run AS r JOIN holds_capability AS c ON c.id = r.capability_id
    WHERE i.id = %(id)s AND r.id = i.run_id
      AND ((i.status = {PENDING} AND i.next_attempt_at <= %(now)s)
           OR (i.status = {DELIVERING} AND i.lease_until < %(now)s))
    RETURNING {{columns}}
), moved AS (
    UPDATE holds_run AS r SET status = {lit(Run.Status.RUNNING)}, seq = (SELECT i_seq FROM claimed)
    WHERE r.id = (SELECT i_run_id FROM claimed WHERE i_kind = {RESUME} AND i_status = {DELIVERING})
      AND r.status = {lit(Run.Status.HELD)}
    RETURNING r.id
)
SELECT claimed.*, EXISTS (SELECT 1 FROM moved) FROM claimed
"""

# The row locks of recording an answer: the claimed invocation (still this attempt's), then its run.
# NO KEY locks still order every writer of the run, but not a decision or sweep inserting the run's
# resume (whose foreign key takes KEY SHARE on the run while it holds the hold's lock that this answer
# waits for). Pinned by test_races (answers against decisions and the sweep) and test_task_deliver
# (a stale claim records nothing).
_STILL_CLAIMED = f"i.id = %(id)s AND i.status = {DELIVERING} AND i.attempts = %(attempt)s"
LOCK_CLAIMED = f"""
SELECT {{columns}}
FROM holds_invocation AS i JOIN holds_run AS r ON r.id = i.run_id JOIN holds_capability AS c ON c.id = r.capability_id
WHERE {_STILL_CLAIMED}
FOR NO KEY UPDATE OF i, r
"""

# Then the hold the locked invocation asked (its latest), locked in turn: a decision or the sweep holds
# it while it creates a resume, so the answer sees that resume. Pinned with LOCK_CLAIMED.
LOCK_ASKED = f"""
SELECT id, status FROM holds_hold WHERE invocation_id = %(id)s
  AND EXISTS (SELECT 1 FROM holds_invocation WHERE id = %(id)s AND status = {DELIVERING} AND attempts = %(attempt)s)
ORDER BY id DESC LIMIT 1 FOR UPDATE
"""

# The relay takes due rows to publish: outbox rows due now that no relay published within its lease, and
# claims whose lease ran out (a dead worker). A pending row it takes is leased (lease_until, read by the
# relay alone: the claim of a pending row looks at next_attempt_at), so its message, still queued behind
# a backlog, is not joined by another on every tick; a lapsed claim is published as it is and its next
# claim renews the lease. SKIP LOCKED: two relays take different gateway. Pinned by test_task_deliver
# (1,000 due rows, two ticks, 1,000 messages) and test_two_hosts (two relays at once).
RELAY_DUE = f"""
WITH due AS (
    SELECT id FROM holds_invocation
    WHERE (status = {PENDING} AND next_attempt_at <= %(now)s AND (lease_until IS NULL OR lease_until < %(now)s))
       OR (status = {DELIVERING} AND lease_until < %(now)s)
    ORDER BY next_attempt_at LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), leased AS (
    UPDATE holds_invocation AS i SET lease_until = %(until)s
    FROM due WHERE i.id = due.id AND i.status = {PENDING}
)
SELECT id FROM due
"""

# The relay's lease given back on rows the broker refused (still pending: no worker claimed them).
# Pinned by test_task_deliver (the relay finds what publishing lost).
RELAY_RELEASE = f"UPDATE holds_invocation SET lease_until = NULL WHERE id = ANY(%(ids)s) AND status = {PENDING}"

# One delivery attempt and its audit event, which always go together. Pinned by test_task_deliver
# (attempt rows and the audit log).
_INSERT_ATTEMPT = (
    "INSERT INTO holds_deliveryattempt (invocation_id, number, started_at, latency_ms, status_code, outcome, error)"
    " SELECT %(id)s, %(attempt)s, %(started_at)s, %(latency_ms)s, %(status_code)s, %(result)s, %(error)s"
)
_AUDIT_ATTEMPT = (
    "INSERT INTO holds_auditevent (at, actor, kind, run_id_ref, hold_id_ref, invocation_id_ref, data)"
    f" SELECT %(at)s, %(actor)s, {lit(AuditKind.INVOCATION_ATTEMPT)}, %(run)s, NULL, %(id)s, %(data)s::jsonb"
)
WRITE_ATTEMPT = f"WITH attempt AS ({_INSERT_ATTEMPT}) {_AUDIT_ATTEMPT}"

# The common answer, "completed" with an output its schema accepts, recorded in the round trip of its locks
# (services.delivery._record_completed): first the claimed invocation and its run locked as LOCK_CLAIMED
# locks them, then, with a snapshot taken after those locks, one statement that writes what the general
# path writes for it (SET_INVOCATION, FINISH_RUN with nothing to cancel, WRITE_ATTEMPT) where that path
# would write nothing else: the claim is still this attempt's, the run is not finished, it has no pending
# hold and no unsent invocation to cancel, this invocation asked no hold (LOCK_ASKED would lock it), the
# endpoint is neither stalled nor failing (so _note_stall has nothing to clear), and the output schema is
# still the one the output was checked against. No row back: nothing was written, and the general path
# records the answer. Pinned by test_task_deliver (each way back to it) and performance/test_round_trips.
LOCK_CLAIM_ROWS = f"SELECT 1 FROM holds_invocation AS i JOIN holds_run AS r ON r.id = i.run_id WHERE {_STILL_CLAIMED}"
LOCK_CLAIM_ROWS += " FOR NO KEY UPDATE OF i, r"
RECORD_COMPLETED = f"""
WITH ok AS (
    SELECT i.id, i.run_id FROM holds_invocation AS i
    JOIN holds_run AS r ON r.id = i.run_id JOIN holds_capability AS c ON c.id = r.capability_id
    WHERE {_STILL_CLAIMED} AND r.status NOT IN ({", ".join(lit(s) for s in FINISHED_RUN)})
      AND c.endpoint_stalled_at IS NULL AND c.endpoint_failures = 0
      AND c.output_schema IS NOT DISTINCT FROM %(schema)s::jsonb
      AND NOT EXISTS (SELECT 1 FROM holds_hold AS h WHERE h.invocation_id = i.id)
      AND NOT EXISTS (SELECT 1 FROM holds_hold AS h WHERE h.run_id = i.run_id AND h.status = {PENDING_HOLD})
      AND NOT EXISTS (SELECT 1 FROM holds_invocation AS u WHERE u.run_id = i.run_id AND u.status = ANY(%(unsent)s))
), invocation AS (
    UPDATE holds_invocation AS i SET status = {lit(Invocation.Status.ANSWERED)}, lease_until = NULL, last_error = '',
           answer = %(answer)s, answered_at = %(at)s
    FROM ok WHERE i.id = ok.id
), run AS (
    UPDATE holds_run AS r SET status = {lit(Run.Status.COMPLETED)}, output = %(output)s, error = '',
           finished_at = %(at)s
    FROM ok WHERE r.id = ok.run_id
), attempt AS ({_INSERT_ATTEMPT} FROM ok
), attempt_event AS ({_AUDIT_ATTEMPT} FROM ok)
INSERT INTO holds_auditevent (at, actor, kind, run_id_ref, hold_id_ref, invocation_id_ref, data)
SELECT %(at)s, %(actor)s, {lit(AuditKind.RUN_COMPLETED)}, %(run)s, NULL, '',
       jsonb_build_object('error', '', 'cancelled_holds', '[]'::jsonb, 'cancelled_invocations', '[]'::jsonb)
FROM ok RETURNING id
"""

# An invocation's new status after an attempt, as save(update_fields=...) would write it. Pinned by
# test_task_deliver (answers, retries, undeliverable).
SET_INVOCATION = (
    "UPDATE holds_invocation SET status = %s, lease_until = NULL, last_error = %s, answer = %s,"
    " answered_at = %s, next_attempt_at = %s WHERE id = %s"
)


# --- rules and grants (services/rules.py) -------------------------------------------------------------

# A grant is never wider than what its author may decide now: a person still active whose role is one
# of the capability's approvers, or a service account not revoked whose role is. Tested in the UPDATE
# that takes a use, so a role change applies from the next ask, whatever a process has cached.
_AUTHOR_STILL_APPROVES = (
    "(EXISTS (SELECT 1 FROM auth_user u LEFT JOIN holds_membership m ON m.user_id = u.id"
    " JOIN holds_capability c ON c.id = g.capability_id WHERE u.id = g.created_by_user_id AND u.is_active"
    " AND c.approvers ? (CASE WHEN u.is_superuser THEN 'admin' ELSE COALESCE(m.role, 'viewer') END))"
    " OR EXISTS (SELECT 1 FROM holds_serviceaccount a JOIN holds_capability c ON c.id = g.capability_id"
    " WHERE a.id = g.created_by_account_id AND a.revoked_at IS NULL AND c.approvers ? a.role))"
)

# Takes each grant's uses (per grant, the number of items it decides) where it is live, has them left
# and its author still approves; the ids it returns are the grants taken (tests/test_api_rules.py's races).
TAKE_GRANT_USES = (
    "UPDATE holds_grant g SET uses = g.uses + w.n, last_used_at = %s"
    " FROM unnest(%s::bigint[], %s::int[]) AS w(id, n)"
    " WHERE g.id = w.id AND g.revoked_at IS NULL AND g.expires_at > STATEMENT_TIMESTAMP()"
    " AND (g.max_uses IS NULL OR g.uses + w.n <= g.max_uses)"
    f" AND {_AUTHOR_STILL_APPROVES} RETURNING g.id"
)

# A hold's item primary keys in asking order (a hold decided whole by rules writes each item by key).
ITEM_PKS = "SELECT id FROM holds_holditem WHERE hold_id = %s ORDER BY position"

# Rules decided some items: the pending hold's fingerprint changes first, so a person's form that showed
# every item open is refused as changed (tests/test_rules_ask.py).
RULE_TAKE_HOLD = f"UPDATE holds_hold SET fingerprint = %s WHERE id = %s AND status = {PENDING_HOLD} RETURNING id"

# ... and those items get the rule's action, comment and decided_by.
RULE_DECIDE_ITEMS = (
    "UPDATE holds_holditem t SET action = v.action, comment = v.comment, decided_by = v.decided_by::jsonb"
    " FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]) AS v(item_id, action, comment, decided_by)"
    " WHERE t.hold_id = %s AND t.item_id = v.item_id"
)


def backtest_rows(with_input: bool) -> str:
    """The backtest's one pass (holds/backtest.py): per item of the capability's holds decided by people
    since a moment, newest first, up to a limit: (hold id, item id, title, data, confidence as JSON
    text, offers approve, the person's action, the run's input or NULL). Whether approve is offered is
    computed here; the lowest confidence is not: a jsonb_each per row cost the server half of the
    statement's time (1.3 of 2.2 s at 100,000 items), decoding the small object in Python a tenth of
    that. By the `hold_decided_by_capability` index (tests/test_api_rules.py counts one query)."""
    run_input, join = ("r.input", " JOIN holds_run r ON r.id = h.run_id") if with_input else ("NULL", "")
    return (
        "SELECT h.id, i.item_id, i.title, i.data, i.confidence::text,"
        f" COALESCE(i.actions, h.actions) ? {lit(Action.APPROVE)},"
        f" i.action, {run_input}"
        f" FROM holds_hold h JOIN holds_holditem i ON i.hold_id = h.id{join}"
        f" WHERE h.capability_id = %s AND h.status = {lit(Hold.Status.DECIDED)} AND h.decided_at >= %s"
        " AND i.decided_by IS NULL AND i.action <> ''"
        " ORDER BY h.decided_at DESC, i.hold_id DESC, i.position LIMIT %s"
    )


# --- quotas (issue 30.4): what one run tree, and one caller's trees, store ---------------------------

_RUN = Run._meta.db_table

# The root of a run's tree (its ancestor without a parent; the run itself when it has none).
RUN_ROOT = f"""WITH RECURSIVE up AS (
        SELECT id, parent_id FROM {_RUN} WHERE id = %(run)s
        UNION ALL SELECT r.id, r.parent_id FROM {_RUN} r JOIN up ON r.id = up.parent_id)
    SELECT id FROM up WHERE parent_id IS NULL"""


def tree_usage(table: str, size: str) -> str:
    """Rows and bytes of `table` (files or state) over every run of the trees rooted at %(roots)s,
    leaving out %(skip_run)s's row keyed %(skip_key)s (the state key being replaced)."""
    return f"""WITH RECURSIVE tree AS (
            SELECT id FROM {_RUN} WHERE id = ANY(%(roots)s)
            UNION ALL SELECT r.id FROM {_RUN} r JOIN tree ON r.parent_id = tree.id)
        SELECT count(*), coalesce(sum({size}), 0) FROM {table} t
        WHERE t.run_id IN (SELECT id FROM tree)
            AND NOT coalesce(t.run_id = %(skip_run)s AND {{key}} = %(skip_key)s, false)"""


# One more failed attempt of a capability's endpoint, read back in the same statement: delivery
# decides from the counted values whether admins hear that it became failing.
COUNT_ENDPOINT_FAILURE = """
UPDATE holds_capability
   SET endpoint_failures = endpoint_failures + 1,
       endpoint_failing_since = COALESCE(endpoint_failing_since, %(now)s)
 WHERE id = %(id)s
RETURNING endpoint_failures, endpoint_failing_since, endpoint_disabled_at
"""
