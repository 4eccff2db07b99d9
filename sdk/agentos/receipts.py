"""Decision receipts: verify the compact JWS (Ed25519) a resume carries against the service's public keys
(`/.well-known/jwks.json`), offline with a key set you hold, or with keys fetched once and cached.

    from agentos import verify_receipt
    claims = verify_receipt(token, jwks_url="https://rq.example.com/.well-known/jwks.json")

Needs `cryptography` (`pip install 'agentos[receipts]'`); nothing else in the SDK does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import threading
from typing import Any

import httpx

from .errors import AgentOSError
from .tls import tls_context

ALGORITHMS = ("Ed25519", "EdDSA")  # the fully-specified name (RFC 9864) and its older one

_cache: dict[str, dict[str, Any]] = {}  # jwks_url -> {kid: public key}
_lock = threading.Lock()


class ReceiptError(AgentOSError):
    """A receipt that does not verify: malformed, signed by an unknown key, changed, or not this resume's."""


def canonical_json(value: Any) -> str:
    """The canonical JSON the receipt hashes: sorted keys, no spaces, UTF-8 as is (the service's own rule)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def verify_receipt(
    token: str,
    jwks_url: str | None = None,
    jwks: dict[str, Any] | None = None,
    *,
    timeout: float = 10.0,
) -> dict[str, Any]:
    """The receipt's verified claims, or ReceiptError.

    With `jwks` (a key set you hold) nothing is fetched. With `jwks_url` the set is fetched on first use
    and cached per URL; a kid not in the cached set makes one fresh fetch (a rotation), then fails."""
    if (jwks is None) == (jwks_url is None):
        raise ValueError("pass exactly one of jwks_url and jwks")
    header_b64, payload_b64, signature, header = _parts(token)
    kid = header.get("kid")
    if jwks is not None:
        key = _keys(jwks).get(kid)
    else:
        key = _cached_key(jwks_url, kid, timeout)
    if key is None:
        raise ReceiptError(f"receipt signed with unknown key {kid!r}")
    from cryptography.exceptions import InvalidSignature

    try:
        key.verify(signature, f"{header_b64}.{payload_b64}".encode())
    except InvalidSignature:
        raise ReceiptError("receipt signature does not verify (changed, or not signed by this key)") from None
    try:
        claims = json.loads(_b64(payload_b64))
    except ValueError:
        raise ReceiptError("receipt payload is not JSON") from None
    if not isinstance(claims, dict):
        raise ReceiptError("receipt payload is not an object")
    return claims


def check_resume(claims: dict[str, Any], resume: dict[str, Any]) -> None:
    """That verified claims are this resume's: the same hold, and each item's data hashing to what was signed."""
    if claims.get("hold_id") != resume.get("hold_id") or claims.get("resolved_by") != resume.get("resolved_by"):
        raise ReceiptError("receipt is for another hold or outcome than this resume")
    signed = {i.get("id"): i for i in claims.get("items") or []}
    for item in resume.get("items") or []:
        entry = signed.get(item.get("id"))
        if entry is None or entry.get("action") != item.get("action"):
            raise ReceiptError(f"item {item.get('id')!r}: the receipt does not state this action")
        if entry.get("decided_sha256") != sha256(item.get("data")):
            raise ReceiptError(f"item {item.get('id')!r}: the data differs from what the receipt signed")


def forget_keys() -> None:
    """Drops every cached key set (the next verification fetches again)."""
    with _lock:
        _cache.clear()


def _parts(token: str) -> tuple[str, str, bytes, dict[str, Any]]:
    if not isinstance(token, str) or token.count(".") != 2:
        raise ReceiptError("receipt is not a compact JWS")
    header_b64, payload_b64, signature_b64 = token.split(".")
    try:
        header = json.loads(_b64(header_b64))
        signature = _b64(signature_b64)
    except ValueError:
        raise ReceiptError("receipt is not a compact JWS") from None
    if not isinstance(header, dict) or header.get("alg") not in ALGORITHMS:
        raise ReceiptError(f"receipt algorithm must be one of {ALGORITHMS}")
    return header_b64, payload_b64, signature, header


def _cached_key(jwks_url: str, kid: Any, timeout: float):
    with _lock:
        keys = _cache.get(jwks_url)
    if keys is not None and kid in keys:
        return keys[kid]
    # Unknown here: fetch once (the service may have rotated), then the answer stands.
    keys = _keys(_fetch(jwks_url, timeout))
    with _lock:
        _cache[jwks_url] = keys
    return keys.get(kid)


def _fetch(jwks_url: str, timeout: float) -> dict[str, Any]:
    try:
        response = httpx.get(jwks_url, timeout=timeout, verify=tls_context())
        response.raise_for_status()
        return response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise ReceiptError(f"could not fetch the receipt keys from {jwks_url}: {exc}") from exc


def _keys(jwks: dict[str, Any]) -> dict[str, Any]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    keys = {}
    for jwk in (jwks or {}).get("keys") or []:
        if isinstance(jwk, dict) and jwk.get("kty") == "OKP" and jwk.get("crv") == "Ed25519" and "kid" in jwk:
            try:
                keys[jwk["kid"]] = Ed25519PublicKey.from_public_bytes(_b64(jwk["x"]))
            except (ValueError, KeyError, TypeError):
                continue
    return keys


def _b64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, TypeError) as exc:
        raise ValueError(str(exc)) from exc
