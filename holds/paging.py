"""One page size and one cursor format for every keyset-paginated list: the queue, history, the audit
log and the API's lists. A cursor is the last row's sort key as a JSON list, base64url without padding:
opaque to people; anything this server did not give out is a 400 (pages) or a 422 (API)."""

import base64
import binascii
import json
from datetime import datetime

from django.utils.dateparse import parse_datetime

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


class BadCursor(ValueError):
    """A page's cursor that this server did not give out (a crafted or damaged link): 400."""


def _typed(value, kind: str):
    if kind.endswith("?") and value is None:
        return None
    kind = kind.rstrip("?")
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63:
        return value
    if kind == "when" and isinstance(value, str) and len(value) <= 40:
        try:
            when = parse_datetime(value)
        except ValueError:  # the shape of a date, but no such day or hour
            when = None
        if isinstance(when, datetime) and when.tzinfo is not None:
            return when
    if kind == "none" and value is None:
        return None
    raise BadCursor(f"not a {kind}")


def read_cursor(text: str, kinds: tuple[str, ...]) -> list | None:
    """A page cursor's values, each of its kind ("int", "when" (an aware datetime), "none"; "?" allows
    null): None for no cursor (the first page); BadCursor for anything this server did not give out."""
    if not text:
        return None
    values = decode_cursor(text, len(kinds))
    if values is None:
        raise BadCursor("not a cursor of this list")
    return [_typed(value, kind) for value, kind in zip(values, kinds, strict=True)]


def read_page(rows) -> tuple[list, bool]:
    """One page of a sorted queryset (PAGE_SIZE + 1 rows read), and whether another one follows."""
    found = list(rows[: PAGE_SIZE + 1])
    return found[:PAGE_SIZE], len(found) > PAGE_SIZE
