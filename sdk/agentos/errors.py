"""Errors an agent sees when talking to the Review Queue API."""

from __future__ import annotations

from typing import Any


class AgentOSError(Exception):
    """Any failure of a call to the Review Queue API (after the SDK's retries)."""

    request_id: str | None = None


class APIConnectionError(AgentOSError):
    """The service could not be reached, or the connection broke before an answer.

    `request_id` is the X-Request-ID the SDK sent, which the service logs if the request got there."""

    def __init__(self, message: str, request_id: str | None = None):
        self.request_id = request_id
        super().__init__(message)


class APITimeoutError(APIConnectionError):
    """The service did not answer within the timeout."""


class ApiError(AgentOSError):
    """The API answered with an error: `status`, `code`, the whole `body` and the service's
    `request_id` (its X-Request-ID, which finds the request in the service's logs)."""

    def __init__(self, status: int, body: Any, method: str = "", url: str = "", request_id: str | None = None):
        self.status = status
        self.body = body if isinstance(body, dict) else {"message": str(body)}
        self.code = self.body.get("error", "")
        self.message = self.body.get("message", "")
        self.request_id = request_id
        super().__init__(f"{method} {url} -> {status} {self.code}: {self.message}".strip())


class BadRequest(ApiError):
    """400: the body is not JSON, or not what the endpoint takes."""


class AuthenticationError(ApiError):
    """401: the run token is missing, wrong or no longer live."""


class PermissionDenied(ApiError):
    """403."""


class NotFound(ApiError):
    """404."""


class ConflictError(ApiError):
    """409: the run or hold is not in a state that allows the call."""


class PayloadTooLarge(ApiError):
    """413."""


class UnprocessableEntity(ApiError):
    """422: `body["errors"]` lists every wrong field."""


class RateLimited(ApiError):
    """429, still after the SDK waited as the service asked (Retry-After) and retried."""


class ServerError(ApiError):
    """5xx, still after the SDK's retries."""


class AskInvalid(UnprocessableEntity):
    """The ask was rejected with 422; `errors` lists every wrong field as {field, message}."""

    @property
    def errors(self) -> list[dict[str, str]]:
        return list(self.body.get("errors", []))

    def __str__(self) -> str:
        lines = [f"{e.get('field')}: {e.get('message')}" for e in self.errors]
        return "invalid ask: " + "; ".join(lines)


BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFound,
    409: ConflictError,
    413: PayloadTooLarge,
    422: UnprocessableEntity,
    429: RateLimited,
}


def error_class(status: int, code: str) -> type[ApiError]:
    if status == 422 and code == "invalid":
        return AskInvalid
    if status >= 500:
        return ServerError
    return BY_STATUS.get(status, ApiError)


class Suspend(BaseException):
    """Ends the invocation; the server answers `suspended` with `hold_id`.

    A BaseException, so that a handler's `except Exception` cannot swallow the suspension
    (the mistake LangGraph users make with GraphInterrupt).
    """

    def __init__(self, hold_id: str):
        self.hold_id = hold_id
        super().__init__(hold_id)


class AskedForHuman(BaseException):
    """Ends an eval run's invocation after it asked for a person: the server answers
    `{"status": "failed", "error": "asked_for_human"}` (the run is already `asked_for_human`).

    A BaseException, like Suspend, so that a handler's `except Exception` cannot swallow it.
    """

    def __init__(self) -> None:
        super().__init__("asked_for_human")
