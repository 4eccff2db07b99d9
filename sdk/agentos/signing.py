"""Standard Webhooks signatures: how the service proves an invocation came from it."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

TOLERANCE_SECONDS = 5 * 60


class SignatureError(Exception):
    """The request is not signed by the holder of the secret, or the signature is stale."""


def secret_key(secret: str) -> bytes:
    """The HMAC key: the base64-decoded text after `whsec_`."""
    encoded = secret.removeprefix("whsec_")
    try:
        return base64.b64decode(encoded, validate=True)
    except ValueError as exc:
        raise ValueError("the signing secret must be 'whsec_' followed by base64") from exc


def signature(secret: str, msg_id: str, timestamp: int | str, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def sign(secret: str, msg_id: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """Headers for one delivery attempt; each attempt is signed afresh with its own timestamp."""
    ts = int(time.time()) if timestamp is None else timestamp
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(ts),
        "webhook-signature": signature(secret, msg_id, ts, body),
    }


def check_headers(
    headers: dict[str, str], *, now: float | None = None, tolerance: int = TOLERANCE_SECONDS
) -> tuple[str, int, str]:
    """(id, timestamp, signature header) when the signature's headers are there and the timestamp is
    fresh, else SignatureError: what a server checks before it reads a body at all."""
    msg_id = headers.get("webhook-id")
    ts_text = headers.get("webhook-timestamp")
    sig_header = headers.get("webhook-signature")
    if not msg_id or not ts_text or not sig_header:
        raise SignatureError("missing webhook headers")
    try:
        ts = int(ts_text)
    except ValueError:
        raise SignatureError("bad webhook-timestamp") from None
    current = time.time() if now is None else now
    # Both directions: a timestamp far in the future is as suspect as an old one.
    if abs(current - ts) > tolerance:
        raise SignatureError("stale webhook-timestamp")
    return msg_id, ts, sig_header


def verify(
    secret: str,
    headers: dict[str, str],
    body: bytes,
    *,
    now: float | None = None,
    tolerance: int = TOLERANCE_SECONDS,
) -> None:
    """Raise SignatureError unless one `v1,` entry matches and the timestamp is fresh.

    `headers` must be keyed by lower-case names.
    """
    msg_id, ts, sig_header = check_headers(headers, now=now, tolerance=tolerance)
    expected = signature(secret, msg_id, ts, body).encode()
    found = False
    # Every entry is compared, so the time taken does not tell which entry was close.
    for entry in sig_header.split():
        if entry.startswith("v1,") and hmac.compare_digest(entry.encode(), expected):
            found = True
    if not found:
        raise SignatureError("no matching signature")
