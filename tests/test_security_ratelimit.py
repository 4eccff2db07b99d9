"""Rate limits on ask (per run token) and decision (per key or person): 429 with Retry-After."""

import pytest
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured

from holds import ratelimit
from holds.models import Hold
from tests import factories

pytestmark = pytest.mark.django_db
DECIDE = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}


@pytest.fixture(autouse=True)
def _fresh_limits(monkeypatch):
    """An empty cache, and a clock stopped 10 s into a window: no window turns over mid-test."""
    cache.clear()
    monkeypatch.setattr(ratelimit, "clock", lambda: 1_800_000_010.0)
    yield
    cache.clear()


def live_token(cap):
    run = factories.start_run(cap)
    return run, factories.deliver_now(run)[1]


def assert_limited(response, window: int):
    assert response.status_code == 429, response.content
    body = response.json()
    assert body["error"] == "rate_limited" and body["message"]
    # The clock stands 10 s into the window: the rest of it is the wait.
    assert int(response["Retry-After"]) == window - 10 and body["retry_after"] == window - 10


def test_it_limits_asks_per_run_token_with_429_and_retry_after(api, cap, settings):
    settings.RQ_RATE_ASK = "2/m"
    run, token = live_token(cap)
    assert api.post("/v0/holds", factories.ask_body(), token=token).status_code == 201
    assert api.post("/v0/holds", factories.ask_body(), token=token).status_code == 409
    assert_limited(api.post("/v0/holds", factories.ask_body(), token=token), 60)
    assert Hold.objects.filter(run=run).count() == 1
    # Another run's token has its own budget.
    _, other = live_token(cap)
    assert api.post("/v0/holds", factories.ask_body(), token=other).status_code == 201


def test_it_limits_decisions_per_key_with_429_and_retry_after(api, cap, settings, member_key, admin_key):
    settings.RQ_RATE_DECISION = "2/30s"
    holds = [factories.held_hold(cap)[1] for _ in range(4)]
    assert api.post(f"/v0/holds/{holds[0].public_id}/decision", DECIDE, key=member_key).status_code == 200
    assert api.post(f"/v0/holds/{holds[0].public_id}/decision", DECIDE, key=member_key).status_code == 409
    assert_limited(api.post(f"/v0/holds/{holds[1].public_id}/decision", DECIDE, key=member_key), 30)
    assert Hold.objects.get(pk=holds[1].pk).status == "pending"
    assert api.post(f"/v0/holds/{holds[2].public_id}/decision", DECIDE, key=admin_key).status_code == 200


def test_it_limits_session_decisions_per_person(client, cap, member, settings):
    settings.RQ_RATE_DECISION = "1/m"
    holds = [factories.held_hold(cap)[1] for _ in range(2)]
    client.force_login(member)
    for hold, status in ((holds[0], 200), (holds[1], 429)):
        response = client.post(f"/v0/holds/{hold.public_id}/decision", DECIDE, content_type="application/json")
        assert response.status_code == status


def test_it_checks_the_token_before_the_limit(api, cap, settings):
    settings.RQ_RATE_ASK = "0/m"
    assert api.post("/v0/holds", factories.ask_body(), token="tok_inv_nope.x").status_code == 401


def test_it_turns_a_limit_off(api, cap, settings):
    settings.RQ_RATE_ASK = "off"
    _, token = live_token(cap)
    statuses = {api.post("/v0/holds", factories.ask_body(), token=token).status_code for _ in range(5)}
    assert statuses == {201, 409}


def test_it_fails_open_when_the_cache_is_down(api, cap, settings, monkeypatch):
    settings.RQ_RATE_ASK = "0/m"

    def down(*args, **kwargs):
        raise ConnectionError("redis is down")

    monkeypatch.setattr(cache, "add", down)
    monkeypatch.setattr(cache, "get", down)
    _, token = live_token(cap)
    assert api.post("/v0/holds", factories.ask_body(), token=token).status_code == 201


@pytest.mark.parametrize(
    "text, rate",
    [
        ("60/m", ratelimit.Rate(60, 60)),
        ("10/30s", ratelimit.Rate(10, 30)),
        ("20/5m", ratelimit.Rate(20, 300)),
        ("100/h", ratelimit.Rate(100, 3600)),
        ("5/120", ratelimit.Rate(5, 120)),
        ("off", None),
        ("", None),
    ],
)
def test_it_reads_rates(text, rate):
    assert ratelimit.parse_rate(text) == rate


@pytest.mark.parametrize("text", ["60", "x/m", "10/0s", "10/w", "-1/m"])
def test_it_fails_loudly_on_a_bad_rate(text):
    with pytest.raises(ImproperlyConfigured):
        ratelimit.parse_rate(text)


def test_it_never_puts_a_token_in_a_cache_key(cap, settings):
    settings.RQ_RATE_ASK = "5/m"
    ratelimit.hit("ask", "tok_inv_secret.mac")
    client = cache._cache
    # The raw keys: locmem's dict, or Redis's (REDIS_URL set).
    keys = list(client.keys()) if hasattr(client, "keys") else [k.decode() for k in client.get_client().keys("*")]
    assert keys and not [k for k in keys if "secret" in k]


def test_it_allows_again_once_the_window_has_passed(monkeypatch, settings):
    settings.RQ_RATE_ASK = "2/m"
    assert [ratelimit.hit("ask", "token:a") for _ in range(3)] == [0, 0, 50]
    assert ratelimit.hit("ask", "token:b") == 0  # another token, its own count
    monkeypatch.setattr(ratelimit, "clock", lambda: 1_800_000_060.0)  # the next window
    assert ratelimit.hit("ask", "token:a") == 0


def test_browser_decisions_share_the_persons_decision_budget(client, cap, member, settings):
    from tests.test_view_hold import confirmed, review_post, url

    settings.RQ_RATE_DECISION = "1/m"
    first, second = factories.held_hold(cap)[1], factories.held_hold(cap)[1]
    client.force_login(member)
    for hold, status in ((first, 303), (second, 429)):
        look = review_post(client, hold, {"approve_all": "1"})
        response = client.post(url(hold, "/decision"), {"decision": confirmed(look), "fingerprint": hold.fingerprint})
        assert response.status_code == status
    assert "Too many decisions" in response.content.decode() and int(response["Retry-After"]) == 50
    assert Hold.objects.get(pk=second.pk).status == "pending"


def test_the_openapi_document_describes_the_429(api, cap, settings):
    from tests.test_api_openapi import check

    settings.RQ_RATE_ASK = "0/m"
    _, token = live_token(cap)
    limited = api.post("/v0/holds", factories.ask_body(), token=token)
    assert limited.status_code == 429
    check(api.get("/v0/openapi.json").json(), "/v0/holds", "post", limited)
