"""One call of the agent for a run, and the API calls it may make with its run token."""

from __future__ import annotations

import hashlib
import json
import mimetypes
import os
import random
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from .errors import (
    AgentOSError,
    APIConnectionError,
    ApiError,
    APITimeoutError,
    AskedForHuman,
    Suspend,
    error_class,
)
from .receipts import ReceiptError, check_resume, verify_receipt
from .resume import Eval, Resume
from .tls import tls_context

T = TypeVar("T")
_MISSING: Any = object()
TOKEN_HEADER = "x-agentos-run-token"


class _Api:
    """The run token's HTTP client. Every call it makes is safe to repeat (state is put and deleted by
    key, an ask repeated gets `409 hold_open` with the same hold, uploads and child runs carry an
    Idempotency-Key), so connection errors, timeouts, 5xx and 429 are retried with backoff, waiting as
    long as a Retry-After says. One X-Request-ID goes with every attempt of a call."""

    def __init__(self, api_url: str, run_token: str, timeout: float = 30.0, max_retries: int = 3):
        self.base = api_url.rstrip("/")
        self.max_retries = max_retries
        self._client = httpx.Client(headers={TOKEN_HEADER: run_token}, timeout=timeout, verify=tls_context())

    def request(
        self, method: str, path: str, *, expect: tuple[int, ...] = (200, 201, 204), **kw: Any
    ) -> httpx.Response:
        url = self.base + path
        request_id = "agentos-" + secrets.token_hex(12)
        kw["headers"] = {**kw.get("headers", {}), "x-request-id": request_id}
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                resp = self._client.request(method, url, **kw)
            except httpx.TimeoutException as exc:
                if last:
                    raise APITimeoutError(f"{method} {url}: no answer in time ({exc})", request_id) from exc
                time.sleep(backoff(attempt))
                continue
            except httpx.TransportError as exc:
                if last:
                    raise APIConnectionError(f"{method} {url}: {type(exc).__name__}: {exc}", request_id) from exc
                time.sleep(backoff(attempt))
                continue
            if resp.status_code in expect:
                return resp
            if last or not (resp.status_code == 429 or resp.status_code >= 500):
                raise _error(resp, method, url)
            time.sleep(backoff(attempt, resp.headers.get("retry-after")))
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._client.close()


MAX_WAIT = 60.0


def backoff(attempt: int, retry_after: str | None = None) -> float:
    """Seconds before the next attempt: what Retry-After says (seconds or an HTTP date, at most a
    minute), else 0.5, 1, 2 … (at most 8) with jitter, so that agents retrying at once spread out."""
    if retry_after:
        try:
            seconds = float(retry_after)
        except ValueError:
            try:
                seconds = (parsedate_to_datetime(retry_after) - datetime.now(UTC)).total_seconds()
            except (TypeError, ValueError):
                seconds = None
        if seconds is not None:
            return min(max(seconds, 0.0), MAX_WAIT)
    return min(0.5 * 2**attempt, 8.0) * random.uniform(0.5, 1.0)


def _error(resp: httpx.Response, method: str, url: str) -> ApiError:
    try:
        body = resp.json()
    except ValueError:
        body = {"message": resp.text}
    if not isinstance(body, dict):
        body = {"message": str(body)}
    cls = error_class(resp.status_code, body.get("error", ""))
    return cls(resp.status_code, body, method, url, resp.headers.get("x-request-id"))


class RunState:
    """The run's small key/value store; it survives between the invocations of one run."""

    def __init__(self, api: _Api, run_id: str):
        self._api = api
        self._prefix = f"/v0/runs/{quote(run_id, safe='')}/state/"

    def _path(self, key: str) -> str:
        return self._prefix + quote(key, safe="")

    def put(self, key: str, value: Any) -> None:
        body = json.dumps(value, separators=(",", ":")).encode()
        self._api.request("PUT", self._path(key), content=body, headers={"content-type": "application/json"})

    def get(self, key: str, default: Any = _MISSING) -> Any:
        """The stored value; a missing key raises KeyError unless a default is given."""
        path = self._path(key)
        try:
            resp = self._api.request("GET", path)
        except ApiError as exc:
            if exc.status != 404:
                raise
            if default is _MISSING:
                raise KeyError(key) from None
            return default
        return resp.json()

    def delete(self, key: str) -> None:
        """Forget a key; deleting a missing key is not an error."""
        self._api.request("DELETE", self._path(key), expect=(200, 204, 404))


class State:
    def __init__(self, api: _Api, run_id: str):
        self.run = RunState(api, run_id)


class Files:
    def __init__(self, api: _Api):
        self._api = api

    def upload(
        self,
        path_or_bytes: str | os.PathLike[str] | bytes,
        name: str | None = None,
        content_type: str | None = None,
        idempotency_key: str | None = None,
    ) -> str:
        """Upload a file of the run's environment and return its file id (for `ask(files=…)`).

        The upload carries an Idempotency-Key (by default one made of the name, type and content), so a
        retry after a lost answer, or the same upload in a later invocation of the run, gets the first file.
        """
        if isinstance(path_or_bytes, bytes):
            data = path_or_bytes
            name = name or "file"
        else:
            with open(path_or_bytes, "rb") as f:
                data = f.read()
            name = name or os.path.basename(os.fspath(path_or_bytes))
        if content_type is None:
            content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if idempotency_key is None:
            digest = hashlib.sha256(json.dumps([name, content_type]).encode() + b"\0" + data).hexdigest()
            idempotency_key = f"file:{digest}"
        resp = self._api.request(
            "POST",
            "/v0/files",
            content=data,
            # Header values must be ASCII; other names travel percent-encoded.
            headers={
                "content-type": content_type,
                "x-filename": name if name.isascii() else quote(name),
                "idempotency-key": idempotency_key,
            },
        )
        return resp.json()["file_id"]


