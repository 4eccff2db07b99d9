"""The HTTP server an agent runs: `POST /invoke`, signed by the service, one thread per request."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from . import signing
from .errors import AskedForHuman, Suspend
from .invocation import Invocation

if TYPE_CHECKING:
    from typing import Self

log = logging.getLogger("agentos")

Handler = Callable[[Invocation], Any]
MAX_BODY = 16 * 1024 * 1024
# A request's headers and body must arrive within these (a slow sender holds a thread and its buffer).
READ_SECONDS = 10.0
CHUNK = 64 * 1024


class _Pending:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.answer: dict[str, Any] | None = None


class _Answers:
    """Answers by invocation id, so that a repeated delivery gets the first answer back."""

    def __init__(self, limit: int = 10_000):
        self._lock = threading.Lock()
        self._items: OrderedDict[str, _Pending] = OrderedDict()
        self._limit = limit

    def claim(self, inv_id: str) -> tuple[_Pending, bool]:
        """The entry for this id and whether the caller is the first (and must run it)."""
        with self._lock:
            entry = self._items.get(inv_id)
            if entry is not None:
                return entry, False
            entry = self._items[inv_id] = _Pending()
            while len(self._items) > self._limit:
                oldest_id, oldest = next(iter(self._items.items()))
                if not oldest.done.is_set():
                    break
                del self._items[oldest_id]
            return entry, True


ASKED_FOR_HUMAN = {"status": "failed", "error": "asked_for_human"}


def run_handler(handler: Handler, inv: Invocation) -> dict[str, Any]:
    """Call a handler and turn what happened into the invocation's answer."""
    try:
        output = handler(inv)
    except AskedForHuman:
        return ASKED_FOR_HUMAN
    except Suspend as s:
        return {"status": "suspended", "hold_id": s.hold_id}
    except Exception as exc:
        log.exception("handler for %s failed (invocation %s)", inv.capability, inv.id)
        return {"status": "failed", "error": str(exc) or type(exc).__name__}
    finally:
        inv.close()
    if inv.asked_for_human:
        # Even if the handler caught the signal: the eval run is over at the service.
        return ASKED_FOR_HUMAN
    if inv.hold_id is not None:
        # ask(suspend=False) lets the handler finish its work; the invocation still
        # only ends by suspending on the hold it asked.
        return {"status": "suspended", "hold_id": inv.hold_id}
    try:
        json.dumps(output)
    except (TypeError, ValueError) as exc:
        return {"status": "failed", "error": f"output is not JSON: {exc}"}
    return {"status": "completed", "output": output}


class Server:
    """`Server(handlers).start()` serves in a background thread; `.port` is the bound port."""

    def __init__(
        self,
        handlers: Mapping[str, Handler],
        port: int = 8080,
        host: str = "127.0.0.1",
        secret: str | None = None,
    ):
        secret = secret or os.environ.get("AGENTOS_SECRET")
        if not secret:
            raise ValueError("a signing secret is required: pass secret= or set AGENTOS_SECRET")
        signing.secret_key(secret)  # fail at start-up, not on the first request
        self.handlers = dict(handlers)
        self.secret = secret
        self.answers = _Answers()
        self._thread: threading.Thread | None = None
        self.httpd = ThreadingHTTPServer((host, port), _make_request_handler(self))
        self.httpd.daemon_threads = True

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        host = self.httpd.server_address[0]
        return f"http://{host}:{self.port}"

    def start(self) -> Server:
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def invoke(self, body: bytes, webhook_id: str | None = None) -> tuple[int, dict[str, Any]]:
        """Handle a verified `/invoke` body: status code and JSON answer."""
        try:
            payload = json.loads(body)
            invocation = payload["invocation"]
            inv_id = invocation["id"]
        except (ValueError, KeyError, TypeError):
            return 400, {"error": "bad_json", "message": "expected {invocation: {id, …}}"}
        if webhook_id is not None and webhook_id != inv_id:
            return 400, {"error": "bad_json", "message": "webhook-id is not the invocation id"}
        if invocation.get("capability") not in self.handlers:
            # SPEC "Settled": an unknown capability is 404 (the service fails the run with the reason).
            return 404, {"error": "not_found", "message": f"unknown capability {invocation.get('capability')!r}"}
        entry, first = self.answers.claim(inv_id)
        if not first:
            # A retry of a delivery we are still answering: wait and give the same answer.
            entry.done.wait()
            return 200, entry.answer or {}
        try:
            entry.answer = self._answer(invocation, payload.get("resume"))
        except BaseException as exc:
            entry.answer = {"status": "failed", "error": f"agent error: {exc}"}
            raise
        finally:
            entry.done.set()
        return 200, entry.answer

    def _answer(self, invocation: dict[str, Any], resume: Any) -> dict[str, Any]:
        handler = self.handlers[invocation.get("capability")]
        try:
            inv = Invocation(invocation, resume)
        except (KeyError, TypeError) as exc:
            return {"status": "failed", "error": f"malformed invocation: {exc}"}
        return run_handler(handler, inv)


