"""A fake Review Queue for testing agents offline: the agent-facing `/v0` API plus deliveries.

    with FakeReviewQueue() as rq, agentos.Server(handlers, port=0, secret=rq.secret) as agent:
        run_id = rq.start_run("pay_invoices", {...}, endpoint=agent.url)
        hold = rq.open_hold(run_id)
        rq.decide(hold["hold_id"], [{"id": "INV-1", "action": "approve"}])
        assert rq.runs[run_id]["status"] == "completed"

It follows SPEC's shapes closely enough for an SDK's tests; it is not the service.
"""

from __future__ import annotations

import base64
import copy
import functools
import itertools
import json
import pathlib
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import httpx

from .signing import sign
from .tls import tls_context

if TYPE_CHECKING:
    from typing import Self


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if _is_number(value):
        return "number"
    return {str: "string", dict: "object", list: "array", type(None): "null"}.get(type(value), "other")


def _check_edit(item: dict[str, Any], data: Any) -> None:
    """The service's check of an edit (SPEC): the item's schema alone when it has one, else the asked keys
    under the type rule. ValueError names the field, as the service's 422 does."""
    if not isinstance(data, dict):
        raise ValueError("an edit sends the full data object")
    if item.get("schema") is not None:
        import jsonschema  # the service's own check is stricter (drafts, linear-time patterns)

        for error in jsonschema.validators.validator_for(item["schema"])(item["schema"]).iter_errors(data):
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
            raise ValueError(f"data{where}: {error.message}")
        return
    if set(data) != set(item["data"]):
        raise ValueError("an edit has exactly the asked keys")
    for key, old in item["data"].items():
        if old is not None and _kind(old) != _kind(data[key]):
            raise ValueError(f"data.{key}: must be a {_kind(old)}, as it was asked")


WIRE_SCHEMA = pathlib.Path(__file__).with_name("wire_schema.json")


@functools.cache
def _wire_validator(name: str) -> Any:
    """A validator for one of the service's published schemas (wire_schema.json, a copy of what
    /v0/openapi.json publishes, kept equal to it by tests/test_sdk_wire_schema.py)."""
    import jsonschema

    schema = json.loads(WIRE_SCHEMA.read_text())
    root = {**schema, "$ref": f"#/$defs/{name}"}
    return jsonschema.Draft202012Validator(root)


def schema_errors(name: str, body: Any) -> list[dict[str, str]]:
    """Every place `body` breaks the service's published schema `name`, by path as the service's 422 names it."""
    errors = []
    for error in sorted(_wire_validator(name).iter_errors(body), key=lambda e: list(map(str, e.absolute_path))):
        if error.validator in ("anyOf", "oneOf") and error.context:
            # `X | None`: report the branch that was meant (the deepest, not "is not of type 'null'")
            error = max(error.context, key=lambda e: (len(e.absolute_path), e.validator != "type"))
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
        if error.validator == "required":
            missing = [k for k in error.validator_value if isinstance(error.instance, dict) and k not in error.instance]
            where = ".".join(filter(None, [where, *missing[:1]]))
        elif error.validator == "additionalProperties" and isinstance(error.instance, dict):
            allowed = set(error.schema.get("properties", {}))
            extra = sorted(k for k in error.instance if k not in allowed)
            where = ".".join(filter(None, [where, *extra[:1]]))
        errors.append({"field": where, "message": error.message})
    return errors


