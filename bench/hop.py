"""The baselines for bench/resume.py, loaded into the worker only with RQ_CELERY_IMPORTS=bench.hop.

`post` is the bare hop: Celery delay() → a worker → one HTTP POST. `floor` is the least a resume
delivery can do and still be sent exactly once: the same hop between two writes, one that claims
the invocation's row with a lease before the POST and one that records the answer after it. Both use
the same shared HTTP client as real deliveries, so the comparisons are about what the delivery path
adds."""

from celery import shared_task

from holds.delivery import shared_client
from holds.services.gateway import driver_cursor


@shared_task(ignore_result=True)
def post(url: str, hop_id: str) -> None:
    shared_client().post(url, json={"hop": hop_id}, headers={"webhook-id": hop_id}, timeout=10)


@shared_task(ignore_result=True)
def floor(url: str, invocation_id: str) -> None:
    with driver_cursor() as cursor:
        # One round trip, and the claim's commit does not wait for the disk, as the real claim's.
        cursor.execute(
            "BEGIN; SET LOCAL synchronous_commit TO OFF; UPDATE holds_invocation SET status = 'delivering',"
            " attempts = attempts + 1, lease_until = now() + interval '30 seconds'"
            " WHERE id = %s AND status = 'pending' RETURNING id; COMMIT",
            [invocation_id],
        )
        cursor.nextset()
        cursor.nextset()
        claimed = cursor.fetchone()
        cursor.nextset()
        if claimed is None:
            return
    shared_client().post(url, json={"hop": invocation_id}, headers={"webhook-id": invocation_id}, timeout=10)
    with driver_cursor() as cursor:
        cursor.execute(
            "UPDATE holds_invocation SET status = 'answered', lease_until = NULL"
            " WHERE id = %s AND status = 'delivering'",
            [invocation_id],
        )
