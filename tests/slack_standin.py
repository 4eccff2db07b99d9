"""A local stand-in for Slack's Web API (only Slack's servers are not here): an HTTP server on
127.0.0.1 that slack_sdk's WebClient is pointed at with base_url. It answers the four methods Review
Queue calls the way Slack documents them and records every call with its arguments."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class SlackStandIn:
    def __init__(self):
        self.calls: list[tuple[str, dict]] = []
        self.users: dict[str, dict] = {}  # Slack user id -> {"email": ..., "confirmed": bool}
        self.token = ""
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, args: dict):
                method = urlsplit(self.path).path.rsplit("/", 1)[-1]
                if self.headers.get("authorization") != f"Bearer {standin.token}":
                    body = {"ok": False, "error": "invalid_auth"}
                else:
                    standin.calls.append((method, args))
                    body = standin.answer(method, args)
                payload = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json; charset=utf-8")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):
                self._answer({k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()})

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.headers.get("content-type", "").startswith("application/json"):
                    args = json.loads(raw)
                else:
                    args = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
                args.update({k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()})
                self._answer(args)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self.thread.start()

    def answer(self, method: str, args: dict) -> dict:
        if method == "chat.postMessage":
            return {"ok": True, "channel": args["channel"], "ts": f"1700000000.{len(self.calls):06d}", "message": {}}
        if method == "chat.update":
            return {"ok": True, "channel": args["channel"], "ts": args["ts"]}
        if method == "chat.postEphemeral":
            return {"ok": True, "message_ts": "1700000001.000001"}
        if method == "users.info":
            user = self.users.get(args.get("user"))
            if user is None:
                return {"ok": False, "error": "user_not_found"}
            return {
                "ok": True,
                "user": {
                    "id": args["user"],
                    "is_email_confirmed": user["confirmed"],
                    "profile": {"email": user["email"]},
                },
            }
        return {"ok": False, "error": "unknown_method"}

    def of(self, method: str) -> list[dict]:
        return [args for name, args in self.calls if name == method]

    def close(self):
        self.server.shutdown()
        self.server.server_close()
