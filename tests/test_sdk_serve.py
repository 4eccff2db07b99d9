"""agentos.Server: signed `POST /invoke`, answers, deduplication, concurrency."""

import base64
import json
import threading
import time

import agentos
import httpx
import pytest
from agentos import signing

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()


def invocation(inv_id="inv_1", capability="echo", **extra):
    return {
        "invocation": {
            "id": inv_id,
            "kind": "start",
            "seq": 1,
            "run_id": "r_1",
            "capability": capability,
            "version": "1",
            "api_url": "http://127.0.0.1:9",
            "run_token": "tok_x",
            "input": {"n": 1},
            "eval": None,
            **extra,
        },
        "resume": None,
    }


def post(server, payload, secret=SECRET, headers=None, timestamp=None):
    body = json.dumps(payload).encode()
    signed = signing.sign(secret, payload["invocation"]["id"], body, timestamp=timestamp)
    signed.update(headers or {})
    return httpx.post(server.url + "/invoke", content=body, headers=signed, timeout=10)


@pytest.fixture
def serve():
    started = []

    def start(handlers, **kw):
        server = agentos.Server(handlers, port=0, secret=kw.pop("secret", SECRET), **kw).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def test_it_answers_completed_with_the_handler_output(serve):
    server = serve({"echo": lambda inv: {"got": inv.input, "run": inv.run_id}})
    resp = post(server, invocation())
    assert resp.status_code == 200
    assert resp.json() == {"status": "completed", "output": {"got": {"n": 1}, "run": "r_1"}}


def test_it_answers_failed_with_the_message_of_a_handler_exception(serve):
    def boom(inv):
        raise RuntimeError("bank is down")

    server = serve({"echo": boom})
    assert post(server, invocation()).json() == {"status": "failed", "error": "bank is down"}


def test_it_answers_404_for_an_unknown_capability(serve):
    server = serve({"echo": lambda inv: 1})
    resp = post(server, invocation(capability="nope"))
    assert resp.status_code == 404
    assert resp.json()["error"] == "not_found" and "nope" in resp.json()["message"]


def test_it_answers_suspended_when_the_handler_asks(serve):
    def asks(inv):
        raise agentos.Suspend("h_7")

    server = serve({"echo": asks})
    assert post(server, invocation()).json() == {"status": "suspended", "hold_id": "h_7"}


def test_it_keeps_suspending_when_a_handler_catches_exception(serve):
    def careless(inv):
        try:
            raise agentos.Suspend("h_8")
        except Exception:
            return {"swallowed": True}

    server = serve({"echo": careless})
    assert post(server, invocation()).json() == {"status": "suspended", "hold_id": "h_8"}


def test_it_rejects_a_missing_signature_with_401(serve):
    server = serve({"echo": lambda inv: 1})
    resp = httpx.post(server.url + "/invoke", content=json.dumps(invocation()).encode())
    assert resp.status_code == 401
    assert resp.json()["error"] == "unauthorized"


def test_it_rejects_a_signature_made_with_another_secret(serve):
    server = serve({"echo": lambda inv: 1})
    other = "whsec_" + base64.b64encode(b"another-secret-another-secret-xx").decode()
    assert post(server, invocation(), secret=other).status_code == 401


def test_it_rejects_a_tampered_body(serve):
    calls = []
    server = serve({"echo": lambda inv: calls.append(inv.input)})
    payload = invocation()
    body = json.dumps(payload).encode()
    headers = signing.sign(SECRET, "inv_1", body)
    tampered = body.replace(b'"n": 1', b'"n": 2')
    resp = httpx.post(server.url + "/invoke", content=tampered, headers=headers)
    assert resp.status_code == 401
    assert calls == []


# 330 rather than 301: a second ticking between signing and checking must not make it pass.
@pytest.mark.parametrize("skew", [-330, 330])
def test_it_rejects_a_timestamp_more_than_five_minutes_off(serve, skew):
    server = serve({"echo": lambda inv: 1})
    resp = post(server, invocation(), timestamp=int(time.time()) + skew)
    assert resp.status_code == 401


def test_it_accepts_a_timestamp_within_five_minutes(serve):
    server = serve({"echo": lambda inv: 1})
    assert post(server, invocation(), timestamp=int(time.time()) - 290).status_code == 200


def test_it_accepts_any_one_of_several_signatures(serve):
    server = serve({"echo": lambda inv: "ok"})
    payload = invocation()
    body = json.dumps(payload).encode()
    headers = signing.sign(SECRET, "inv_1", body)
    headers["webhook-signature"] = "v1,bm90LXRoaXMtb25l " + headers["webhook-signature"]
    resp = httpx.post(server.url + "/invoke", content=body, headers=headers)
    assert resp.json() == {"status": "completed", "output": "ok"}


def test_it_rejects_a_webhook_id_that_is_not_the_invocation_id(serve):
    server = serve({"echo": lambda inv: 1})
    payload = invocation()
    body = json.dumps(payload).encode()
    headers = signing.sign(SECRET, "inv_other", body)
    resp = httpx.post(server.url + "/invoke", content=body, headers=headers)
    assert resp.status_code == 400


def test_it_verifies_the_standard_webhooks_reference_signature():
    # The example from the Standard Webhooks specification.
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"test": 2432232314}'
    headers = {
        "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
        "webhook-timestamp": "1614265330",
        "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
    }
    signing.verify(secret, headers, body, now=1614265330)
    with pytest.raises(signing.SignatureError):
        signing.verify(secret, headers, body + b" ", now=1614265330)


