"""The MCP gateway (`manage.py mcp_gateway`) between the official `mcp` client and an upstream server
written with the official SDK (tests/mcp_upstream.py), all real processes on the test database: each
decision reaches the client as the protocol says, and the upstream runs only what a person allowed."""

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
import httpx2
import pytest
import yaml
from django.db import connections
from django.utils import timezone
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import ElicitResult

from holds import services
from holds.auth import SYSTEM, actor_for_user
from holds.models import Capability, Hold
from tests import aio, factories
from tests.processes import VENV_BIN, Processes, free_port, service_env, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_redis]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, django_db_setup, django_db_blocker):
    root = tmp_path_factory.mktemp("gateway")
    processes = Processes(root)
    log = root / "upstream-calls.jsonl"
    log.touch()
    upstream_port, port = free_port(), free_port()
    processes.start("upstream", [sys.executable, "tests/mcp_upstream.py", str(upstream_port), str(log)])
    config = root / "agentos.yaml"
    gateway_section = {
        "capability": "mcp_gateway",
        "upstreams": {"files": f"http://127.0.0.1:{upstream_port}/mcp"},
    }
    config.write_text(yaml.safe_dump({"capabilities": {}, "mcp": {"gateway": gateway_section}}))
    with django_db_blocker.unblock():
        env = service_env(redis_url=processes.redis(free_port()))
        processes.start(
            "gateway",
            [str(VENV_BIN / "python"), "manage.py", "mcp_gateway", "--config", str(config), "--port", str(port)],
            env,
        )
    url = f"http://127.0.0.1:{port}/mcp"
    wait_until(lambda: _answers(url), 30, "the gateway")
    yield url, log
    processes.stop_all()
    connections.close_all()


def _answers(url: str) -> bool:
    try:
        return httpx.post(url, json={}).status_code == 401
    except httpx.HTTPError:
        return False


# The gateway's policy is its capability's rules (docs/rules.md); the tool's annotations are hints in
# run.input.annotations. A call no rule decides waits for a person.
RULES = [
    {"id": "reads", "when": "run.input.annotations.readOnlyHint == true", "then": "approve"},
    {
        "id": "etc",
        "when": 'run.input.tool == "delete_file" && item.data.path.startsWith("/etc/")',
        "then": "reject",
        "comment": "Never under /etc.",
    },
    {"id": "destructive", "when": "run.input.annotations.destructiveHint == true", "then": "ask"},
    {
        "id": "askers",
        "when": 'run.input.tool in ["book_table", "order", "ship", "connect_calendar"]',
        "then": "approve",
    },
]


@pytest.fixture
def setup(gateway):
    capability = factories.capability(name="mcp_gateway", endpoint="http://127.0.0.1:9")
    services.rules_save(capability=capability, rules=RULES, actor=SYSTEM)
    key = factories.account("agent", role="member")[1]
    reviewer = actor_for_user(factories.person("rev", role="member"))
    url, log = gateway
    log.write_text("")
    return url, key, reviewer, log


async def _session(url, key, work, mode="auto", elicitation_callback=None):
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=None))
    transport = streamable_http_client(url, http_client=http)
    async with http, Client(transport, mode=mode, elicitation_callback=elicitation_callback) as client:
        try:
            return await work(client)
        except MCPError as exc:  # inside the client's task group it would come out as an ExceptionGroup
            return exc


def call(url, key, tool, arguments, mode="auto", meta=None):
    """One tools/call on a session of its own (so a repeat is also a new session)."""
    return aio.run(_session(url, key, lambda c: c.call_tool(tool, arguments, meta=meta), mode))


def soon(fn, *args):
    """fn(*args), which must answer within 30 s (a call that waits on a new hold fails the test instead
    of hanging it: the thread is left to end with the gateway's process)."""
    pool = ThreadPoolExecutor(1)
    try:
        return pool.submit(fn, *args).result(30)
    finally:
        pool.shutdown(wait=False)


def text(result) -> str:
    assert not isinstance(result, MCPError), result
    return result.content[0].text


def ran(log) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def pending(what: str = "the hold") -> Hold:
    """The pending hold, once the gateway has asked it."""
    return wait_until(lambda: Hold.objects.filter(status="pending").first(), 30, what)


def decide(reviewer, action, **extra) -> Hold:
    hold = pending()
    item = hold.items.get()
    body = {"items": [{"id": item.item_id, "action": action, **extra}]}
    services.hold_decide(hold_id=hold.pk, actor=reviewer, body=body)
    return hold


def by_rule() -> list[tuple[str, str]]:
    """(status, decided_by) of every hold: what the rules decided without a person."""
    return list(Hold.objects.order_by("pk").values_list("status", "decided_by"))