def _make_request_handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class RequestHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Each read of the request line and headers (and an idle keep-alive) waits at most this long.
        timeout = READ_SECONDS
        # Headers and body go out in separate writes; without TCP_NODELAY, Nagle and delayed ACKs
        # stall each keep-alive answer by ~40 ms.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s - %s", self.address_string(), format % args)

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _refuse(self, status: int, body: dict[str, Any]) -> None:
            # The rest of the request is not read: the connection closes after the answer.
            self.close_connection = True
            self._send(status, body)

        def _read_body(self, length: int) -> bytes | None:
            """The body, or None when it did not arrive by READ_SECONDS from now."""
            deadline = time.monotonic() + READ_SECONDS
            chunks, left = [], length
            try:
                while left:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    self.connection.settimeout(remaining)
                    chunk = self.rfile.read1(min(left, CHUNK))
                    if not chunk:
                        return None
                    chunks.append(chunk)
                    left -= len(chunk)
            except TimeoutError:
                return None
            finally:
                self.connection.settimeout(self.timeout)
            return b"".join(chunks)

        def do_GET(self) -> None:
            if self.path in ("/", "/healthz"):
                self._send(200, {"status": "ok", "capabilities": sorted(server.handlers)})
            else:
                self._send(404, {"error": "not_found", "message": "no such path"})

        def do_POST(self) -> None:
            if self.path.split("?")[0] != "/invoke":
                self._send(404, {"error": "not_found", "message": "POST /invoke only"})
                return
            # Everything that needs no body is checked before reading it: the signature's headers and
            # timestamp, and a declared size within MAX_BODY. Then the body is read by a deadline.
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                signing.check_headers(headers)
            except signing.SignatureError as exc:
                self._refuse(401, {"error": "unauthorized", "message": str(exc)})
                return
            length_text = self.headers.get("content-length") or ""
            if not length_text.isdigit():
                self._refuse(411, {"error": "length_required", "message": "a content-length is required"})
                return
            length = int(length_text)
            if length > MAX_BODY:
                self._refuse(413, {"error": "too_large", "message": "body too large"})
                return
            body = self._read_body(length)
            if body is None:
                self._refuse(408, {"error": "timeout", "message": f"the body did not arrive within {READ_SECONDS:g} s"})
                return
            try:
                signing.verify(server.secret, headers, body)
            except signing.SignatureError as exc:
                self._send(401, {"error": "unauthorized", "message": str(exc)})
                return
            status, answer = server.invoke(body, headers.get("webhook-id"))
            self._send(status, answer)

    return RequestHandler


def serve(
    handlers: Mapping[str, Handler],
    port: int = 8080,
    host: str = "127.0.0.1",
    secret: str | None = None,
) -> None:
    """Serve `POST /invoke` until interrupted. Secret from the argument or AGENTOS_SECRET."""
    server = Server(handlers, port=port, host=host, secret=secret)
    log.info("agentos serving %s on %s", ", ".join(sorted(handlers)), server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
