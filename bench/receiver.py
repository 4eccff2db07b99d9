"""An agent stand-in that records when each webhook-id first arrives, and answers at once
(or hangs until the caller gives up, for ids it was told to hang on)."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Server(ThreadingHTTPServer):
    # A worker that starts opens its keep-alive connections all at once; http.server's backlog of 5
    # resets some of them (real agent servers listen with 128 or more).
    request_queue_size = 128
    daemon_threads = True


class Receiver:
    def __init__(self, hang_seconds: float = 0.0):
        self.arrivals: dict[str, float] = {}
        # The webhook-id of each resume by its hold id, so a caller can wait for a decision's resume
        # without first reading its invocation id from the database.
        self.by_hold: dict[str, str] = {}
        self.arrived = threading.Condition()
        self.hang_seconds = hang_seconds
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes; without TCP_NODELAY, Nagle and delayed ACKs
            # stall each keep-alive answer by ~40 ms.
            disable_nagle_algorithm = True

            def do_POST(self):
                now = time.time()
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                key = self.headers.get("webhook-id", "")
                hold_id = (json.loads(body).get("resume") or {}).get("hold_id") if b'"resume"' in body else None
                with receiver.arrived:
                    receiver.arrivals.setdefault(key, now)
                    if hold_id:
                        receiver.by_hold.setdefault(hold_id, key)
                    receiver.arrived.notify_all()
                if receiver.hang_seconds:
                    time.sleep(receiver.hang_seconds)
                payload = json.dumps({"status": "completed", "output": {}}).encode()
                try:
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    # A hanging agent's caller gave up at its timeout, as it should: nothing to answer.
                    self.close_connection = True

            def log_message(self, *args):
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, keys, timeout: float) -> bool:
        """Waits until every key has arrived. One key: woken by its arrival. Many: checked every
        20 ms against a shrinking set (the arrival times are taken by the handler either way)."""
        missing = set(keys)
        deadline = time.monotonic() + timeout
        while True:
            with self.arrived:
                missing = {k for k in missing if k not in self.arrivals}
                if not missing:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                if len(missing) == 1:
                    (key,) = missing
                    return self.arrived.wait_for(lambda key=key: key in self.arrivals, remaining)
            time.sleep(min(remaining, 0.02))

    def wait_for_hold(self, hold_id: str, timeout: float) -> float | None:
        """When the resume of `hold_id` first arrived, or None."""
        with self.arrived:
            if self.arrived.wait_for(lambda: hold_id in self.by_hold, timeout):
                return self.arrivals[self.by_hold[hold_id]]
        return None

    def close(self):
        self.server.shutdown()