def test_tools_list_passes_through(setup):
    url, key, _, log = setup
    tools = aio.run(_session(url, key, lambda c: c.list_tools())).tools
    by_name = {t.name: t for t in tools}
    assert set(by_name) == {"delete_file", "read_file", "book_table", "order", "ship", "connect_calendar"}
    assert by_name["delete_file"].annotations.destructive_hint is True
    assert by_name["delete_file"].description == "Delete a file."
    assert ran(log) == [] and Hold.objects.count() == 0


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_capabilitys_rules_decide_which_calls_wait_for_a_person(setup, mode):
    url, key, reviewer, log = setup
    # A rule that approves (here: on the readOnlyHint) lets the call through at once: no person.
    assert text(call(url, key, "read_file", {"path": "a.txt"}, mode)) == "contents of a.txt"
    # A rule that rejects answers at once as a person's reject does: a tool error (isError) with the
    # rule's comment, and the upstream is never called.
    refused = call(url, key, "delete_file", {"path": "/etc/passwd"}, mode)
    assert refused.is_error and text(refused) == "Rejected by rule etc v1: Never under /etc."
    assert by_rule() == [("decided", "rule reads v1"), ("decided", "rule etc v1")]
    assert ran(log) == [{"tool": "read_file", "path": "a.txt"}]
    # A rule on destructiveHint sends the call to people: it waits for a hold.
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(call, url, key, "delete_file", {"path": "/srv/a"}, mode)
        hold = decide(reviewer, "approve")
        assert text(waiting.result(30)) == "deleted /srv/a"
    hold.refresh_from_db()
    assert hold.decided_by == "rev" and ran(log)[-1] == {"tool": "delete_file", "path": "/srv/a"}


def test_a_standing_grant_lets_a_call_through_without_a_person(setup):
    url, key, reviewer, log = setup
    # Grants apply after the rules, to what no rule decided (a `then: ask` rule leaves it to people).
    capability = Capability.objects.get(name="mcp_gateway")
    services.rules_save(capability=capability, rules=RULES[:2], actor=SYSTEM)
    grant = services.grant_create(
        capability=capability,
        when='item.title == "delete_file" && item.data.path.startsWith("/tmp/")',
        expires_at=timezone.now() + timedelta(days=1),
        actor=reviewer,
    )
    assert text(call(url, key, "delete_file", {"path": "/tmp/scratch"})) == "deleted /tmp/scratch"
    assert by_rule() == [("decided", f"grant {grant.public_id}")]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_destructive_call_waits_for_a_person(setup, mode):
    url, key, reviewer, log = setup
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(call, url, key, "delete_file", {"path": "/srv/a"}, mode)
        hold = decide(reviewer, "approve")
        assert text(waiting.result(30)) == "deleted /srv/a"
        (item,) = hold.items.all()
        assert (item.title, item.data) == ("delete_file", {"path": "/srv/a"})
        assert hold.run.input["annotations"]["destructiveHint"] is True  # readable by rules, as a hint

        waiting = pool.submit(call, url, key, "delete_file", {"path": "/srv/b"}, mode)
        decide(reviewer, "edit", data={"path": "/tmp/b"})
        assert text(waiting.result(30)) == "deleted /tmp/b"

        waiting = pool.submit(call, url, key, "delete_file", {"path": "/srv/c"}, mode)
        decide(reviewer, "reject", comment="keep it")
        result = waiting.result(30)
        assert result.is_error and text(result) == "Rejected by rev: keep it"

        waiting = pool.submit(call, url, key, "delete_file", {"path": "/srv/d"}, mode)
        hold = pending()
        factories.past_due(hold.pk)
        services.holds_expire_due()
        result = waiting.result(30)
        assert result.is_error and "expired" in text(result)
    # The upstream ran exactly what a person allowed, once each.
    assert ran(log) == [{"tool": "delete_file", "path": "/srv/a"}, {"tool": "delete_file", "path": "/tmp/b"}]


