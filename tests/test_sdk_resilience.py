"""The Python SDK against the real service behind a faulty network: a proxy drops answers, says 503 or
429, or refuses connections, and the SDK retries what is safe to repeat and raises typed errors."""

import http.server
import socket
import threading

import agentos
import httpx
import pytest
from agentos import invocation as sdk_invocation

from holds.models import Hold, RunFile
from tests import factories
from tests.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)


class FaultyProxy:
    """Forwards to the service; `faults[(method, path prefix)]` is a list of what to do to the next
    matching requests: "drop" (forward, then close without answering), "refuse" (close unanswered,
    not forwarded) or an int status answered here (with `retry_after`)."""

    def __init__(self, target: str):
        self.faults: dict[tuple[str, str], list] = {}
        self.seen: list[tuple[str, str, str]] = []  # method, path, x-request-id
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def handle_one(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                proxy.seen.append((self.command, self.path, self.headers.get("x-request-id")))
                fault = proxy.next_fault(self.command, self.path)
                if fault == "refuse":
                    self.close_connection = True
                    self.connection.close()
                    return
                if isinstance(fault, tuple):
                    status, retry_after = fault
                    self.send_response(status)
                    if retry_after is not None:
                        self.send_header("retry-after", retry_after)
                    self.send_header("content-type", "application/json")
                    self.send_header("x-request-id", "proxy-said-so")
                    payload = b'{"error": "unavailable", "message": "try later"}'
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                resp = httpx.request(self.command, target + self.path, headers=headers, content=body)
                if fault == "drop":
                    self.close_connection = True
                    self.connection.close()
                    return
                self.send_response(resp.status_code)
                for key, value in resp.headers.items():
                    if key.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                        self.send_header(key, value)
                self.send_header("content-length", str(len(resp.content)))
                self.end_headers()
                self.wfile.write(resp.content)

            do_GET = do_PUT = do_POST = do_DELETE = handle_one

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()

    def next_fault(self, method: str, path: str):
        for (m, prefix), queue in self.faults.items():
            if m == method and path.startswith(prefix) and queue:
                return queue.pop(0)
        return None

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def world(live_server, monkeypatch):
    cap = factories.capability()
    run = factories.start_run(cap)
    invocation, token = factories.deliver_now(run)
    proxy = FaultyProxy(live_server.url)
    slept: list[float] = []
    monkeypatch.setattr(sdk_invocation.time, "sleep", slept.append)
    inv = agentos.Invocation(
        {"id": invocation.id, "run_id": run.public_id, "capability": cap.name, "api_url": proxy.url, "run_token": token}
    )
    yield {"inv": inv, "proxy": proxy, "run": run, "slept": slept, "token": token, "url": live_server.url}
    inv.close()
    proxy.close()


def test_an_ask_whose_answer_was_lost_is_asked_again_and_gets_the_same_hold(world):
    inv, proxy = world["inv"], world["proxy"]
    proxy.faults[("POST", "/v0/holds")] = ["drop"]
    hold_id = inv.ask("Pay", [{"id": "INV-1", "title": "Acme", "data": {"amount": "1.00"}}], suspend=False)
    assert Hold.objects.filter(run=world["run"]).count() == 1
    assert hold_id == Hold.objects.get(run=world["run"]).public_id
    attempts = [s for s in proxy.seen if s[1] == "/v0/holds"]
    assert len(attempts) == 2 and attempts[0][2] == attempts[1][2]  # one X-Request-ID for both
    assert len(world["slept"]) == 1


def test_an_upload_whose_answer_was_lost_is_stored_once(world):
    inv, proxy = world["inv"], world["proxy"]
    proxy.faults[("POST", "/v0/files")] = ["drop", "refuse"]
    file_id = inv.files.upload(b"%PDF-1.4 invoice", name="invoice.pdf")
    assert [f.public_id for f in RunFile.objects.filter(run=world["run"])] == [file_id]
    assert inv.files.upload(b"%PDF-1.4 invoice", name="invoice.pdf") == file_id  # a later invocation's repeat
    assert inv.files.upload(b"%PDF-1.4 other", name="invoice.pdf") != file_id


def test_503_and_429_are_retried_waiting_as_retry_after_says(world):
    inv, proxy, slept = world["inv"], world["proxy"], world["slept"]
    state = f"/v0/runs/{world['run'].public_id}/state/"
    proxy.faults[("PUT", state)] = [(503, "2"), (429, "Wed, 21 Oct 2015 07:28:00 GMT")]
    proxy.faults[("GET", state)] = [(502, None)]
    inv.state.run.put("progress", {"step": 1})
    assert inv.state.run.get("progress") == {"step": 1}
    assert slept[:2] == [2.0, 0.0]  # a date in the past waits no more
    assert 0 < slept[2] <= 0.5  # no Retry-After: backoff with jitter


def test_errors_are_typed_and_carry_the_request_id(world):
    inv, proxy = world["inv"], world["proxy"]
    state = f"/v0/runs/{world['run'].public_id}/state/"
    proxy.faults[("PUT", state)] = [(503, None)] * 4
    with pytest.raises(agentos.ServerError) as failed:
        inv.state.run.put("k", 1)
    assert failed.value.status == 503 and failed.value.request_id == "proxy-said-so"
    assert len(world["slept"]) == 3  # three retries, then the error

    proxy.faults[("PUT", state)] = ["refuse"] * 4
    with pytest.raises(agentos.APIConnectionError) as lost:
        inv.state.run.put("k", 1)
    assert lost.value.request_id == proxy.seen[-1][2]

    refused = agentos.Invocation(
        {"id": "inv_x", "run_id": world["run"].public_id, "capability": "c", "api_url": world["url"], "run_token": "no"}
    )
    with pytest.raises(agentos.AuthenticationError) as denied:
        refused.state.run.put("k", 1)
    assert denied.value.status == 401 and denied.value.request_id.startswith("agentos-")
    assert isinstance(denied.value, agentos.ApiError) and isinstance(denied.value, agentos.AgentOSError)
    with pytest.raises(agentos.AskInvalid):
        inv.ask("", [], suspend=False)
    refused.close()


def test_a_timeout_is_its_own_error(world, monkeypatch):
    silent = socket.create_server(("127.0.0.1", 0))  # accepts connections, never answers
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    inv = agentos.Invocation({"id": "inv_t", "run_id": "r_1", "capability": "c", "api_url": url})
    monkeypatch.setattr(inv._api._client, "timeout", httpx.Timeout(0.05))
    with pytest.raises(agentos.APITimeoutError):
        inv.state.run.get("k", None)
    assert len(world["slept"]) == 3
    inv.close()
    silent.close()
