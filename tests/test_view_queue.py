"""The queue page (/): who sees what, in which order, filtered, paged by keyset, refreshed by HTMX."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from holds.auth import run_token_hash
from holds.models import Hold, Invocation, Run
from holds.services import gateway
from tests import factories

pytestmark = pytest.mark.django_db


def intents(response) -> list[str]:
    return re.findall(r'class="queue-link" id="open-\d+" href="[^"]+"[^>]*>([^<]*)</a>', response.content.decode())


def bulk_holds(cap, n: int, start: int = 0) -> None:
    """n pending holds written in bulk: the query-count test needs thousands, faster than the ask path."""
    runs = Run.objects.bulk_create(
        Run(capability=cap, version="1", endpoint=cap.endpoint, status="held", seq=1) for _ in range(n)
    )
    invocations = Invocation.objects.bulk_create(
        Invocation(
            id=f"inv_bulk{start + i}",
            run=run,
            kind="start",
            seq=1,
            status="answered",
            token_hash=run_token_hash(f"inv_bulk{start + i}"),
        )
        for i, run in enumerate(runs)
    )
    now = timezone.now()
    Hold.objects.bulk_create(
        Hold(
            run=run,
            invocation=inv,
            capability=cap,
            intent=f"Bulk {start + i}",
            actions=["approve"],
            item_count=1,
            search_text=f"bulk {start + i}",
            fingerprint="0" * 64,
            expires_at=now + timedelta(hours=1 + i % 50) if i % 3 else None,
        )
        for i, (run, inv) in enumerate(zip(runs, invocations, strict=True))
    )


def test_it_sends_strangers_to_sign_in(client):
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_it_labels_the_sign_in_form_as_the_spec_says(client):
    body = client.get("/login/").content.decode()
    assert ">Username</label>" in body and ">Password</label>" in body and ">Sign in</button>" in body


def test_it_lists_pending_holds_soonest_expiry_first_and_never_expiring_last(client, cap, member):
    no_expiry = factories.ask_body(intent="Never expires")
    del no_expiry["expires_in"]
    factories.held_hold(cap, no_expiry)
    factories.held_hold(cap, factories.ask_body(intent="In a day", expires_in=86400))
    factories.held_hold(cap, factories.ask_body(intent="In an hour", expires_in=3600))
    decided_run, decided = factories.held_hold(cap, factories.ask_body(intent="Decided already"))
    Hold.objects.filter(pk=decided.pk).update(status="decided")
    client.force_login(member)
    response = client.get("/")
    assert intents(response) == ["In an hour", "In a day", "Never expires"]
    body = response.content.decode()
    for column in ("Intent", "Capability", "Items", "Lowest confidence", "Age", "Time left"):
        assert f">{column}</th>" in body
    assert "0.68" in body and "conf-amber" in body


def test_it_shows_only_holds_the_person_may_decide_unless_all_pending_is_on(client, cap, viewer):
    factories.held_hold(cap, factories.ask_body(intent="Pay Acme"))
    client.force_login(viewer)
    response = client.get("/")
    assert intents(response) == []
    assert "Nothing for you to decide" in response.content.decode()
    assert intents(client.get("/?all=1")) == ["Pay Acme"]


def test_it_leaves_out_holds_of_capabilities_the_role_does_not_approve(client, member):
    admins_only = factories.capability("wire_money", approvers=["admin"])
    factories.held_hold(admins_only, factories.ask_body(intent="Wire 1M"))
    client.force_login(member)
    assert intents(client.get("/")) == []
    assert intents(client.get("/?all=1")) == ["Wire 1M"]


def test_it_filters_by_capability_and_searches_intent_titles_item_ids_and_run_id(client, cap, member):
    mail = factories.capability("send_emails")
    run, _ = factories.held_hold(cap, factories.ask_body(intent="Pay Acme"))
    factories.held_hold(mail, factories.ask_body(intent="Email Globex"))
    client.force_login(member)
    assert intents(client.get("/?capability=send_emails")) == ["Email Globex"]
    assert intents(client.get("/?q=ACME")) == ["Pay Acme"]
    assert sorted(intents(client.get("/?q=payee 2"))) == ["Email Globex", "Pay Acme"]
    assert intents(client.get(f"/?q={run.public_id}")) == ["Pay Acme"]
    response = client.get("/?q=nothing-like-this")
    assert intents(response) == [] and "No pending holds match" in response.content.decode()


def test_it_pages_by_keyset_without_losing_or_repeating_a_hold(client, cap, member):
    bulk_holds(cap, 130)
    client.force_login(member)
    seen, url = [], "/"
    for _ in range(5):
        response = client.get(url)
        seen += intents(response)
        match = re.search(r'href="([^"]+)" rel="next"', response.content.decode())
        if not match:
            break
        url = match.group(1).replace("&amp;", "&")
    assert len(seen) == 130 and len(set(seen)) == 130
    expected = list(Hold.objects.order_by(F_expires_nulls_last(), "created_at", "pk").values_list("intent", flat=True))
    assert seen == expected


def F_expires_nulls_last():  # noqa: N802
    from django.db.models import F

    return F("expires_at").asc(nulls_last=True)


def test_it_answers_htmx_with_the_rows_fragment_and_counts_new_holds(client, cap, member):
    factories.held_hold(cap, factories.ask_body(intent="Old one"))
    client.force_login(member)
    page = client.get("/").content.decode()
    seen = re.search(r"seen=(\d+)", page).group(1)
    factories.held_hold(cap, factories.ask_body(intent="New one"))
    fragment = client.get(f"/?seen={seen}", headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in fragment and fragment.lstrip().startswith('<div id="queue-rows"')
    assert "1 new" in fragment and "New one" in fragment
    assert 'hx-trigger="every 5s"' in fragment


def test_it_keeps_filters_in_the_refresh_url(client, cap, member):
    client.force_login(member)
    page = client.get("/?capability=pay_invoices&q=acme&all=1").content.decode()
    refresh = re.search(r'id="queue-rows" class="results" hx-get="([^"]+)"', page).group(1).replace("&amp;", "&")
    assert "capability=pay_invoices" in refresh and "q=acme" in refresh and "all=1" in refresh


def test_it_finds_a_hold_by_its_id_or_the_start_of_its_id(client, cap, member):
    holds = [factories.held_hold(cap, factories.ask_body(intent=f"Pay {n}"))[1] for n in range(3)]
    Hold.objects.filter(pk=holds[0].pk).update(intent="Pay first")
    client.force_login(member)
    assert intents(client.get(f"/?q={holds[1].public_id}")) == ["Pay 1"]
    assert intents(client.get(f"/?q={holds[2].public_id.upper()}")) == ["Pay 2"]
    # h_1 is the start of h_1, h_10…h_19, h_100…: each of those ids, whatever else matches.
    prefix = holds[0].public_id[:-1] or holds[0].public_id
    expected = {h.public_id for h in Hold.objects.filter(status="pending") if h.public_id.startswith(prefix)}
    body = client.get(f"/?q={prefix}").content.decode()
    assert expected and set(re.findall(r'href="/holds/(h_\d+)"', body)) == expected
    assert "h_" not in Hold.objects.get(pk=holds[0].pk).search_text, "found by id, not by its text"
    Hold.objects.filter(pk=holds[1].pk).update(status="decided", decided_at=timezone.now())
    history = client.get(f"/history?q={holds[1].public_id}").content.decode()
    assert set(re.findall(r'href="/holds/(h_\d+)"', history)) == {holds[1].public_id}


def test_it_marks_in_all_pending_the_holds_the_person_may_only_view(client, cap, member):
    admins_only = factories.capability("wire_money", approvers=["admin"])
    factories.held_hold(admins_only, factories.ask_body(intent="Wire 1M"))
    _, mine = factories.held_hold(cap, factories.ask_body(intent="Pay Acme"))
    client.force_login(member)
    body = client.get("/?all=1").content.decode()
    rows = dict(re.findall(r'<tr class="([^"]*)">\s*<td class="intent-cell">\s*<a [^>]*>([^<]*)</a>', body))
    rows = {intent: classes for classes, intent in rows.items()}
    assert "view-only" in rows["Wire 1M"] and "view-only" not in rows["Pay Acme"]
    assert body.count(">view only</span>") == 1
    # Read with the link by a screen reader: the label is the link's description.
    described = re.search(r'aria-describedby="(view-only-\d+)">Wire 1M</a>', body).group(1)
    assert f'id="{described}"' in body
    assert ">view only</span>" not in client.get("/").content.decode()


def test_it_applies_a_changed_capability_or_all_pending_at_once_and_apply_without_js(client, cap, member):
    client.force_login(member)
    body = client.get("/").content.decode()
    form = re.search(r'<form id="queue-filters" method="get" action="/"[^>]*>', body).group(0)
    assert 'hx-trigger="change from:#filter-capability, change from:#filter-all"' in form
    assert 'hx-target="#queue-rows"' in form and 'hx-push-url="true"' in form
    assert '<button type="submit" class="button">Apply</button>' in body
    history = client.get("/history").content.decode()
    assert 'hx-trigger="change from:#filter-capability, change from:#filter-status"' in history


@pytest.mark.parametrize("many", [10, 10_000])
def test_it_uses_the_same_number_of_queries_for_10_and_10000_holds(
    client, cap, member, django_assert_num_queries, many
):
    bulk_holds(cap, many)
    client.force_login(member)
    client.get("/")  # warm the session
    # session, user, membership, capabilities, the page, the newest id
    with django_assert_num_queries(6):
        response = client.get("/")
    assert len(intents(response)) == min(many, 50)
    with django_assert_num_queries(6):  # a refresh: the new-holds probe instead of the newest id
        client.get("/?seen=1", headers={"HX-Request": "true"})
    with django_assert_num_queries(6):  # all pending, searched by a hold id's start: still flat
        client.get("/?all=1&q=h_1")


def test_it_reads_the_queue_and_history_through_their_partial_indexes(cap, member):
    from django.db.models import F

    from holds import queries
    from holds.auth import actor_for_user
    from holds.models import Capability

    bulk_holds(cap, 3000)
    gateway.fetch("ANALYZE holds_hold")
    caps, actor = list(Capability.objects.all()), actor_for_user(member)
    order = (F("expires_at").asc(nulls_last=True), "created_at", "pk")
    every = queries._queue_base(actor, caps, show_all=True, capability=None).order_by(*order)[:51]
    one_capability = queries._queue_base(actor, caps, show_all=True, capability=cap).order_by(*order)[:51]
    history = Hold.objects.filter(status__in=["decided", "expired"]).order_by("-decided_at", "-pk")[:51]
    assert "Index Scan using hold_queue on" in every.explain()
    assert "Index Scan using hold_queue_by_capability" in one_capability.explain()
    assert "hold_history" in history.explain()
