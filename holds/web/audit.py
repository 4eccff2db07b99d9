"""The audit log (admins only): filter by hold, run, actor, kind and time; export the same as CSV.

Read-only by construction: nothing here writes, and the table itself refuses UPDATE and DELETE.
Pages are keyset-paginated on the id (newest first), so a page costs the same at any size; the
hold, run, kind and time filters each walk an index of their own.
"""

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from django.contrib.auth.decorators import login_required
from django.http import HttpResponseBadRequest, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET

from .. import spreadsheet
from ..auth import actor_for_user
from ..ids import HOLD, RUN, parse_public_id, public_id
from ..models import AuditEvent, AuditKind, DeliveryAttempt, Notification
from ..paging import decode_cursor, encode_cursor, read_page
from ..policy import may_administer
from ..words import DeliveryResult
from .audit_words import what
from .common import forbid


@dataclass
class Filters:
    hold: int | None = None
    run: int | None = None
    actor: str = ""
    kind: str = ""
    since: datetime | None = None
    until: datetime | None = None
    errors: list | None = None

    def query(self) -> dict:
        """The filters as they were typed, for links that keep them."""
        values = {
            "hold": public_id(HOLD, self.hold) if self.hold else "",
            "run": public_id(RUN, self.run) if self.run else "",
            "actor": self.actor,
            "kind": self.kind,
            "since": self.since.strftime("%Y-%m-%dT%H:%M") if self.since else "",
            "until": self.until.strftime("%Y-%m-%dT%H:%M") if self.until else "",
        }
        return {k: v for k, v in values.items() if v}


def _ref(text: str, prefix: str) -> tuple[int | None, bool]:
    """A hold or run filter: `h_7`, or the bare number; (None, True) when empty, ok False when bad."""
    text = text.strip()
    if not text:
        return None, True
    pk = parse_public_id(text if text.startswith(prefix + "_") else f"{prefix}_{text}", prefix)
    return pk, pk is not None


def _moment(text: str) -> tuple[datetime | None, bool]:
    text = text.strip()
    if not text:
        return None, True
    for fmt in ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC), True
        except ValueError:
            continue
    return None, False


def parse_filters(params) -> Filters:
    errors = []
    hold, ok = _ref(params.get("hold", ""), HOLD)
    if not ok:
        errors.append("Hold: an id like h_12.")
    run, ok = _ref(params.get("run", ""), RUN)
    if not ok:
        errors.append("Run: an id like r_5.")
    since, ok = _moment(params.get("since", ""))
    if not ok:
        errors.append("From: a date and time like 2026-05-01T09:00 (UTC).")
    until, ok = _moment(params.get("until", ""))
    if not ok:
        errors.append("To: a date and time like 2026-05-01T17:00 (UTC).")
    return Filters(
        hold=hold,
        run=run,
        actor=params.get("actor", "").strip()[:200],
        kind=params.get("kind", "").strip()[:50],
        since=since,
        until=until,
        errors=errors,
    )


def filtered(filters: Filters):
    events = AuditEvent.objects.order_by("-id")
    if filters.hold is not None:
        events = events.filter(hold_id_ref=filters.hold)
    if filters.run is not None:
        events = events.filter(run_id_ref=filters.run)
    if filters.actor:
        events = events.filter(actor=filters.actor)
    if filters.kind:
        # "hold." shows every hold event (the kinds listed: kind has no index for LIKE); anything else is
        # one kind exactly.
        events = (
            events.filter(kind__in=[k for k in AuditKind.values if k.startswith(filters.kind)])
            if filters.kind.endswith(".")
            else events.filter(kind=filters.kind)
        )
    if filters.since:
        events = events.filter(at__gte=filters.since)
    if filters.until:
        events = events.filter(at__lt=filters.until)
    return events


def _admin(request):
    actor = actor_for_user(request.user)
    forbid(may_administer(actor, "read the audit log"))
    return actor


def data_text(data) -> str:
    return json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))


@dataclass
class Step:
    at: datetime
    word: str  # the timeline's verb: asked, seen, claimed, extended, reminded, decided, delivered…
    text: str
    actor: str = ""


# A hold's own events as the timeline names them; other kinds of the hold show their label.
WORDS = {
    AuditKind.HOLD_ASKED: "asked",
    AuditKind.HOLD_SEEN: "seen",
    AuditKind.HOLD_CLAIMED: "claimed",
    AuditKind.HOLD_RELEASED: "released",
    AuditKind.HOLD_EXTENDED: "extended",
    AuditKind.HOLD_ESCALATED: "reminded",
    AuditKind.HOLD_APPROVED: "approved",
    AuditKind.HOLD_DECIDED: "decided",
    AuditKind.HOLD_DECIDED_BY_RULE: "decided",
    AuditKind.GRANT_USED: "decided",
    AuditKind.HOLD_EXPIRED: "expired",
    AuditKind.RUN_HELD: "held",
}
TIMELINE_LIMIT = 500  # events of one hold: people's actions and a few per step; a bound all the same


