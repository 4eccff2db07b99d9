"""The baseline hop for bench/resume.py: Celery delay() → a worker → one HTTP POST.

Loaded into the worker only with RQ_CELERY_IMPORTS=bench.hop. It uses the same shared HTTP client
as real deliveries, so the comparison is about what the delivery path adds."""

from celery import shared_task

from holds.delivery import shared_client


@shared_task(ignore_result=True)
def post(url: str, hop_id: str) -> None:
    shared_client().post(url, json={"hop": hop_id}, headers={"webhook-id": hop_id}, timeout=10)