def test_a_form_elicitation_is_a_hold_with_its_schema(setup):
    url, key, reviewer, log = setup
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(call, url, key, "book_table", {"restaurant": "Chez Panisse"})
        hold = pending("the elicitation's hold")
        (item,) = hold.items.all()
        assert item.schema["properties"].keys() == {"guests", "date", "terrace"}
        assert item.data == {"terrace": False}  # the defaults; approve needs every required value
        assert item.effective_actions(hold.actions) == ["edit", "reject"]
        decide(reviewer, "edit", data={"guests": 4, "date": "2026-12-24", "terrace": True})
        assert text(waiting.result(30)) == "booked Chez Panisse for 4 on 2026-12-24"

        waiting = pool.submit(call, url, key, "book_table", {"restaurant": "Noma"})
        decide(reviewer, "reject")
        assert text(waiting.result(30)) == "not booked: decline"

        waiting = pool.submit(call, url, key, "book_table", {"restaurant": "Per Se"})
        hold = pending()
        factories.past_due(hold.pk)
        services.holds_expire_due()
        assert text(waiting.result(30)) == "not booked: cancel"
    assert [r.get("action", "accept") for r in ran(log)] == ["accept", "decline", "cancel"]
    assert ran(log)[0] == {
        "tool": "book_table",
        "restaurant": "Chez Panisse",
        "guests": 4,
        "date": "2026-12-24",
        "terrace": True,
    }


def test_approve_on_a_form_elicitation_accepts_with_the_data_as_asked(setup):
    url, key, reviewer, log = setup
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(call, url, key, "order", {"item": "lamp"})
        hold = pending("the elicitation's hold")
        (item,) = hold.items.all()
        # Every field has a default, so the data as asked is complete and approve is offered.
        assert item.data == {"quantity": 1, "gift_wrap": False}
        assert item.effective_actions(hold.actions) == ["approve", "edit", "reject"]
        decide(reviewer, "approve")
        assert text(waiting.result(30)) == "ordered 1 lamp"
    assert ran(log) == [{"tool": "order", "item": "lamp", "quantity": 1, "gift_wrap": False}]


def test_a_nested_schema_is_declined_with_a_message_and_no_hold(setup):
    url, key, _, log = setup
    assert text(call(url, key, "ship", {"item": "lamp"})) == "not shipped: decline"
    (shipped,) = ran(log)
    assert "not a string, number, integer or boolean" in shipped["meta"]["io.reviewqueue/message"]
    assert by_rule() == [("decided", "rule askers v1")]  # the call's; the elicitation asked no one


SIGN_IN = {
    "mode": "url",
    "message": "Sign in to your calendar provider to let me read your events.",
    "url": "https://calendar.example/oauth/authorize?client_id=upstream&state=st-42",
    "elicitationId": "calendar-sign-in-42",
}


def test_a_url_elicitation_reaches_a_client_that_declared_url_mode_untouched(setup):
    url, key, _, log = setup
    received = []

    async def on_elicit(context, params) -> ElicitResult:
        received.append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        return ElicitResult(action="accept")

    def connect(c):
        return c.call_tool("connect_calendar", {"account": "ana@example.com"})

    # The official client declares `elicitation: {form: {}, url: {}}` once it has a callback; URL mode
    # needs a push to the client, so a connection with a back-channel (2025-11-25).
    result = aio.run(_session(url, key, connect, "legacy", on_elicit))
    assert text(result) == "calendar ana@example.com: accept"
    assert received == [SIGN_IN]  # exactly as the upstream sent it
    assert ran(log) == [{"tool": "connect_calendar", "account": "ana@example.com", "action": "accept"}]
    assert by_rule() == [("decided", "rule askers v1")]  # the call's; the elicitation asked no one


def test_a_url_elicitation_to_a_client_without_url_mode_is_the_protocols_error(setup):
    url, key, _, log = setup
    # No elicitation callback: the official client declares no elicitation capability at all.
    result = call(url, key, "connect_calendar", {"account": "ana@example.com"}, "legacy")
    assert text(result) == "calendar ana@example.com: not connected (-32602)"
    # The spec's answer to a mode the client did not declare: -32602 Invalid params, to the upstream.
    error = {"code": -32602, "message": "the gateway's client did not declare URL-mode elicitation"}
    assert ran(log) == [{"tool": "connect_calendar", "account": "ana@example.com", "error": error}]
    assert by_rule() == [("decided", "rule askers v1")]


