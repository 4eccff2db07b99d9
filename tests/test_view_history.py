"""History (/history): decided and expired holds, newest first, filterable, each linking to its outcome."""

import re

import pytest

from holds import services
from holds.auth import actor_for_user
from tests import factories

pytestmark = pytest.mark.django_db


def intents(response) -> list[str]:
    return re.findall(r'class="queue-link" href="[^"]+">([^<]*)</a>', response.content.decode())


def decide(hold, user):
    body = {"items": [{"id": f"INV-{i + 1}", "action": "approve"} for i in range(hold.item_count)]}
    services.hold_decide(hold_id=hold.pk, actor=actor_for_user(user), body=body)


@pytest.fixture
def history(cap, member):
    mail = factories.capability("send_emails")
    _, decided = factories.held_hold(cap, factories.ask_body(intent="Paid Acme"))
    decide(decided, member)
    _, expired = factories.held_hold(mail, factories.ask_body(intent="Mail expired"))
    factories.past_due(expired.pk)
    services.holds_expire_due()
    factories.held_hold(cap, factories.ask_body(intent="Still pending"))
    return decided, expired


def test_it_lists_decided_and_expired_holds_newest_first_and_not_pending_ones(client, member, history):
    client.force_login(member)
    response = client.get("/history")
    assert intents(response) == ["Mail expired", "Paid Acme"]
    body = response.content.decode()
    assert "mona" in body and 'status-expired">expired' in body and 'status-decided">decided' in body


def test_it_filters_by_outcome_capability_and_text(client, member, history):
    client.force_login(member)
    assert intents(client.get("/history?status=decided")) == ["Paid Acme"]
    assert intents(client.get("/history?status=expired")) == ["Mail expired"]
    assert intents(client.get("/history?capability=send_emails")) == ["Mail expired"]
    assert intents(client.get("/history?q=acme")) == ["Paid Acme"]
    assert "Nothing matches" in client.get("/history?q=zzz").content.decode()


def test_it_links_each_hold_to_its_page_with_the_decision(client, member, history):
    decided, expired = history
    client.force_login(member)
    assert f'href="/holds/{decided.public_id}"' in client.get("/history").content.decode()
    page = client.get(f"/holds/{decided.public_id}").content.decode()
    assert "Decided by <strong>mona</strong>" in page and 'class="badge action action-approve">Approve' in page
    page = client.get(f"/holds/{expired.public_id}").content.decode()
    assert "before anyone decided" in page


def test_it_pages_history_by_keyset(client, member, cap):
    for n in range(55):
        _, hold = factories.held_hold(cap, factories.ask_body(intent=f"H{n}"))
        decide(hold, member)
    client.force_login(member)
    first = client.get("/history")
    next_url = re.search(r'href="([^"]+)" rel="next"', first.content.decode()).group(1).replace("&amp;", "&")
    second = client.get(next_url)
    seen = intents(first) + intents(second)
    assert len(seen) == 55 and len(set(seen)) == 55 and seen[0] == "H54"