def validate_ask(body: Any, run_files: set[str]) -> list[dict[str, str]]:
    """Every wrong field of an ask, by path: the service's published schema, then what a schema cannot
    say (unique ids and actions, confidence only for keys of data, files of this run)."""
    errors = schema_errors("AskIn", body)
    if not isinstance(body, dict):
        return errors

    def err(field: str, message: str) -> None:
        if all(e["field"] != field for e in errors):
            errors.append({"field": field, "message": message})

    if isinstance(body.get("intent"), str) and not body["intent"].strip():
        err("intent", "required, a non-empty string of at most 500 characters")
    items = body.get("items") if isinstance(body.get("items"), list) else []
    seen: set[str] = set()
    for n, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        p = f"items[{n}]"
        if item.get("id") in seen:
            err(f"{p}.id", "duplicate id")
        if isinstance(item.get("id"), str):
            seen.add(item["id"])
        own = item.get("actions")
        if isinstance(own, list) and len(set(map(str, own))) != len(own):
            err(f"{p}.actions", "no repeats")
        data = item.get("data") if isinstance(item.get("data"), dict) else {}
        confidence = item.get("confidence") if isinstance(item.get("confidence"), dict) else {}
        for key, value in confidence.items():
            if key not in data:
                err(f"{p}.confidence.{key}", "not a key of data")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                err(f"{p}.confidence.{key}", "must be a number in [0, 1]")
    actions = body.get("actions")
    if isinstance(actions, list) and len(set(map(str, actions))) != len(actions):
        err("actions", "no repeats")
    files = body.get("files") if isinstance(body.get("files"), list) else []
    for n, f in enumerate(files):
        if f not in run_files:
            err(f"files[{n}]", "not a file of this run")
    return errors


