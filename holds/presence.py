"""Who has a hold open right now: kept only in the cache, never in the database.

Each page view and each of the page's polls (every POLL_SECONDS) marks the person present on that
hold for SEEN_FOR; nobody looking costs nothing, and presence runs out on its own. The marks of one
hold are one cache entry (a small dict), so the queue reads a page of holds in one round trip. Two
people marking at the same moment may drop one mark until that person's next poll: presence is a hint.
"""

import time

from django.core.cache import cache

POLL_SECONDS = 15
SEEN_FOR = 2 * POLL_SECONDS + 5  # a missed poll does not make someone vanish


def _key(hold_id: int) -> str:
    return f"rq:presence:h_{hold_id}"


def _live(marks) -> dict:
    now = time.time()
    return {uid: (name, until) for uid, (name, until) in (marks or {}).items() if until > now}


def mark(hold_id: int, user) -> None:
    marks = _live(cache.get(_key(hold_id)))
    marks[str(user.pk)] = (user.get_username(), time.time() + SEEN_FOR)
    cache.set(_key(hold_id), marks, SEEN_FOR)


# How long a person's first look at a hold is remembered here; after that (or a cache loss) the
# service finds its "seen" row in the database instead.
FIRST_LOOK_FOR = 7 * 24 * 3600


def first_look(hold, user) -> bool:
    """True the first time this person is present on this hold (one atomic cache add). The key has
    the hold's creation time: a database recreated with the same ids (tests, a fresh install) starts unseen."""
    key = f"rq:seen:h_{hold.pk}:{hold.created_at.timestamp()}:{user.pk}"
    return cache.add(key, 1, FIRST_LOOK_FOR)


def others(hold_id: int, user) -> list[str]:
    """The names of the other people who have this hold open, sorted."""
    return sorted(name for uid, (name, _) in _live(cache.get(_key(hold_id))).items() if uid != str(user.pk))


def others_many(hold_ids: list[int], user) -> dict[int, list[str]]:
    """others() for a page of holds, in one cache round trip."""
    found = cache.get_many([_key(h) for h in hold_ids])
    return {
        h: sorted(name for uid, (name, _) in _live(found.get(_key(h))).items() if uid != str(user.pk)) for h in hold_ids
    }


def hold_context(hold, user, *, shown: bool) -> dict:
    """What the hold page's presence line shows; `shown`: the person may decide this open hold
    (only they see presence and claims). Marks the person present as a side effect."""
    if not shown:
        return {"presence_shown": False}
    from django.utils import timezone

    mark(hold.pk, user)
    live = hold.claimed_by_id is not None and hold.claimed_until is not None and hold.claimed_until > timezone.now()
    return {
        "presence_shown": True,
        "looking": others(hold.pk, user),
        "claimed_by": hold.claimed_by.get_username() if live and hold.claimed_by else "",
        "claimed_by_me": live and hold.claimed_by_id == user.pk,
        "claimed_until": hold.claimed_until if live else None,
        "poll_seconds": POLL_SECONDS,
    }
