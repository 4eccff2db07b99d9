"""Read-only queries of the reviewer's pages: the queue, history, one hold with what it needs.

Pages are keyset-paginated (a cursor holds the last row's sort key): no COUNT(*) and no OFFSET, so
a page costs the same with ten holds or ten thousand, and each query walks one partial index:
`hold_queue` / `hold_queue_by_capability` for the queue, `hold_history` for history.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F, Q, TextField, Value
from django.db.models.functions import Cast, Concat
from django.db.models.lookups import StartsWith
from django.utils import timezone

from .auth import Actor
from .ids import FILE, HOLD, parse_public_id
from .models import Capability, Hold, HoldItem, Invocation, RunFile
from .paging import PAGE_SIZE, encode_cursor, read_cursor, read_page
from .policy import decidable_holds, quorum_of
from .services.quorum import state as quorum_state

NEW_CAP = 99  # "99+ new": the new-holds probe reads at most this many ids + 1


@dataclass
class Page:
    rows: list
    next_cursor: str | None
    cursor: str  # the cursor this page was read after ("" for the first page)


# What a cursor of each list carries (paging.read_cursor): anything else is a crafted link, 400.
# The queue: when its first page was read, the last row's bucket, claimed, expires_at, created_at, pk.
QUEUE_CURSOR = ("when", "int", "int", "when?", "when", "int")
# History: the last row's decided_at, a place kept for a second key, its pk.
HISTORY_CURSOR = ("when", "none", "int")


def _queue_base(actor: Actor, capabilities: list[Capability], *, show_all: bool, capability: Capability | None):
    holds = Hold.objects.filter(status=Hold.Status.PENDING)
    if capability is not None:
        holds = holds.filter(capability=capability)
    if not show_all:
        holds = decidable_holds(actor, holds, capabilities)
    return holds


def _searched(holds, search: str):
    """Holds whose search text contains `search`, or, when it reads as a hold id or its start (`h_12`),
    whose id starts with it: `h_12` finds h_12, h_120, h_1200… as a person reading ids would expect.
    Both are row filters on the list's own index range, so a search adds no query and no join."""
    text = search.lower()
    found = Q(search_text__contains=text)
    if text.startswith(HOLD + "_") and text[len(HOLD) + 1 :].isdigit() and text.isascii():
        found |= Q(StartsWith(Concat(Value(HOLD + "_"), Cast("pk", TextField()), output_field=TextField()), text))
    return holds.filter(found)


# The queue's urgency buckets (SPEC "Settled"): under an hour left, under a day, later, never. Within
# a bucket unclaimed holds come first, then soonest expiry, then oldest.
BUCKETS = (timedelta(hours=1), timedelta(hours=24))


def _segments(now: datetime) -> list[tuple[int, int, Q]]:
    """(bucket, claimed, filter) in queue order; each is one range of the queue's partial index."""
    ranges = [
        Q(expires_at__lt=now + BUCKETS[0]),
        Q(expires_at__gte=now + BUCKETS[0], expires_at__lt=now + BUCKETS[1]),
        Q(expires_at__gte=now + BUCKETS[1]),
        Q(expires_at__isnull=True),
    ]
    claimed = Q(claimed_until__gt=now)
    unclaimed = Q(claimed_until__isnull=True) | Q(claimed_until__lte=now)
    return [(b, c, r & (claimed if c else unclaimed)) for b, r in enumerate(ranges) for c in (0, 1)]


