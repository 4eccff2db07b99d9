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
    return re.findall(r'class="queue-link" id="open-\d+" href="[^"]+">([^<]*)</a>', response.content.decode())


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
    refresh = re.search(r'hx-get="([^"]+)"', page).group(1).replace("&amp;", "&")
    assert "capability=pay_invoices" in refresh and "q=acme" in refresh and "all=1" in refresh


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
