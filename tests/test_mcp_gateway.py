"""The MCP gateway (`manage.py mcp_gateway`) between the official `mcp` client and an upstream server
written with the official SDK (tests/mcp_upstream.py), all real processes on the test database: each
decision reaches the client as the protocol says, and the upstream runs only what a person allowed."""

import json
import sys
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
from holds.auth import actor_for_user
from holds.models import Hold
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
        "hold_destructive": True,
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


@pytest.fixture
def setup(gateway):
    factories.capability(name="mcp_gateway", endpoint="http://127.0.0.1:9")
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


def call(url, key, tool, arguments, mode="auto"):
    return aio.run(_session(url, key, lambda c: c.call_tool(tool, arguments), mode))


def text(result) -> str:
    assert not isinstance(result, MCPError), result
    return result.content[0].text


def ran(log) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def decide(reviewer, action, **extra) -> Hold:
    hold = wait_until(lambda: Hold.objects.filter(status="pending").first(), 30, "the hold")
    item = hold.items.get()
    body = {"items": [{"id": item.item_id, "action": action, **extra}]}
    services.hold_decide(hold_id=hold.pk, actor=reviewer, body=body)
    return hold


def test_tools_list_passes_through_and_read_only_tools_are_not_held(setup):
    url, key, _, log = setup
    tools = aio.run(_session(url, key, lambda c: c.list_tools())).tools
    by_name = {t.name: t for t in tools}
    assert set(by_name) == {"delete_file", "read_file", "book_table", "ship", "connect_calendar"}
    assert by_name["delete_file"].annotations.destructive_hint is True
    assert by_name["delete_file"].description == "Delete a file."
    assert text(call(url, key, "read_file", {"path": "a.txt"})) == "contents of a.txt"
    assert ran(log) == [{"tool": "read_file", "path": "a.txt"}] and Hold.objects.count() == 0


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
        hold = wait_until(lambda: Hold.objects.filter(status="pending").first(), 30, "the hold")
        Hold.objects.filter(pk=hold.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
        services.holds_expire_due()
        result = waiting.result(30)
        assert result.is_error and "expired" in text(result)
    # The upstream ran exactly what a person allowed, once each.
    assert ran(log) == [{"tool": "delete_file", "path": "/srv/a"}, {"tool": "delete_file", "path": "/tmp/b"}]


def test_a_form_elicitation_is_a_hold_with_its_schema(setup):
    url, key, reviewer, log = setup
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(call, url, key, "book_table", {"restaurant": "Chez Panisse"})
        hold = wait_until(lambda: Hold.objects.filter(status="pending").first(), 30, "the elicitation's hold")
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
        hold = wait_until(lambda: Hold.objects.filter(status="pending").first(), 30, "the hold")
        Hold.objects.filter(pk=hold.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
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


def test_a_nested_schema_is_declined_with_a_message_and_no_hold(setup):
    url, key, _, log = setup
    assert text(call(url, key, "ship", {"item": "lamp"})) == "not shipped: decline"
    (shipped,) = ran(log)
    assert "not a string, number, integer or boolean" in shipped["meta"]["io.reviewqueue/message"]
    assert Hold.objects.count() == 0


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
    assert Hold.objects.count() == 0


def test_a_url_elicitation_to_a_client_without_url_mode_is_the_protocols_error(setup):
    url, key, _, log = setup
    # No elicitation callback: the official client declares no elicitation capability at all.
    result = call(url, key, "connect_calendar", {"account": "ana@example.com"}, "legacy")
    assert text(result) == "calendar ana@example.com: not connected (-32602)"
    # The spec's answer to a mode the client did not declare: -32602 Invalid params, to the upstream.
    error = {"code": -32602, "message": "the gateway's client did not declare URL-mode elicitation"}
    assert ran(log) == [{"tool": "connect_calendar", "account": "ana@example.com", "error": error}]
    assert Hold.objects.count() == 0


def test_bad_input_is_the_protocols_error(setup):
    url, key, _, _ = setup
    assert httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).status_code == 401
    unknown = call(url, key, "format_disk", {})
    assert isinstance(unknown, MCPError) and unknown.error.code == -32602
    assert Hold.objects.count() == 0
