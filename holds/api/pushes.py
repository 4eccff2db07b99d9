"""Push notifications from A2A agents (README "Agents that speak AG-UI or A2A"): thin, as the API is."""

from django.http import JsonResponse

from .. import services
from ..schemas import MAX_ASK_BYTES
from .common import endpoint, read_json


@endpoint("POST")
def a2a_push(request, run_id: str):
    """An A2A agent's push for a run's task: 200 it woke the waiting invocation, 202 nothing waits."""
    run = services.a2a_push_run(run_id=run_id, token=request.headers.get("x-a2a-notification-token"))
    result = services.a2a_push_received(run=run, body=read_json(request, MAX_ASK_BYTES))
    return JsonResponse({"status": result}, status=200 if result == "woken" else 202)
