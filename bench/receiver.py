"""An agent stand-in that records when each webhook-id first arrives, and answers at once
(or hangs until the caller gives up, for ids it was told to hang on)."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    def __init__(self, hang_seconds: float = 0.0):
        self.arrivals: dict[str, float] = {}
        self.lock = threading.Lock()
        self.hang_seconds = hang_seconds
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes; without TCP_NODELAY, Nagle and delayed ACKs
            # stall each keep-alive answer by ~40 ms.
            disable_nagle_algorithm = True

            def do_POST(self):
                now = time.time()
                self.rfile.read(int(self.headers.get("content-length", 0)))
                key = self.headers.get("webhook-id", "")
                with receiver.lock:
                    receiver.arrivals.setdefault(key, now)
                if receiver.hang_seconds:
                    time.sleep(receiver.hang_seconds)
                payload = json.dumps({"status": "completed", "output": {}}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, keys, timeout: float) -> bool:
        deadline = time.time() + timeout
        while time.time() < deadline:
            with self.lock:
                if all(k in self.arrivals for k in keys):
                    return True
            time.sleep(0.002)
        return False

    def close(self):
        self.server.shutdown()