def queue_page(
    actor: Actor,
    capabilities: list[Capability],
    *,
    show_all: bool = False,
    capability: Capability | None = None,
    search: str = "",
    cursor: str = "",
) -> Page:
    """Pending holds by urgency bucket, unclaimed before claimed, then soonest expiry, then oldest.

    One query: a UNION ALL of the eight (bucket, claimed) segments, each an ordered range of the
    queue's partial index cut at a page, merged and cut again. The cursor carries the moment the first
    page was read, so the buckets stay put while a person pages, and the last row's place in them.
    """
    holds = _queue_base(actor, capabilities, show_all=show_all, capability=capability)
    if search:
        holds = _searched(holds, search)
    after = read_cursor(cursor, QUEUE_CURSOR)
    now = after[0] if after else timezone.now()
    order = (F("expires_at").asc(nulls_last=True), "created_at", "pk")
    parts = []
    for bucket, claimed, where in _segments(now):
        part = holds.filter(where)
        if after:
            key = (after[1], after[2])
            if (bucket, claimed) < key:
                continue
            if (bucket, claimed) == key:
                expires, created, pk = after[3], after[4], after[5]
                tail = Q(created_at__gt=created) | Q(created_at=created, pk__gt=pk)
                part = part.filter(
                    tail if expires is None else Q(expires_at__gt=expires) | Q(expires_at=expires) & tail
                )
        part = part.annotate(queue_bucket=Value(bucket), queue_claimed=Value(claimed))
        parts.append(part.select_related("capability", "claimed_by").order_by(*order)[: PAGE_SIZE + 1])
    if not parts:
        return Page(rows=[], next_cursor=None, cursor=cursor)
    merged = parts[0].union(*parts[1:], all=True) if len(parts) > 1 else parts[0]
    if len(parts) > 1:
        merged = merged.order_by("queue_bucket", "queue_claimed", *order)
    rows, more = read_page(merged)
    next_cursor = None
    if more:
        last = rows[-1]
        next_cursor = encode_cursor(
            [
                now.isoformat(),
                last.queue_bucket,
                last.queue_claimed,
                last.expires_at.isoformat() if last.expires_at else None,
                last.created_at.isoformat(),
                last.pk,
            ]
        )
    return Page(rows=rows, next_cursor=next_cursor, cursor=cursor if after else "")


def queue_new_ids(
    actor: Actor,
    capabilities: list[Capability],
    *,
    show_all: bool,
    capability: Capability | None,
    search: str,
    seen: int,
) -> list[int]:
    """Ids of holds asked since the page was loaded (`seen` = the highest id then), at most NEW_CAP + 1.

    A bounded read on the primary key rather than a COUNT(*): "99+ new" is all a person needs.
    """
    holds = _queue_base(actor, capabilities, show_all=show_all, capability=capability).filter(pk__gt=seen)
    if search:
        holds = _searched(holds, search)
    return list(holds.order_by("pk").values_list("pk", flat=True)[: NEW_CAP + 1])


def latest_hold_id() -> int:
    return Hold.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


HISTORY_STATUSES = (Hold.Status.DECIDED, Hold.Status.EXPIRED)


def history_page(*, capability: Capability | None = None, status: str = "", search: str = "", cursor: str = "") -> Page:
    """Decided and expired holds, newest decision first."""
    statuses = [status] if status in HISTORY_STATUSES else list(HISTORY_STATUSES)
    holds = Hold.objects.filter(status__in=statuses)
    if capability is not None:
        holds = holds.filter(capability=capability)
    if search:
        holds = _searched(holds, search)
    after = read_cursor(cursor, HISTORY_CURSOR)
    if after:
        decided, pk = after[0], after[2]
        holds = holds.filter(Q(decided_at__lt=decided) | Q(decided_at=decided, pk__lt=pk))
    holds = holds.select_related("capability").order_by("-decided_at", "-pk")
    rows, more = read_page(holds)
    next_cursor = encode_cursor([rows[-1].decided_at.isoformat(), None, rows[-1].pk]) if more else None
    return Page(rows=rows, next_cursor=next_cursor, cursor=cursor if after else "")


def hold_for_page(pk: int) -> Hold | None:
    """One hold with everything its header shows, in one query."""
    return (
        Hold.objects.select_related(
            "capability", "run", "run__started_by_user", "run__started_by_account", "decided_by_user"
        )
        .filter(pk=pk)
        .first()
    )


def hold_quorum(hold: Hold) -> dict | None:
    """Who approved a hold that needs a quorum and how many are still needed (None: it needs none)."""
    quorum = quorum_of(hold)
    return quorum_state(hold, quorum) if quorum else None


def hold_items(hold: Hold) -> list[HoldItem]:
    return list(HoldItem.objects.filter(hold=hold).order_by("position"))


def hold_files(hold: Hold) -> list[RunFile]:
    """The hold's files of its own run, in the order the agent listed them."""
    wanted = [pk for pk in (parse_public_id(f, FILE) for f in hold.files or []) if pk is not None]
    if not wanted:
        return []
    found = {f.pk: f for f in RunFile.objects.filter(run_id=hold.run_id, pk__in=wanted)}
    return [found[pk] for pk in wanted if pk in found]


def hold_resume(hold: Hold) -> Invocation | None:
    return Invocation.objects.filter(hold=hold, kind=Invocation.Kind.RESUME).first()
