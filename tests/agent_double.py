"""A programmable agent over real HTTP for delivery tests: records requests, answers by script."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class AgentDouble:
    def __init__(self):
        self.requests: list[dict] = []
        self.script: list = []  # each entry: (status, body) or a callable(request) -> (status, body)
        self.default = (200, {"status": "completed", "output": {}})
        double = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                request = {
                    "path": self.path,
                    "headers": dict(self.headers.items()),
                    "raw": raw,
                    "body": json.loads(raw),
                }
                double.requests.append(request)
                step = double.script.pop(0) if double.script else double.default
                try:
                    status, body, *extra = step(request) if callable(step) else step
                finally:
                    # A step that used the ORM opened a connection in this thread; the test
                    # database cannot be dropped while it is open.
                    from django.db import connections

                    connections.close_all()
                payload = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for name, value in (extra[0] if extra else {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # shutdown() waits for the loop's next poll: at the default 0.5 s that wait was most of a test's
        # teardown, in every test with an agent (here and in the other stand-ins' servers).
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
