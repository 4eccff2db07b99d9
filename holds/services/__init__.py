"""THE write path. Every state change of a run, an invocation or a hold is one function here.

Each function does its claim (a conditional UPDATE, or a row lock and a re-check) and everything
that follows from it in one transaction, and writes the audit event in that same transaction.
Outbox rows (invocations) are written with the change that causes them; they are published to
the broker only after commit (ports), and the relay finds any that the broker lost.

State machines (SPEC "Words" and "Precise rules"):
  run:        running -> (held <-> running)* -> completed | failed  (| asked_for_human: eval runs)
  hold:       pending -> decided | expired | cancelled
  invocation: waiting -> pending -> delivering -> answered | failed | undeliverable | parked
              (pending/waiting -> cancelled when the run finishes; delivering -> pending to retry)

The package by subdomain: runs, asks, decisions, delivery, expiry, evals, team, audit; sql holds every
hand-written statement, gateway sends them (the only module that may use `connection.cursor`), tokens
finds a live run token's invocation, ports what is handed out after commit.
"""

from .asks import hold_ask, hold_ask_by_token, hold_fingerprint
from .audit import audit
from .channels import (
    push_gone,
    push_subscribe,
    push_unsubscribe,
    slack_message_closed,
    slack_message_posted,
    slack_refused,
    slack_request_refused,
    slack_request_seen,
)
from .claims import CLAIM_FOR, RENEW_EVERY, hold_claim, hold_claim_renew, hold_release, hold_seen
from .decisions import asked_items, hold_decide
from .delivery import (
    Claim,
    Outcome,
    capability_enable,
    due_invocations,
    endpoint_take_probe,
    invocation_claim,
    invocation_defer,
    invocation_record,
    invocation_retry,
    invocations_due,
    invocations_relay,
    invocations_relay_release,
)
from .escalation import Taken, due_steps, escalation_take
from .evals import (
    dataset_create,
    dataset_item_add,
    dataset_item_delete,
    dataset_item_from_run,
    eval_ask_refusal,
    eval_ask_refusal_for_invocation,
    eval_field,
    experiment_start,
    recordable_run_problem,
    run_recording,
)
from .expiry import Expired, due_holds, holds_expire_batch, holds_expire_due
from .extend import hold_extend
from .pushes import a2a_push_received, a2a_push_run
from .receipts import resume_as_sent
from .rules import (
    MAX_GRANT_DAYS,
    current_rule_set,
    grant_create,
    grant_revoke,
    rules_save,
)
from .runs import experiments_finish, run_fail, run_file_add, run_start, run_state_delete, run_state_put
from .team import (
    DEFAULTS,
    capabilities_sync,
    capability_set_approvers,
    person_add,
    person_set_active,
    person_set_away,
    person_set_role,
    person_set_slack,
    service_account_create,
    service_account_revoke,
    service_account_set_role,
)
from .tokens import invocation_for_token

__all__ = [
    "a2a_push_received",
    "a2a_push_run",
    "resume_as_sent",
    "MAX_GRANT_DAYS",
    "current_rule_set",
    "grant_create",
    "grant_revoke",
    "rules_save",
    "person_set_slack",
    "push_gone",
    "push_subscribe",
    "push_unsubscribe",
    "slack_message_closed",
    "slack_message_posted",
    "slack_refused",
    "slack_request_refused",
    "slack_request_seen",
    "CLAIM_FOR",
    "RENEW_EVERY",
    "DEFAULTS",
    "Claim",
    "Expired",
    "Taken",
    "due_steps",
    "escalation_take",
    "Outcome",
    "audit",
    "capabilities_sync",
    "capability_enable",
    "asked_items",
    "capability_set_approvers",
    "dataset_create",
    "dataset_item_add",
    "dataset_item_delete",
    "dataset_item_from_run",
    "due_holds",
    "due_invocations",
    "endpoint_take_probe",
    "eval_ask_refusal",
    "eval_ask_refusal_for_invocation",
    "eval_field",
    "experiment_start",
    "experiments_finish",
    "hold_ask",
    "hold_ask_by_token",
    "hold_claim",
    "hold_claim_renew",
    "hold_decide",
    "hold_extend",
    "hold_fingerprint",
    "hold_release",
    "hold_seen",
    "holds_expire_batch",
    "holds_expire_due",
    "invocation_claim",
    "invocation_defer",
    "invocation_record",
    "invocation_retry",
    "invocation_for_token",
    "invocations_due",
    "invocations_relay",
    "invocations_relay_release",
    "person_add",
    "person_set_active",
    "person_set_away",
    "person_set_role",
    "recordable_run_problem",
    "run_fail",
    "run_file_add",
    "run_recording",
    "run_start",
    "run_state_delete",
    "run_state_put",
    "service_account_create",
    "service_account_revoke",
    "service_account_set_role",
]