class FakeReviewQueue:
    def __init__(self, secret: str | None = None, host: str = "127.0.0.1"):
        self.secret = secret or "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
        self.lock = threading.RLock()
        self.runs: dict[str, dict[str, Any]] = {}
        self.holds: dict[str, dict[str, Any]] = {}
        self.files: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, str] = {}  # live run token -> run id
        self.idempotency: dict[tuple[str, str], str] = {}
        self.requests: list[tuple[str, str]] = []
        self.answers: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self.httpd = ThreadingHTTPServer((host, 0), _make_handler(self))
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeReviewQueue:
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids)}"

    # -- the service side: runs, deliveries, decisions -----------------------------------

    def create_run(self, capability: str, input: Any, endpoint: str, parent: str | None = None) -> str:
        with self.lock:
            run_id = self._next("r_")
            self.runs[run_id] = {
                "run_id": run_id,
                "capability": capability,
                "input": input,
                "endpoint": endpoint,
                "status": "running",
                "seq": 0,
                "output": None,
                "error": None,
                "parent": parent,
                "children": [],
                "state": {},
                "holds": [],
            }
            return run_id

    def start_run(self, capability: str, input: Any, endpoint: str) -> str:
        """Create a run and deliver its start invocation; returns the run id."""
        run_id = self.create_run(capability, input, endpoint)
        self.deliver(run_id)
        return run_id

    def invocation_payload(self, run_id: str, resume: dict[str, Any] | None = None) -> dict:
        run = self.runs[run_id]
        with self.lock:
            run["seq"] += 1
            token = "tok_" + secrets.token_urlsafe(32)
            self.tokens[token] = run_id
        return {
            "invocation": {
                "id": "inv_" + secrets.token_hex(8),
                "kind": "resume" if resume is not None else "start",
                "seq": run["seq"],
                "run_id": run_id,
                "capability": run["capability"],
                "version": "1",
                "api_url": self.url,
                "run_token": token,
                "input": run["input"],
                "eval": None,
            },
            "resume": resume,
        }

    def post_invocation(self, endpoint: str, payload: dict[str, Any]) -> httpx.Response:
        body = json.dumps(payload).encode()
        headers = sign(self.secret, payload["invocation"]["id"], body)
        headers["content-type"] = "application/json"
        return httpx.post(
            endpoint.rstrip("/") + "/invoke", content=body, headers=headers, timeout=60, verify=tls_context()
        )

    def deliver(self, run_id: str, resume: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one invocation, apply its answer to the run, and return the answer."""
        payload = self.invocation_payload(run_id, resume)
        token = payload["invocation"]["run_token"]
        try:
            resp = self.post_invocation(self.runs[run_id]["endpoint"], payload)
        finally:
            with self.lock:
                self.tokens.pop(token, None)  # a token dies when its invocation answers
        answer = resp.json() if resp.status_code == 200 else {"status": "http", "code": resp.status_code}
        self.answers.append(answer)
        self.apply_answer(run_id, answer)
        return answer

    def apply_answer(self, run_id: str, answer: dict[str, Any]) -> None:
        with self.lock:
            run = self.runs[run_id]
            status = answer.get("status")
            if status == "suspended":
                if answer.get("hold_id") not in run["holds"]:
                    self._finish(run, "failed", error="suspended on a hold the run did not ask")
                elif self.holds[answer["hold_id"]]["status"] == "pending":
                    run["status"] = "held"
                else:
                    run["status"] = "running"
            elif status == "completed":
                self._finish(run, "completed", output=answer.get("output"))
            elif status == "failed":
                self._finish(run, "failed", error=answer.get("error"))
            else:
                self._finish(run, "failed", error=f"bad answer {answer!r}")

    def _finish(self, run: dict, status: str, output: Any = None, error: Any = None) -> None:
        run.update(status=status, output=output, error=error)
        for hold_id in run["holds"]:
            if self.holds[hold_id]["status"] == "pending":
                self.holds[hold_id]["status"] = "cancelled"

    def open_hold(self, run_id: str) -> dict[str, Any] | None:
        for hold_id in self.runs[run_id]["holds"]:
            if self.holds[hold_id]["status"] == "pending":
                return self.holds[hold_id]
        return None

    def decide(self, hold_id: str, items: list[dict[str, Any]], comment: str | None = None) -> dict[str, Any]:
        """Decide a hold as a person would, then deliver the resume; returns the agent's answer."""
        refused = schema_errors("DecisionIn", {"items": items, "comment": comment})
        if refused:
            raise ValueError("; ".join(f"{e['field']}: {e['message']}" for e in refused))
        with self.lock:
            hold = self.holds[hold_id]
            if hold["status"] != "pending":
                raise ValueError(f"hold {hold_id} is {hold['status']}")
            asked = {i["id"]: i for i in hold["items"]}
            by_id = {d["id"]: d for d in items}
            if set(by_id) != set(asked) or len(by_id) != len(items):
                raise ValueError("every item needs exactly one action")
            comment = comment if comment and comment.strip() else None
            decided = []
            for item in hold["items"]:  # resume items keep the order asked
                d = by_id[item["id"]]
                action = d["action"]
                if action not in (item.get("actions") or hold["actions"]):
                    raise ValueError(f"{action} is not offered for item {item['id']}")
                own = d.get("comment") if d.get("comment") and d["comment"].strip() else None
                if action == "edit":
                    data = d.get("data")
                    _check_edit(item, data)
                else:
                    if d.get("data") is not None:
                        raise ValueError("data only with edit")
                    data = copy.deepcopy(item["data"])
                if action != "approve" and own is None:
                    own = comment
                if action == "feedback" and own is None:
                    raise ValueError("feedback requires a comment")
                decided.append({"id": item["id"], "action": action, "data": data, "comment": own})
            resume = {
                "hold_id": hold_id,
                "resolved_by": "human",
                "items": decided,
                "comment": comment,
            }
            hold.update(status="decided", resume=resume)
        return self.deliver(hold["run_id"], resume)

    def expire(self, hold_id: str) -> dict[str, Any]:
        with self.lock:
            hold = self.holds[hold_id]
            resume = {"hold_id": hold_id, "resolved_by": "expired", "items": [], "comment": None}
            hold.update(status="expired", resume=resume)
        return self.deliver(hold["run_id"], resume)

    # -- the agent-facing API ---------------------------------------------------------------

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple:
        self.requests.append((method, path))
        run_id = self.tokens.get(headers.get("x-agentos-run-token", ""))
        if run_id is None:
            return 401, {"error": "unauthorized", "message": "no valid run token"}
        parts = [unquote(p) for p in path.strip("/").split("/")]
        with self.lock:
            if parts[:2] == ["v0", "holds"] and len(parts) == 2 and method == "POST":
                return self._ask(run_id, body)
            if parts[:2] == ["v0", "holds"] and len(parts) == 3 and method == "GET":
                hold = self.holds.get(parts[2])
                if hold is None or hold["run_id"] != run_id:
                    return 404, {"error": "not_found", "message": "no such hold"}
                return 200, hold
            if parts[:2] == ["v0", "files"] and len(parts) == 2 and method == "POST":
                file_id = self._next("f_")
                self.files[file_id] = {
                    "run_id": run_id,
                    "name": unquote(headers.get("x-filename", "file")),
                    "content_type": headers.get("content-type", ""),
                    "content": body,
                }
                f = self.files[file_id]
                return 201, {
                    "file_id": file_id,
                    "name": f["name"],
                    "size": len(body),
                    "content_type": f["content_type"],
                }
            if parts[:2] == ["v0", "runs"] and len(parts) == 2 and method == "POST":
                return self._start_child(run_id, headers, body)
            if parts[:2] == ["v0", "runs"] and len(parts) == 5 and parts[3] == "state":
                if parts[2] != run_id:
                    return 404, {"error": "not_found", "message": "no such run"}
                return self._state(self.runs[run_id]["state"], method, parts[4], body)
        return 404, {"error": "not_found", "message": f"{method} {path}"}

    def _ask(self, run_id: str, body: bytes) -> tuple:
        try:
            ask = json.loads(body)
        except ValueError:
            return 400, {"error": "bad_json", "message": "body is not JSON"}
        open_hold = self.open_hold(run_id)
        if open_hold is not None:
            return 409, {
                "error": "hold_open",
                "message": "the run has an open hold",
                "hold_id": open_hold["hold_id"],
            }
        run_files = {k for k, f in self.files.items() if f["run_id"] == run_id}
        errors = validate_ask(ask, run_files)
        if errors:
            return 422, {"error": "invalid", "message": "invalid ask", "errors": errors}
        hold_id = self._next("h_")
        self.holds[hold_id] = {
            "actions": ["approve", "reject"],
            **ask,
            "hold_id": hold_id,
            "run_id": run_id,
            "capability": self.runs[run_id]["capability"],
            "status": "pending",
            "resume": None,
        }
        self.runs[run_id]["holds"].append(hold_id)
        return 201, {"hold_id": hold_id, "status": "pending"}

    def _start_child(self, run_id: str, headers: dict[str, str], body: bytes) -> tuple:
        req = json.loads(body)
        key = headers.get("idempotency-key")
        if key and (run_id, key) in self.idempotency:
            child = self.idempotency[(run_id, key)]
            return 200, {"run_id": child, "status": self.runs[child]["status"]}
        child = self.create_run(req["capability"], req.get("input"), endpoint="", parent=run_id)
        self.runs[run_id]["children"].append(child)
        if key:
            self.idempotency[(run_id, key)] = child
        return 201, {"run_id": child, "status": "running"}

    @staticmethod
    def _state(store: dict[str, Any], method: str, key: str, body: bytes) -> tuple:
        if method == "PUT":
            try:
                store[key] = json.loads(body)
            except ValueError:
                return 400, {"error": "bad_json", "message": "value is not JSON"}
            return 204, None
        if key not in store:
            return 404, {"error": "not_found", "message": f"no state {key!r}"}
        if method == "DELETE":
            del store[key]
            return 204, None
        return 200, store[key]


def _make_handler(rq: FakeReviewQueue) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _any(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, payload = rq.handle(self.command, urlsplit(self.path).path, headers, body)
            data = b"" if payload is None else json.dumps(payload).encode()
            self.send_response(status)
            if payload is not None:
                self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _any

    return Handler
