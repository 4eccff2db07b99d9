"""agentos: the agent side of Review Queue. Ask a person, suspend, resume with the decision."""

from .errors import (
    AgentOSError,
    APIConnectionError,
    ApiError,
    APITimeoutError,
    AskedForHuman,
    AskInvalid,
    AuthenticationError,
    BadRequest,
    ConflictError,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RateLimited,
    ServerError,
    Suspend,
    UnprocessableEntity,
)
from .invocation import Invocation
from .receipts import ReceiptError, verify_receipt
from .resume import DecidedItem, Eval, RecordedHold, Resume
from .server import Server, run_handler, serve
from .signing import SignatureError, sign, verify

__all__ = [
    "APIConnectionError",
    "APITimeoutError",
    "AgentOSError",
    "ApiError",
    "AskInvalid",
    "AuthenticationError",
    "BadRequest",
    "ConflictError",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "RateLimited",
    "ServerError",
    "UnprocessableEntity",
    "AskedForHuman",
    "DecidedItem",
    "Eval",
    "Invocation",
    "RecordedHold",
    "ReceiptError",
    "Resume",
    "Server",
    "SignatureError",
    "Suspend",
    "run_handler",
    "verify_receipt",
    "serve",
    "sign",
    "verify",
]