class Invocation:
    """What a handler receives: the invocation, its decision on a resume, and the API."""

    def __init__(self, invocation: dict[str, Any], resume: dict[str, Any] | None = None):
        self.id: str = invocation["id"]
        self.kind: str = invocation.get("kind", "start")
        self.seq: int = invocation.get("seq", 1)
        self.run_id: str = invocation["run_id"]
        self.capability: str = invocation["capability"]
        self.version: str | None = invocation.get("version")
        self.input: Any = invocation.get("input")
        # None outside experiments; inside, the recorded holds to continue from (docs/sdk.md, "Evals").
        self.eval: Eval | None = Eval.from_json(invocation["eval"]) if invocation.get("eval") else None
        self.api_url: str = invocation.get("api_url", "")
        self.run_token: str = invocation.get("run_token", "")
        self.resume: Resume | None = Resume.from_json(resume) if resume else None
        self._resume_json = resume or None
        self._receipt: dict[str, Any] | None = None
        # The hold this invocation asked; the server answers `suspended` on it.
        self.hold_id: str | None = None
        # An eval run asked for a person: the invocation ends `failed: asked_for_human`.
        self.asked_for_human = False
        self._api = _Api(self.api_url, self.run_token)
        self.state = State(self._api, self.run_id)
        self.files = Files(self._api)

    def close(self) -> None:
        self._api.close()

    @property
    def receipt(self) -> dict[str, Any] | None:
        """The resume's decision receipt, verified against the service's keys
        (`{api_url}/.well-known/jwks.json`, fetched once and cached) and checked against this resume (same hold,
        each item's action and data as signed): its claims, or ReceiptError. None on a start invocation."""
        if self._resume_json is None:
            return None
        if self._receipt is None:
            token = self._resume_json.get("receipt")
            if not token:
                raise ReceiptError("this resume carries no receipt")
            claims = verify_receipt(token, jwks_url=self.api_url.rstrip("/") + "/.well-known/jwks.json")
            check_resume(claims, self._resume_json)
            self._receipt = claims
        return self._receipt

    def ask(
        self,
        intent: str,
        items: list[dict[str, Any]],
        actions: list[str] | None = None,
        details: str | None = None,
        expires_in: int | None = None,
        files: list[str] | None = None,
        suspend: bool = True,
    ) -> str:
        """Ask a person. With suspend=True this ends the invocation; otherwise returns the hold id.

        Code before the ask runs again on the resume, so keep it idempotent (see `once`).
        In an eval run (`inv.eval`) nobody is asked: the service ends the run `asked_for_human`
        and this ends the invocation, even with suspend=False.
        """
        body: dict[str, Any] = {"intent": intent, "items": items}
        for key, value in (
            ("actions", actions),
            ("details", details),
            ("expires_in", expires_in),
            ("files", files),
        ):
            if value is not None:
                body[key] = value
        if self.eval is not None:
            self._ask_in_eval(body)
        resp = self._api.request("POST", "/v0/holds", json=body, expect=(201, 409))
        payload = resp.json()
        # 409 hold_open: a re-run of an invocation that already asked suspends on that hold.
        if resp.status_code == 409 and (payload.get("error") != "hold_open" or not payload.get("hold_id")):
            raise ApiError(409, payload, "POST", self._api.base + "/v0/holds")
        self.hold_id = payload["hold_id"]
        if suspend:
            raise Suspend(self.hold_id)
        return self.hold_id

    def _ask_in_eval(self, body: dict[str, Any]) -> None:
        """The service answers 409 eval_run and ends the run; whatever it answers, this invocation is over."""
        self.asked_for_human = True
        try:
            self._api.request("POST", "/v0/holds", json=body, expect=(409,))
        except (AgentOSError, httpx.HTTPError):
            pass
        raise AskedForHuman()

    def idempotency_key(self, step: str) -> str:
        """A key stable across every invocation of this run: run id + step."""
        return f"{self.run_id}:{step}"

    def once(self, step: str, fn: Callable[[], T]) -> T:
        """Run `fn` once per run and step; later calls return the recorded result.

        The result is recorded in run state after `fn` returns, so a crash in between runs
        it again: pass `inv.idempotency_key(step)` on to the system you call if that matters.
        """
        key = f"once:{step}"
        recorded = self.state.run.get(key, None)
        if isinstance(recorded, dict) and "result" in recorded:
            return recorded["result"]
        result = fn()
        self.state.run.put(key, {"result": result})
        return result

    def start_child(self, capability: str, input: Any, idempotency_key: str | None = None) -> str:
        """Start a child run and return its run id.

        Without a key, one is derived from this run, the capability and the input, so a
        re-run after a resume gets the same child instead of a second one.
        """
        if idempotency_key is None:
            digest = hashlib.sha256(
                json.dumps([capability, input], sort_keys=True, separators=(",", ":")).encode()
            ).hexdigest()[:32]
            idempotency_key = self.idempotency_key(f"child:{capability}:{digest}")
        resp = self._api.request(
            "POST",
            "/v0/runs",
            json={"capability": capability, "input": input},
            headers={"idempotency-key": idempotency_key},
        )
        return resp.json()["run_id"]
