"""The edge of every request: input PostgreSQL cannot store is refused before any view sees it,
answers under /v0/ are always JSON, and private answers are never cached.

- A NUL character (PostgreSQL refuses it in text) in the path, the query string, a header or a
  cookie gets a 4xx here, in one place: the path 404 (no resource has a NUL in its name), a query
  parameter 422 under /v0/ naming it (400 on pages), a header or cookie 400. Under /v0/ a caller
  without valid credentials still gets 401 first (SPEC's order).
- `Cache-Control: private, no-store` on every /v0/ answer (tokens, keys and files) and on every
  answer to a signed-in person, so no shared cache or browser history keeps what an agent wrote.
"""

import logging

from django.core.exceptions import BadRequest, RequestDataTooBig
from django.http import Http404, JsonResponse

log = logging.getLogger(__name__)

NUL = "\x00"
PRIVATE = "private, no-store"


class ApiErrorMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        refusal = refuse_unstorable(request)
        if refusal is not None:
            return _private(request, refusal)
        response = self.get_response(request)
        if _is_api(request) and response.status_code in (404, 405) and not _is_json(response):
            code = "not_found" if response.status_code == 404 else "method_not_allowed"
            response = JsonResponse(
                {"error": code, "message": f"{request.method} {request.path}: {code}"}, status=response.status_code
            )
        return _private(request, response)

    def process_exception(self, request, exception):
        if not _is_api(request):
            return None
        if isinstance(exception, RequestDataTooBig):  # a form body read past DATA_UPLOAD_MAX_MEMORY_SIZE
            return JsonResponse({"error": "too_large", "message": "the body is too large"}, status=413)
        log.exception("unexpected error in %s %s", request.method, request.path)
        return JsonResponse({"error": "server_error", "message": "the server failed; nothing was changed"}, status=500)


def refuse_unstorable(request):
    """The 4xx for a NUL anywhere a view could pass it to the database, or None when there is none."""
    in_header = any(NUL in value for key, value in request.META.items() if key.startswith("HTTP_"))
    in_cookie = any(NUL in value for value in request.COOKIES.values())
    if in_header or in_cookie:
        where = "a cookie" if in_cookie else "a header"
        if _is_api(request):
            # A session cookie with a NUL cannot even be looked up, so it is refused before any credential.
            return _error(request, 400, "bad_request", f"{where} holds a NUL character", credentials=not in_cookie)
        raise BadRequest(f"{where} holds a NUL character")
    if NUL in request.path:
        if _is_api(request):
            return _error(request, 404, "not_found", "no resource has a NUL character in its name")
        raise Http404("no page has a NUL character in its address")
    query = request.META.get("QUERY_STRING", "")
    if "%00" not in query and NUL not in query:  # the common case: no need to parse the query
        return None
    names = sorted({name for name, values in request.GET.lists() if NUL in name or any(NUL in v for v in values)})
    if not names:
        return None
    if _is_api(request):
        errors = [{"field": name.replace(NUL, "\\u0000"), "message": "holds a NUL character"} for name in names]
        return _error(request, 422, "invalid", f"{len(errors)} field(s) are not valid", errors=errors)
    raise BadRequest("the query string holds a NUL character")


def _error(request, status: int, code: str, message: str, *, credentials: bool = True, **extra) -> JsonResponse:
    from .api.common import caller
    from .errors import ServiceError, Unauthorized

    if credentials:
        try:
            caller(request)
        except Unauthorized as exc:
            status, code, message, extra = 401, exc.code, exc.message, {}
        except ServiceError:  # only a missing credential comes before ours (a CSRF refusal comes after)
            pass
    return JsonResponse({"error": code, "message": message, **extra}, status=status)


def _private(request, response):
    if _is_api(request) or _signed_in(request):
        response["Cache-Control"] = PRIVATE
    return response


def _signed_in(request) -> bool:
    user = getattr(request, "user", None)
    return user is not None and user.is_authenticated


def _is_api(request) -> bool:
    return request.path.startswith("/v0/")


def _is_json(response) -> bool:
    return response.get("Content-Type", "").startswith("application/json")
