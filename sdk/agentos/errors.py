"""Errors an agent sees when talking to the Review Queue API."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """The API answered with an error: `status`, `code` and the whole `body`."""

    def __init__(self, status: int, body: Any, method: str = "", url: str = ""):
        self.status = status
        self.body = body if isinstance(body, dict) else {"message": str(body)}
        self.code = self.body.get("error", "")
        self.message = self.body.get("message", "")
        super().__init__(f"{method} {url} -> {status} {self.code}: {self.message}".strip())


class AskInvalid(ApiError):
    """The ask was rejected with 422; `errors` lists every wrong field as {field, message}."""

    @property
    def errors(self) -> list[dict[str, str]]:
        return list(self.body.get("errors", []))

    def __str__(self) -> str:
        lines = [f"{e.get('field')}: {e.get('message')}" for e in self.errors]
        return "invalid ask: " + "; ".join(lines)


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
