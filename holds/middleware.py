"""Under /v0/ every answer is JSON, even for an unknown URL or an unexpected exception."""

import logging

from django.http import JsonResponse

log = logging.getLogger(__name__)


class ApiErrorMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if request.path.startswith("/v0/") and response.status_code in (404, 405) and not _is_json(response):
            code = "not_found" if response.status_code == 404 else "method_not_allowed"
            return JsonResponse(
                {"error": code, "message": f"{request.method} {request.path}: {code}"}, status=response.status_code
            )
        return response

    def process_exception(self, request, exception):
        if not request.path.startswith("/v0/"):
            return None
        log.exception("unexpected error in %s %s", request.method, request.path)
        return JsonResponse({"error": "server_error", "message": "the server failed; nothing was changed"}, status=500)


def _is_json(response) -> bool:
    return response.get("Content-Type", "").startswith("application/json")
