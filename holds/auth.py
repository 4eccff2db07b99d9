"""Who is calling: run tokens, service-account keys, sessions. What they may do is policy.py's to say.

Run tokens are derived (HMAC of the invocation id under a server key) so a delivery retry can
send the same token again, and only their sha256 is stored. Service-account keys are random and
also stored only as a sha256. Lookups go by hash; the final comparison is constant-time.
"""

import base64
import functools
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from django.conf import settings

from .models import Invocation, Role, Run, ServiceAccount
from .words import ActorKind

TOKEN_PREFIX = "tok_"
KEY_PREFIX = "rqk_"


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _token_key() -> bytes:
    return _token_key_for(settings.SECRET_KEY)


@functools.lru_cache(maxsize=4)
def _token_key_for(secret: str) -> bytes:
    # A key of its own, so that a token never equals anything else signed with SECRET_KEY.
    return hashlib.sha256(b"reviewqueue.run-token:" + secret.encode()).digest()


def run_token_for(invocation_id: str) -> str:
    """`tok_<invocation id>.<HMAC>`: the id finds the row by primary key, the 256-bit MAC is the secret."""
    mac = hmac.new(_token_key(), invocation_id.encode(), hashlib.sha256).digest()
    return f"{TOKEN_PREFIX}{invocation_id}.{base64.urlsafe_b64encode(mac).decode().rstrip('=')}"


def push_token_for(run) -> str:
    """The token Review Queue gives an A2A agent for its run's push notifications: only Review Queue can
    make it, so a push that brings it comes from the agent it was given to (holds/protocols/a2a.py)."""
    mac = hmac.new(_token_key(), f"a2a-push:{run.public_id}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def run_token_hash(invocation_id: str) -> str:
    return sha256_hex(run_token_for(invocation_id))


def run_token_sql_params() -> dict[str, bytes]:
    """The parameters of services.sql.RUN_TOKEN_HASH: the token key padded and xored as HMAC does."""
    key = _token_key().ljust(hashlib.sha256().block_size, b"\0")
    return {
        "token_ipad": bytes(b ^ 0x36 for b in key),
        "token_opad": bytes(b ^ 0x5C for b in key),
    }


def new_service_key() -> tuple[str, str, str]:
    """A new key, its hash and a short prefix that identifies it in lists."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    return key, sha256_hex(key), key[:10]


@dataclass(frozen=True)
class Actor:
    """The caller of a service function: a person, a service account, or a run (by its token)."""

    kind: ActorKind
    role: str | None
    label: str
    user: object | None = None
    account: ServiceAccount | None = None
    run: Run | None = None
    invocation: Invocation | None = None

    @property
    def caller_key(self) -> str:
        """Who an Idempotency-Key belongs to."""
        if self.kind == ActorKind.USER:
            return f"user:{self.user.pk}"
        if self.kind == ActorKind.ACCOUNT:
            return f"account:{self.account.pk}"
        if self.kind == ActorKind.RUN:
            return f"run:{self.run.pk}"
        return "system"

    @property
    def is_admin(self) -> bool:
        return self.role == Role.ADMIN


SYSTEM = Actor(kind=ActorKind.SYSTEM, role=None, label="system")


def role_of_user(user) -> str | None:
    if not user.is_authenticated or not user.is_active:
        return None
    if user.is_superuser:
        return Role.ADMIN
    membership = getattr(user, "membership", None)
    return membership.role if membership else Role.VIEWER


def actor_for_user(user) -> Actor:
    return Actor(kind=ActorKind.USER, role=role_of_user(user), label=user.get_username(), user=user)


def actor_for_account(account: ServiceAccount) -> Actor:
    return Actor(kind=ActorKind.ACCOUNT, role=account.role, label=f"service account {account.name}", account=account)


def actor_for_invocation(invocation: Invocation) -> Actor:
    return Actor(
        kind=ActorKind.RUN,
        role=None,
        label=f"run {invocation.run.public_id}",
        run=invocation.run,
        invocation=invocation,
    )


def token_invocation_id(token: str) -> str | None:
    """The invocation a well-formed run token names, if its MAC is ours (no database needed; whether
    the token is live is the database's to say, services.sql.LIVE_TOKEN)."""
    invocation_id, dot, _ = token.removeprefix(TOKEN_PREFIX).partition(".")
    if not token.startswith(TOKEN_PREFIX) or not dot or not invocation_id.startswith("inv_"):
        return None
    return invocation_id if hmac.compare_digest(token.encode(), run_token_for(invocation_id).encode()) else None


def account_for_key(key: str) -> ServiceAccount | None:
    if not key or not key.startswith(KEY_PREFIX):
        return None
    account = ServiceAccount.objects.filter(key_hash=sha256_hex(key), revoked_at__isnull=True).first()
    if account is None or not hmac.compare_digest(account.key_hash, sha256_hex(key)):
        return None
    return account
