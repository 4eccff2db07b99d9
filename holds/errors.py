"""Errors the write path raises; the API answers them as `{"error", "message", ...}` JSON."""


class ServiceError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, **extra):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.extra = extra

    def body(self) -> dict:
        return {"error": self.code, "message": self.message, **self.extra}


class Unauthorized(ServiceError):
    status, code = 401, "unauthorized"


class Forbidden(ServiceError):
    status, code = 403, "forbidden"


class NotFound(ServiceError):
    status, code = 404, "not_found"


class Conflict(ServiceError):
    status, code = 409, "conflict"


class QuotaExceeded(Conflict):
    """A run (its tree, its caller) or a dataset is over one of its quotas; `quota` names which."""

    code = "quota_exceeded"

    def __init__(self, quota: str, limit: int, whose: str = "this run"):
        super().__init__(f"{whose} is over its {quota} quota ({limit})", quota=quota, limit=limit)


class Invalid(ServiceError):
    status, code = 422, "invalid"

    def __init__(self, errors: list[dict], message: str | None = None, *, code: str | None = None):
        super().__init__(message or f"{len(errors)} field(s) are not valid", code=code, errors=errors)
        self.errors = errors


class TooLarge(ServiceError):
    status, code = 413, "too_large"


class BadJson(ServiceError):
    status, code = 400, "bad_json"


class RateLimited(ServiceError):
    status, code = 429, "rate_limited"
