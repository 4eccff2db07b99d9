"""One page size and one cursor format for every keyset-paginated list: the queue, history, the audit
log and the API's lists. A cursor is the last row's sort key as a JSON list, base64url without padding:
opaque to people, and anything this server did not give out starts over (pages) or is a 422 (API)."""

import base64
import binascii
import json

PAGE_SIZE = 50


def encode_cursor(values: list) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


def decode_cursor(text: str, length: int) -> list | None:
    """The sort key a cursor of `length` values carries, or None for anything else."""
    if not text or len(text) > 1000:
        return None
    try:
        values = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, UnicodeDecodeError, binascii.Error):
        return None
    if not isinstance(values, list) or len(values) != length or not isinstance(values[-1], int):
        return None
    return values


def read_page(rows) -> tuple[list, bool]:
    """One page of a sorted queryset (PAGE_SIZE + 1 rows read), and whether another one follows."""
    found = list(rows[: PAGE_SIZE + 1])
    return found[:PAGE_SIZE], len(found) > PAGE_SIZE
