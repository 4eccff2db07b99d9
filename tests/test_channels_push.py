"""Web Push: subscriptions per person, and a new hold's push to the people who may decide it, sent by
pywebpush to a local push-service stand-in that checks the VAPID JWT against the public key and
decrypts the payload as the browser would (http_ece, aes128gcm)."""

import base64
import io
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import http_ece
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.core.management import call_command
from django.test import Client

from holds import notifications, services
from holds.models import PushSubscription
from tests import factories

pytestmark = pytest.mark.django_db


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Browser:
    """A browser's side of one subscription: its ECDH key pair and auth secret."""

    def __init__(self):
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.auth = os.urandom(16)
        self.p256dh = b64url(self.key.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint))

    def decrypt(self, body: bytes) -> dict:
        return json.loads(http_ece.decrypt(body, private_key=self.key, auth_secret=self.auth, version="aes128gcm"))


class PushService:
    """The stand-in push service: answers per path, records what it got, verified and decrypted."""

    def __init__(self, public_key: str):
        self.received: list[dict] = []
        self.status: dict[str, int] = {}
        self.browsers: dict[str, Browser] = {}
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {name.lower(): value for name, value in self.headers.items()}
                try:
                    service.received.append(service.check(self.path, headers, body, public_key))
                except Exception as exc:  # a bad JWT or payload: recorded for the test, answered 400
                    service.received.append({"path": self.path, "error": repr(exc)})
                    service.status[self.path] = 400
                self.send_response(service.status.get(self.path, 201))
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()

    def subscribe(self, user, name: str) -> Browser:
        browser = self.browsers[f"/push/{name}"] = Browser()
        services.push_subscribe(
            user=user, endpoint=f"{self.origin}/push/{name}", p256dh=browser.p256dh, auth=b64url(browser.auth)
        )
        return browser

    def check(self, path: str, headers: dict, body: bytes, public_key: str) -> dict:
        scheme, _, params = headers["authorization"].partition(" ")
        fields = dict(part.split("=", 1) for part in params.split(","))
        header, claims, signature = fields["t"].split(".")
        raw = unb64url(signature)
        der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
        key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64url(fields["k"]))
        key.verify(der, f"{header}.{claims}".encode(), ec.ECDSA(hashes.SHA256()))  # raises when forged
        return {
            "path": path,
            "scheme": scheme,
            "k_is_ours": fields["k"] == public_key,
            "claims": json.loads(unb64url(claims)),
            "ttl": headers.get("ttl"),
            "encoding": headers.get("content-encoding"),
            "payload": self.browsers[path].decrypt(body),
        }

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def vapid(settings):
    out = io.StringIO()
    call_command("vapid_keys", stdout=out)
    keys = dict(line.split("=", 1) for line in out.getvalue().split())
    settings.RQ_VAPID_PRIVATE_KEY = keys["RQ_VAPID_PRIVATE_KEY"]
    settings.RQ_VAPID_PUBLIC_KEY = keys["RQ_VAPID_PUBLIC_KEY"]
    settings.RQ_VAPID_SUBJECT = "mailto:ops@example.com"
    return keys


@pytest.fixture
def push_service(vapid):
    service = PushService(vapid["RQ_VAPID_PUBLIC_KEY"])
    yield service
    service.close()


@pytest.fixture
def people():
    return {name: factories.person(name, role=role) for name, role in (("mona", "member"), ("vic", "viewer"))}


SECRETS = ("SECRET-PAYEE", "98765.43", "SECRET-DETAILS")


def leaky_hold(cap, **overrides):
    body = factories.ask_body(details="SECRET-DETAILS", **overrides)
    for item in body["items"]:
        item["data"] = {"payee": "SECRET-PAYEE", "amount": "98765.43"}
    return factories.held_hold(cap, body)[1]


