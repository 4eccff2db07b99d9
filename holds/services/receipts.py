"""Decision receipts: every resume carries a compact JWS (Ed25519) that proves what was decided, on which
exact data, by whom and when, to anyone holding the public keys at /.well-known/jwks.json (SPEC "Round 3":
Decision receipts; docs/receipts.md shows how to verify one by hand).

The private keys live in the database, each encrypted with a key derived from SECRET_KEY; the newest is
current. A process keeps the current key for CURRENT_KEY_SECONDS, so a rotation reaches every process
within that time; receipts signed with an older key keep verifying because its public half stays published.
"""

import base64
import functools
import hashlib
import json
import logging
import time
from datetime import datetime
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.db import transaction
from joserfc.jwk import OKPKey

from ..ids import RUN, public_id
from ..models import ReceiptKey
from ..schemas import canonical_json
from . import gateway, sql

ALG = "Ed25519"
TYP = "rq-receipt+jws"
CURRENT_KEY_SECONDS = 60.0
# pg_advisory_xact_lock's key for creating a key: two first uses at once create one key, not two.
_KEY_LOCK = 0x7271_7263  # "rqrc"

_current: tuple[OKPKey, float] | None = None
log = logging.getLogger(__name__)


def sha256(value: Any) -> str:
    """The hex SHA-256 of a value's canonical JSON (UTF-8), as a receipt states it for asked and decided data."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def receipt_item(item_id: str, action: str | None, asked: Any, decided: Any, decided_by: dict | None = None) -> dict:
    """One item of a receipt: its action and the hashes of the data asked and decided (null: nothing decided)."""
    item = {
        "id": item_id,
        "action": action or None,
        "asked_sha256": sha256(asked),
        "decided_sha256": None if action in (None, "") else sha256(decided),
    }
    if decided_by:
        item["decided_by"] = decided_by
    return item


def sign(
    *,
    hold_id: str,
    run_id: str,
    capability: str,
    resolved_by: str,
    decided_by: list[dict],
    decided_at: datetime,
    items: list[dict],
) -> str:
    """The compact JWS of one resume's receipt (items from receipt_item, in the hold's order)."""
    claims = {
        "iss": settings.RQ_PUBLIC_URL,
        "hold_id": hold_id,
        "run_id": run_id,
        "capability": capability,
        "resolved_by": resolved_by,
        "decided_by": decided_by,
        "decided_at": decided_at.isoformat(),
        "iat": int(decided_at.timestamp()),
        "items": items,
    }
    key = current_key()
    # The compact JWS built here rather than by joserfc (which verifies them: tests, SDKs): its
    # serialisation took half of a receipt's 47 us, and the sweep signs one per expired hold.
    signing_input = _header_segment(key.kid) + b"." + _b64(canonical_json(claims).encode())
    return (signing_input + b"." + _b64(key.private_key.sign(signing_input))).decode()


def _b64(raw: bytes) -> bytes:
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


@functools.lru_cache(maxsize=8)
def _header_segment(kid: str) -> bytes:
    return _b64(canonical_json({"alg": ALG, "kid": kid, "typ": TYP}).encode())


def for_decision(hold, items, stamp: dict, resume: dict, approvals=()) -> str:
    """The receipt of a decision about to be written (decisions.write_decision): by a person or service
    account (the stamp's), or by every approver of a quorum (`approvals`, HoldApproval rows, each named on
    its own), and by each rule or grant that decided an item (the item's `decided_by`)."""
    deciders = []
    if approvals:
        deciders.extend(
            {"type": "person" if a.user_id is not None else "service_account", "name": a.label} for a in approvals
        )
    elif stamp.get("decided_by_user_id") is not None:
        deciders.append({"type": "person", "name": stamp["decided_by"]})
    elif stamp.get("decided_by_account_id") is not None:
        deciders.append({"type": "service_account", "name": stamp["decided_by"]})
    for sent in resume["items"]:
        if sent.get("decided_by") and sent["decided_by"] not in deciders:
            deciders.append(sent["decided_by"])
    return sign(
        hold_id=hold.public_id,
        run_id=public_id(RUN, hold.run_id),
        capability=hold.capability.name,
        resolved_by=resume["resolved_by"],
        decided_by=deciders,
        decided_at=stamp["decided_at"],
        items=[
            receipt_item(item.item_id, sent["action"], item.data, sent["data"], sent.get("decided_by"))
            for item, sent in zip(items, resume["items"], strict=True)
        ],
    )


EXPIRED = {"type": "expired"}


def resume_as_sent(resume: dict | None, *, hold_id: int, run_id: str, capability: str) -> dict | None:
    """A stored resume as it is sent and shown (delivery, GET /v0/holds/{id}): an expired hold's gets its
    receipt here. The sweep writes expired resumes without one: signing was a third of an expiry's time
    (`make bench`'s sweep went from 29,614 to 8,856 holds/s with it). What the receipt states was fixed
    when the hold expired and Ed25519 signatures are deterministic, so every send and every read carries
    the same receipt (after a key rotation the new key signs it; both verify)."""
    if resume is None or "receipt" in resume or resume.get("resolved_by") != "expired":
        return resume
    rows = gateway.fetch(sql.EXPIRED_FOR_RECEIPT, [hold_id])
    receipt = sign(
        hold_id=resume["hold_id"],
        run_id=run_id,
        capability=capability,
        resolved_by="expired",
        decided_by=[EXPIRED],
        decided_at=rows[0][0],
        items=[receipt_item(item_id, None, json.loads(data), None) for _, item_id, data in rows if item_id is not None],
    )
    return {**resume, "receipt": receipt}


# --- keys ----------------------------------------------------------------------------------------


def current_key() -> OKPKey:
    """The newest key, created on first use; cached in this process for CURRENT_KEY_SECONDS."""
    global _current
    if _current is not None and time.monotonic() - _current[1] < CURRENT_KEY_SECONDS:
        return _current[0]
    row = ReceiptKey.objects.first()
    if row is None:
        row = _create(only_if_none=True)
    try:
        key = _private(row)
    except InvalidToken:
        # SECRET_KEY changed since this key was stored: decisions must not fail for it. A new key signs
        # from now on; the old public keys still verify the receipts they signed.
        log.error("receipt key %s cannot be decrypted with this SECRET_KEY; a new key is made", row.kid)
        key = _private(_create(only_if_none=False))
    _current = (key, time.monotonic())
    return key


def rotate() -> ReceiptKey:
    """Adds a new current key; the old ones stay published so their receipts still verify."""
    row = _create(only_if_none=False)
    forget_current_key()
    return row


def forget_current_key() -> None:
    """The next receipt reads the current key from the database again."""
    global _current
    _current = None


def jwks() -> dict:
    """The public keys, newest first, as a JSON Web Key Set."""
    return {"keys": [row.public_jwk for row in ReceiptKey.objects.only("public_jwk")]}


def _create(*, only_if_none: bool) -> ReceiptKey:
    with transaction.atomic():
        gateway.fetch("SELECT pg_advisory_xact_lock(%s)", [_KEY_LOCK])
        if only_if_none and (existing := ReceiptKey.objects.first()) is not None:
            return existing
        generated = OKPKey.generate_key("Ed25519")
        kid = generated.thumbprint()
        key = OKPKey.import_key({**generated.as_dict(private=True), "kid": kid, "use": "sig", "alg": ALG})
        pem = key.as_pem(private=True)
        return ReceiptKey.objects.create(
            kid=kid,
            public_jwk=key.as_dict(private=False),
            private_encrypted=_fernet().encrypt(pem).decode(),
        )


def _private(row: ReceiptKey) -> OKPKey:
    pem = _fernet().decrypt(row.private_encrypted.encode())
    return OKPKey.import_key(pem, {"kid": row.kid, "use": "sig", "alg": ALG})


def _fernet() -> Fernet:
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"review-queue receipt keys").derive(
        settings.SECRET_KEY.encode()
    )
    return Fernet(base64.urlsafe_b64encode(derived))


def key_count() -> int:
    return ReceiptKey.objects.count()
