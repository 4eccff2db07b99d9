"""A local server that speaks the Anthropic Messages API (streaming and not) and answers from a script:
the real Claude Code CLI bundled in claude-agent-sdk talks to it through ANTHROPIC_BASE_URL, offline.

Each script step sees the request's messages and returns the assistant's content blocks: a tool_use
when the model should call a tool, text to finish. Every request is recorded for the tests to read.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Step = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def tool_use(name: str, tool_input: dict[str, Any], call_id: str) -> Step:
    return lambda messages: [{"type": "tool_use", "id": call_id, "name": name, "input": tool_input}]


def text(reply: str) -> Step:
    return lambda messages: [{"type": "text", "text": reply}]


class FakeAnthropic:
    """`script(messages) -> content blocks` answers each main-loop request; side requests (titles, quota
    checks, anything without tools) get a short text."""

    def __init__(self, script: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]):
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                self._json(200, {"data": [], "has_more": False})

            def do_HEAD(self):  # noqa: N802
                self.send_response(200)
                self.end_headers()

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if "count_tokens" in self.path:
                    return self._json(200, {"input_tokens": 10})
                if not self.path.split("?")[0].endswith("/messages"):
                    return self._json(200, {})
                blocks = fake.answer(body)
                if body.get("stream"):
                    return self._stream(body, blocks)
                return self._json(200, fake.message(body, blocks))

            def _json(self, status, payload):
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _stream(self, body, blocks):
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.end_headers()
                message = fake.message(body, [])
                message["stop_reason"] = None
                self._event("message_start", {"type": "message_start", "message": message})
                for n, block in enumerate(blocks):
                    if block["type"] == "text":
                        start = {"type": "text", "text": ""}
                        delta = {"type": "text_delta", "text": block["text"]}
                    else:
                        start = {**block, "input": {}}
                        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
                    self._event(
                        "content_block_start", {"type": "content_block_start", "index": n, "content_block": start}
                    )
                    self._event("content_block_delta", {"type": "content_block_delta", "index": n, "delta": delta})
                    self._event("content_block_stop", {"type": "content_block_stop", "index": n})
                stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
                self._event(
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": stop, "stop_sequence": None},
                        "usage": {"output_tokens": 5},
                    },
                )
                self._event("message_stop", {"type": "message_stop"})

            def _event(self, name, data):
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    def answer(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        if not body.get("tools"):
            return [{"type": "text", "text": "ok"}]
        with self.lock:
            self.requests.append(body)
            return self.script(body.get("messages") or [])

    @staticmethod
    def message(body: dict[str, Any], blocks: list[dict[str, Any]]) -> dict[str, Any]:
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude-fake"),
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }

    def __enter__(self) -> FakeAnthropic:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def offline_env(fake: FakeAnthropic, config_dir) -> dict[str, str]:
    """The bundled CLI's environment for a run against `fake`: no key, no telemetry, no updates."""
    return {
        "ANTHROPIC_BASE_URL": fake.url,
        "ANTHROPIC_API_KEY": "sk-offline",
        "CLAUDE_CONFIG_DIR": str(config_dir),
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


def tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every tool_result block the model has been sent so far."""
    found = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            found += [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    return found