def test_a_new_hold_is_pushed_to_who_may_decide_it_with_its_intent_only_and_a_valid_vapid_jwt(people, push_service):
    mona = push_service.subscribe(people["mona"], "mona")
    push_service.subscribe(people["vic"], "vic")  # a viewer may not decide: no push
    cap = factories.capability(approvers=["member", "admin"])
    hold = leaky_hold(cap, intent="Pay 2 invoices\nnow")
    result = notifications.deliver(hold_id=hold.pk, kind="asked", channel="push")
    assert result == "pushed to 1, 0 gone, 0 failed"
    [got] = push_service.received
    assert got["path"] == "/push/mona" and got["scheme"] == "vapid" and got["k_is_ours"]
    assert got["claims"]["aud"] == push_service.origin and got["claims"]["sub"] == "mailto:ops@example.com"
    assert got["claims"]["exp"] > time.time()
    assert got["encoding"] == "aes128gcm" and got["ttl"] == "3600"
    assert got["payload"] == {
        "hold": hold.public_id,
        "title": "Pay 2 invoices now",
        "url": f"http://127.0.0.1:8000/holds/{hold.public_id}",
    }
    assert not any(secret in json.dumps(got["payload"]) for secret in SECRETS)
    assert mona is push_service.browsers["/push/mona"]
    # Once: the notification row says sent.
    assert notifications.deliver(hold_id=hold.pk, kind="asked", channel="push") == "already-sent"
    assert len(push_service.received) == 1


def test_a_subscription_the_push_service_calls_gone_is_deleted(people, push_service):
    for name in ("mona", "old", "older", "down"):
        push_service.subscribe(people["mona"], name)
    push_service.status.update({"/push/old": 410, "/push/older": 404, "/push/down": 503})
    hold = leaky_hold(factories.capability())
    assert notifications.deliver(hold_id=hold.pk, kind="asked", channel="push") == "pushed to 1, 2 gone, 1 failed"
    left = sorted(s.endpoint.rsplit("/", 1)[1] for s in PushSubscription.objects.all())
    assert left == ["down", "mona"]  # a 503 is not gone


def test_reminders_are_not_pushed_and_nothing_is_sent_without_keys(people, push_service, settings):
    push_service.subscribe(people["mona"], "mona")
    cap = factories.capability()
    hold = leaky_hold(cap)
    assert notifications.deliver(hold_id=hold.pk, kind="reminder", channel="push").startswith("skipped")
    settings.RQ_VAPID_PRIVATE_KEY = ""
    assert notifications.deliver(hold_id=hold.pk, kind="asked", channel="push") == "off"
    assert push_service.received == []


def test_a_person_subscribes_signed_in_with_csrf_and_only_for_themselves(people, vapid):
    subscription = {
        "endpoint": "https://push.example.com/send/abc",
        "keys": {"p256dh": "BPk" + "a" * 84, "auth": "x" * 22},
    }
    anonymous = Client()
    assert anonymous.post("/push/subscriptions", subscription, content_type="application/json").status_code == 302
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(people["mona"])
    page = browser.get("/")
    token = page.cookies["csrftoken"].value
    no_csrf = browser.post("/push/subscriptions", subscription, content_type="application/json")
    assert no_csrf.status_code == 403
    assert browser.get("/push/subscriptions").json() == {"public_key": vapid["RQ_VAPID_PUBLIC_KEY"]}
    made = browser.post("/push/subscriptions", subscription, content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert made.status_code == 201
    assert list(PushSubscription.objects.values_list("user__username", "endpoint")) == [
        ("mona", "https://push.example.com/send/abc")
    ]
    nul = {"endpoint": "https://push.example.com/\u0000", "keys": subscription["keys"]}
    bad_key = {"endpoint": "https://push.example.com/y", "keys": {"p256dh": "a b\u0000", "auth": "x"}}
    for bad in ({"endpoint": "http://127.0.0.1/x", "keys": subscription["keys"]}, {"endpoint": 3}, [1], nul, bad_key):
        answer = browser.post("/push/subscriptions", bad, content_type="application/json", HTTP_X_CSRFTOKEN=token)
        assert answer.status_code == 422 and answer.json()["error"] == "invalid"
    vic = Client()
    vic.force_login(people["vic"])
    gone = vic.delete("/push/subscriptions", {"endpoint": subscription["endpoint"]}, content_type="application/json")
    assert gone.json() == {"removed": 0}  # not vic's
    removed = browser.delete(
        "/push/subscriptions", {"endpoint": subscription["endpoint"]}, content_type="application/json",
        HTTP_X_CSRFTOKEN=token,
    )  # fmt: skip
    assert removed.json() == {"removed": 1} and not PushSubscription.objects.exists()