def test_it_gives_a_repeated_delivery_the_first_answer_without_running_again(serve):
    calls = []

    def count(inv):
        calls.append(inv.id)
        return {"call": len(calls)}

    server = serve({"echo": count})
    first = post(server, invocation("inv_dup")).json()
    second = post(server, invocation("inv_dup")).json()
    assert first == second == {"status": "completed", "output": {"call": 1}}
    assert calls == ["inv_dup"]
    assert post(server, invocation("inv_new")).json()["output"] == {"call": 2}


def test_it_gives_a_duplicate_arriving_mid_run_the_first_answer(serve):
    release = threading.Event()
    started = threading.Event()
    calls = []

    def slow(inv):
        calls.append(inv.id)
        started.set()
        assert release.wait(10)
        return {"calls": len(calls)}

    server = serve({"echo": slow})
    answers = {}
    first = threading.Thread(target=lambda: answers.update(a=post(server, invocation()).json()))
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=lambda: answers.update(b=post(server, invocation()).json()))
    second.start()
    time.sleep(0.2)
    assert "b" not in answers  # the duplicate waits for the first answer
    release.set()
    first.join(10)
    second.join(10)
    assert answers["a"] == answers["b"] == {"status": "completed", "output": {"calls": 1}}
    assert calls == ["inv_1"]


def test_it_runs_requests_concurrently(serve):
    barrier = threading.Barrier(2, timeout=5)

    def meet(inv):
        barrier.wait()  # only passes if both invocations run at the same time
        return inv.id

    server = serve({"echo": meet})
    answers = []
    threads = [
        threading.Thread(target=lambda i=i: answers.append(post(server, invocation(i)).json()))
        for i in ("inv_a", "inv_b")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(a["output"] for a in answers) == ["inv_a", "inv_b"]


def test_it_refuses_to_start_without_a_secret(monkeypatch):
    monkeypatch.delenv("AGENTOS_SECRET", raising=False)
    with pytest.raises(ValueError, match="secret"):
        agentos.Server({"echo": lambda inv: 1}, port=0)


def test_it_reads_the_secret_from_agentos_secret(monkeypatch):
    monkeypatch.setenv("AGENTOS_SECRET", SECRET)
    with agentos.Server({"echo": lambda inv: "env"}, port=0) as server:
        assert post(server, invocation()).json()["output"] == "env"


def test_an_explicit_secret_wins_over_agentos_secret(monkeypatch):
    other = "whsec_" + base64.b64encode(b"fedcba9876543210fedcba9876543210").decode()
    monkeypatch.setenv("AGENTOS_SECRET", other)
    with agentos.Server({"echo": lambda inv: "explicit"}, port=0, secret=SECRET) as server:
        assert post(server, invocation()).json()["output"] == "explicit"
        assert post(server, invocation("inv_2"), secret=other).status_code == 401


def test_it_answers_failed_when_the_output_is_not_json(serve):
    server = serve({"echo": lambda inv: {"when": object()}})
    answer = post(server, invocation()).json()
    assert answer["status"] == "failed"
    assert "JSON" in answer["error"]


def test_it_answers_kept_alive_connections_without_nagle_delays(serve):
    # The service keeps one connection per agent open; with Nagle's algorithm on, every answer
    # (headers and body written separately) waited for a delayed ACK, about 40 ms each.
    server = serve({"echo": lambda inv: 1})
    assert server.httpd.RequestHandlerClass.disable_nagle_algorithm is True
    with httpx.Client() as client:
        for n in range(3):
            payload = invocation(f"inv_keep{n}")
            body = json.dumps(payload).encode()
            headers = signing.sign(SECRET, payload["invocation"]["id"], body)
            assert client.post(server.url + "/invoke", content=body, headers=headers).status_code == 200


# --- issue 30.15: headers and size are checked before the body is read, and the body has a deadline -----


def raw_request(server, head: str, body: bytes = b"", wait: float = 5.0) -> bytes:
    """Sends `head` (and `body`) on a raw socket and returns what the server answers within `wait`."""
    import socket

    with socket.create_connection(("127.0.0.1", server.port), timeout=wait) as sock:
        sock.sendall(head.encode() + body)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
                if b"\r\n\r\n" in answer:
                    break
        except TimeoutError:
            pass
        return answer


def test_an_unsigned_request_is_refused_before_its_body_is_read(serve):
    server = serve({"echo": lambda inv: inv.input})
    # 16 MiB announced, nothing sent: the answer comes at once, from the headers alone.
    head = "POST /invoke HTTP/1.1\r\nhost: x\r\ncontent-length: 16000000\r\n\r\n"
    started = time.monotonic()
    answer = raw_request(server, head, wait=5)
    assert answer.startswith(b"HTTP/1.1 401"), answer[:80]
    assert time.monotonic() - started < 5  # not after a read that never ends


def test_a_declared_body_over_the_limit_is_refused_before_reading(serve):
    server = serve({"echo": lambda inv: inv.input})
    signed = signing.sign(SECRET, "inv_1", b"")
    head = "".join(f"{k}: {v}\r\n" for k, v in signed.items())
    answer = raw_request(server, f"POST /invoke HTTP/1.1\r\nhost: x\r\n{head}content-length: 99999999\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 413"), answer[:80]


def test_a_slow_body_is_cut_at_the_read_deadline(serve, monkeypatch):
    from agentos import server as server_module

    monkeypatch.setattr(server_module, "READ_SECONDS", 0.5)
    server = serve({"echo": lambda inv: inv.input})
    signed = signing.sign(SECRET, "inv_1", b"{}")
    head = "".join(f"{k}: {v}\r\n" for k, v in signed.items())
    # A forged but fresh header set, 1 MiB announced, one byte sent: a slow sender.
    answer = raw_request(server, f"POST /invoke HTTP/1.1\r\nhost: x\r\n{head}content-length: 1048576\r\n\r\n", b"{")
    assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
    # And the server still answers others.
    assert post(server, invocation()).status_code == 200