def timeline(hold_id: int) -> list[Step]:
    """What happened to one hold, oldest first: its audit events (by their hold index), the
    notifications sent about it (asked, reminder; by the hold's unique index) and the delivery
    attempts of its resume (by the one-resume-per-hold index). Three queries, whatever the log's size.
    A person's second "seen" (a lost cache entry) is left out; reminders re-armed by an extension
    were deleted with it, so only the current window's reminder shows."""
    steps, seen = [], set()
    events = AuditEvent.objects.filter(hold_id_ref=hold_id).order_by("id")[:TIMELINE_LIMIT]
    for event in events:
        if event.kind == AuditKind.HOLD_SEEN:
            if event.actor in seen:
                continue
            seen.add(event.actor)
        word = WORDS.get(event.kind) or (AuditKind(event.kind).label if event.kind in AuditKind.values else event.kind)
        steps.append(Step(event.at, word, what(event), event.actor))
    sent = Notification.objects.filter(hold_id=hold_id, sent_at__isnull=False).order_by("sent_at")
    for note in sent.only("kind", "channel", "sent_at"):
        reminder = note.kind == Notification.Kind.REMINDER
        text = ("Reminder sent by " if reminder else "Reviewers told by ") + note.get_channel_display()
        steps.append(Step(note.sent_at, "reminded" if reminder else "notified", text))
    attempts = DeliveryAttempt.objects.filter(invocation__hold_id=hold_id).order_by("number")
    for attempt in attempts.only("number", "started_at", "status_code", "outcome", "error"):
        answered = attempt.outcome == DeliveryResult.ANSWERED
        text = f"Decision sent to the agent, attempt {attempt.number}: " + (
            "the agent took it" if answered else attempt.outcome
        )
        text += f" (HTTP {attempt.status_code})" if attempt.status_code else ""
        text += f", {attempt.error[:80]}" if attempt.error and not answered else ""
        steps.append(Step(attempt.started_at, "delivered" if answered else "delivery tried", text))
    return sorted(steps, key=lambda s: s.at)


@require_GET
@login_required
def audit(request):
    actor = _admin(request)
    filters = parse_filters(request.GET)
    after = decode_cursor(request.GET.get("cursor", ""), 1)
    events = filtered(filters)
    if after:
        events = events.filter(id__lt=after[0])
    rows, more = read_page(events) if not filters.errors else ([], False)
    query = filters.query()
    context = {
        "events": [{"event": e, "what": what(e), "data": data_text(e.data)} for e in rows],
        # Filtered to one hold (its first page): what happened to it, oldest first, above the log.
        "timeline": timeline(filters.hold) if filters.hold is not None and not after and not filters.errors else None,
        "hold_id": public_id(HOLD, filters.hold) if filters.hold is not None else "",
        "filters": filters,
        "query": query,
        "kinds": AuditKind.choices,
        "filtered": bool(query),
        "first_url": reverse("audit") + ("?" + urlencode(query) if query else ""),
        "next_url": reverse("audit") + "?" + urlencode({**query, "cursor": encode_cursor([rows[-1].pk])})
        if more
        else "",
        "later_page": bool(after),
        "csv_url": reverse("audit-csv") + ("?" + urlencode(query) if query else ""),
        "role": actor.role,
        "nav": "audit",
    }
    template = "holds/audit.html" + ("#audit-rows" if request.htmx else "")
    return render(request, template, context, status=422 if filters.errors else 200)


class _Echo:
    def write(self, value):
        return value


@require_GET
@login_required
def audit_csv(request):
    """Every matching event, streamed in chunks: an export of a million rows never sits in memory."""
    _admin(request)
    filters = parse_filters(request.GET)
    if filters.errors:
        return HttpResponseBadRequest("\n".join(filters.errors), content_type="text/plain; charset=utf-8")
    writer = spreadsheet.writer(_Echo())
    header = ["id", "at", "actor", "kind", "run", "hold", "invocation", "data"]

    def rows():
        yield writer.writerow(header)
        for event in filtered(filters).iterator(chunk_size=2000):
            yield writer.writerow(
                [
                    event.pk,
                    event.at.isoformat(),
                    spreadsheet.safe_cell(event.actor),
                    spreadsheet.safe_cell(event.kind),
                    public_id(RUN, event.run_id_ref) if event.run_id_ref else "",
                    public_id(HOLD, event.hold_id_ref) if event.hold_id_ref else "",
                    spreadsheet.safe_cell(event.invocation_id_ref),
                    spreadsheet.safe_cell(data_text(event.data)),
                ]
            )

    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    response = StreamingHttpResponse(rows(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.csv"'
    return response