def test_a_retry_of_one_call_is_one_hold_and_one_answer_on_any_session(setup):
    """MCP has no retry identity (a JSON-RPC id is per session): the same tool and arguments from the
    same key are one call while it is open and for RQ_MCP_RETRY_WINDOW after it settled."""
    url, key, reviewer, log = setup
    arguments = {"path": "/srv/r"}
    with ThreadPoolExecutor(3) as pool:
        # Three attempts, each on a session (and a JSON-RPC id) of its own, as a client's retries are.
        attempts = [pool.submit(call, url, key, "delete_file", arguments) for _ in range(3)]
        wait_until(lambda: Hold.objects.exists(), 30, "the hold")
        time.sleep(2)  # the other attempts arrive meanwhile
        # Every pending hold is approved (one, unless retries made more), so that no attempt waits on.
        deadline = time.monotonic() + 30
        while not all(a.done() for a in attempts) and time.monotonic() < deadline:
            for hold in Hold.objects.filter(status="pending"):
                body = {"items": [{"id": "call", "action": "approve"}]}
                services.hold_decide(hold_id=hold.pk, actor=reviewer, body=body)
            time.sleep(0.2)
        answers = {text(a.result(30)) for a in attempts}
    later = soon(call, url, key, "delete_file", arguments)  # an answer lost on the way back: asked again
    assert answers == {text(later)} == {"deleted /srv/r"}
    assert Hold.objects.count() == 1 and ran(log) == [{"tool": "delete_file", **arguments}]
    # Past the window the same tool and arguments are a new call, which a person decides again.
    Hold.objects.update(decided_at=timezone.now() - timedelta(seconds=301))
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(call, url, key, "delete_file", arguments)
        wait_until(lambda: Hold.objects.filter(status="pending").exists(), 30, "a new hold")
        decide(reviewer, "reject", comment="once is enough")
        assert text(waiting.result(30)) == "Rejected by rev: once is enough"
    assert Hold.objects.count() == 2 and len(ran(log)) == 1


def test_a_client_key_in_meta_names_the_call(setup):
    url, key, reviewer, log = setup
    meta = {"io.reviewqueue/idempotencyKey": "delete-b-1"}
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(call, url, key, "delete_file", {"path": "/srv/b"}, "auto", meta)
        wait_until(lambda: Hold.objects.filter(status="pending").exists(), 30, "the hold")
        # The same call again on a new session, and another (same arguments, its own key): a second hold.
        retry = pool.submit(call, url, key, "delete_file", {"path": "/srv/b"}, "legacy", meta)
        other = {"io.reviewqueue/idempotencyKey": "delete-b-2"}
        with ThreadPoolExecutor(1) as more:
            second = more.submit(call, url, key, "delete_file", {"path": "/srv/b"}, "auto", other)
            wait_until(lambda: Hold.objects.filter(status="pending").count() == 2, 30, "the second call's hold")
            for hold in Hold.objects.filter(status="pending"):
                body = {"items": [{"id": "call", "action": "approve"}]}
                services.hold_decide(hold_id=hold.pk, actor=reviewer, body=body)
            assert text(second.result(30)) == "deleted /srv/b"
        assert text(first.result(30)) == text(retry.result(30)) == "deleted /srv/b"
    # Long after, the first key still names the first call: its answer, no new hold, no second delete.
    Hold.objects.update(decided_at=timezone.now() - timedelta(days=1))
    assert text(call(url, key, "delete_file", {"path": "/srv/b"}, "auto", meta)) == "deleted /srv/b"
    assert Hold.objects.count() == 2 and len(ran(log)) == 2
    # A key with other arguments is the protocol's error, never a hold.
    reused = call(url, key, "delete_file", {"path": "/srv/c"}, "auto", meta)
    assert isinstance(reused, MCPError) and reused.error.code == -32602
    bad = call(url, key, "delete_file", {"path": "/srv/c"}, "auto", {"io.reviewqueue/idempotencyKey": 7})
    assert isinstance(bad, MCPError) and bad.error.code == -32602
    assert Hold.objects.count() == 2


def post(url, body: bytes, authorization: str | None):
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if authorization is not None:
        headers["authorization"] = authorization
    return httpx.post(url, content=body, headers=headers, timeout=30)


def test_bad_input_is_the_protocols_error(setup):
    url, key, _, log = setup
    # No key, a wrong key, another scheme: 401 with a JSON-RPC error, before any MCP message is read.
    listing = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    for wrong in (None, "Bearer rqk_wrong", f"Basic {key}"):
        response = post(url, listing, wrong)
        assert response.status_code == 401 and response.json()["error"]["code"] == -32001
    # A malformed request: JSON-RPC's parse error, or invalid request, with a 4xx (never a 500).
    response = post(url, b"{not json", f"Bearer {key}")
    assert 400 <= response.status_code < 500 and response.json()["error"]["code"] == -32700
    response = post(url, b'{"jsonrpc": "2.0", "id": 1, "params": 3}', f"Bearer {key}")
    assert 400 <= response.status_code < 500 and response.json()["error"]["code"] in (-32600, -32602)
    # An unknown tool and an input over the ask's limit: -32602 Invalid params, never a hold.
    unknown = call(url, key, "format_disk", {})
    assert isinstance(unknown, MCPError) and unknown.error.code == -32602
    too_big = call(url, key, "delete_file", {"path": "x" * (1024 * 1024 + 1)})
    assert isinstance(too_big, MCPError) and too_big.error.code == -32602 and "limit" in too_big.error.message
    assert Hold.objects.count() == 0 and ran(log) == []
