"""/mcp's request_approval through the official `mcp` client, against the real ASGI process (uvicorn
serving reviewqueue/asgi.py) on the test database: each call is one hold, decided by a person here
through the same service as the API; the answer is Claude Code's permission-prompt contract."""

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
import httpx2
import pytest
from django.db import connections
from django.utils import timezone
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from holds import services
from holds.auth import SYSTEM, actor_for_user
from holds.models import Capability, Hold, Invocation, Run
from tests import aio, factories
from tests.processes import Processes, free_port, service_env, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_redis]


@pytest.fixture(scope="module")
def asgi(tmp_path_factory, django_db_setup, django_db_blocker):
    """The ASGI process (and gunicorn, whose sync workers must never wait for a person)."""
    processes = Processes(tmp_path_factory.mktemp("mcp"))
    with django_db_blocker.unblock():
        env = service_env(redis_url=processes.redis(free_port()), RQ_MCP_EXPIRES_IN=120)
        url = processes.uvicorn(env, free_port())
        web = processes.gunicorn(env, free_port())
    yield url, web
    processes.stop_all()
    connections.close_all()


@pytest.fixture
def mcp_url(asgi):
    factories.capability(name="mcp", endpoint="http://127.0.0.1:9", approvers=["admin", "member"])
    return asgi[0] + "/mcp"


@pytest.fixture
def key():
    return factories.account("claude-code", role="member")[1]


@pytest.fixture
def reviewer():
    return actor_for_user(factories.person("rev", role="member"))


async def _call(url: str, key: str, arguments: dict, *, mode: str = "auto", tool: str = "request_approval"):
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=None))
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        try:
            return await client.call_tool(tool, arguments)
        except MCPError as exc:  # inside the client's task group it would come out as an ExceptionGroup
            return exc


def call(url, key, arguments, **kwargs):
    return aio.run(_call(url, key, arguments, **kwargs))


def refusal(url, key, arguments, **kwargs) -> MCPError:
    """The JSON-RPC error a call is refused with (the protocol's own error, not a tool result)."""
    result = call(url, key, arguments, **kwargs)
    assert isinstance(result, MCPError), result
    return result


def answer_of(result) -> dict:
    assert not result.is_error, result
    (block,) = result.content  # Claude Code takes one text block holding JSON, nothing else
    assert block.type == "text" and result.structured_content is None
    return json.loads(block.text)


def bash(command: str, tool_use_id: str = "toolu_1") -> dict:
    return {"tool_name": "Bash", "input": {"command": command, "description": "run"}, "tool_use_id": tool_use_id}


def pending_hold(n: int = 1) -> Hold:
    holds = wait_until(lambda: list(Hold.objects.filter(status="pending").order_by("pk")[:n]), 30, "the hold")
    return holds[-1]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_approve_edit_and_reject_answer_as_the_permission_prompt_tool_expects(mcp_url, key, reviewer, mode):
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(call, mcp_url, key, bash("echo original > out.txt"), mode=mode)
        hold = pending_hold()
        (item,) = hold.items.all()
        assert (item.title, item.data) == ("Bash", {"command": "echo original > out.txt", "description": "run"})
        assert hold.run.capability.name == "mcp" and hold.run.status == "held" and not waiting.done()
        services.hold_decide(
            hold_id=hold.pk, actor=reviewer, body={"items": [{"id": item.item_id, "action": "approve"}]}
        )
        assert answer_of(waiting.result(30)) == {
            "behavior": "allow",
            "updatedInput": {"command": "echo original > out.txt", "description": "run"},
        }

        waiting = pool.submit(call, mcp_url, key, bash("echo original > out.txt", "toolu_2"), mode=mode)
        hold = pending_hold()
        edited = {"command": "echo edited-by-reviewer > out.txt", "description": "run"}
        body = {"items": [{"id": "toolu_2", "action": "edit", "data": edited}]}
        services.hold_decide(hold_id=hold.pk, actor=reviewer, body=body)
        assert answer_of(waiting.result(30)) == {"behavior": "allow", "updatedInput": edited}

        waiting = pool.submit(call, mcp_url, key, bash("rm -rf /srv", "toolu_3"), mode=mode)
        hold = pending_hold()
        body = {"items": [{"id": "toolu_3", "action": "reject", "comment": "not on production"}]}
        services.hold_decide(hold_id=hold.pk, actor=reviewer, body=body)
        assert answer_of(waiting.result(30)) == {"behavior": "deny", "message": "Rejected by rev: not on production"}

    # Each call is a run of one hold, completed with the answer it gave; no resume was ever sent.
    runs = Run.objects.order_by("pk")
    assert [r.status for r in runs] == ["completed"] * 3
    assert runs[2].output == {"behavior": "deny", "message": "Rejected by rev: not on production"}
    assert set(Invocation.objects.filter(kind="resume").values_list("status", flat=True)) == {"cancelled"}
    assert not Invocation.objects.filter(attempts__gt=0).exists()


def test_an_expired_hold_answers_deny_saying_so(mcp_url, key):
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(call, mcp_url, key, bash("deploy"))
        hold = pending_hold()
        assert hold.expires_at is not None  # RQ_MCP_EXPIRES_IN
        factories.past_due(hold.pk)
        assert services.holds_expire_due() == 1
        answer = answer_of(waiting.result(30))
    assert answer["behavior"] == "deny" and "expired" in answer["message"]


def test_retries_of_one_tool_use_are_one_hold_and_one_answer(mcp_url, key, reviewer):
    with ThreadPoolExecutor(3) as pool:
        first = [pool.submit(call, mcp_url, key, bash("make release", "toolu_same")) for _ in range(3)]
        hold = pending_hold()
        wait_until(lambda: Hold.objects.count() == 1 and Run.objects.count() == 1, 5, "three calls on one hold")
        services.hold_decide(
            hold_id=hold.pk, actor=reviewer, body={"items": [{"id": "toolu_same", "action": "approve"}]}
        )
        answers = [answer_of(f.result(30)) for f in first]
        later = answer_of(call(mcp_url, key, bash("make release", "toolu_same")))  # after the answer: the same
    assert answers == [later] * 3 and later["behavior"] == "allow"
    assert Hold.objects.count() == 1 and Run.objects.count() == 1
    refused = refusal(mcp_url, key, bash("make other", "toolu_same"))
    assert refused.error.code == -32602 and Hold.objects.count() == 1


def test_bad_input_is_the_protocols_error_and_never_a_hold(mcp_url, key, asgi):
    # A missing or wrong key: 401 before any MCP message is read.
    for headers in ({}, {"authorization": "Bearer rqk_wrong"}, {"authorization": f"Basic {key}"}):
        response = httpx.post(mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)
        assert response.status_code == 401 and response.headers["www-authenticate"].startswith("Bearer")
        assert response.json()["error"]["code"] == -32001
    # A malformed request: JSON-RPC's parse error, with a 4xx.
    response = httpx.post(
        mcp_url,
        content=b"{not json",
        headers={
            "authorization": f"Bearer {key}",
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
        },
    )
    assert 400 <= response.status_code < 500 and response.json()["error"]["code"] == -32700
    # An unknown tool, arguments of the wrong shape, an input over the ask's limit, a viewer's key.
    unknown = refusal(mcp_url, key, {}, tool="no_such_tool")
    assert unknown.error.code == -32602 and unknown.error.message == "Unknown tool: no_such_tool"
    result = call(mcp_url, key, {"tool_name": "Bash", "input": "rm -rf /"})
    assert result.is_error
    too_big = refusal(mcp_url, key, {"tool_name": "Write", "input": {"content": "x" * (1024 * 1024 + 1)}})
    assert too_big.error.code == -32602 and "limit" in too_big.error.message
    viewer_key = factories.account("viewer-bot", role="viewer")[1]
    viewer = refusal(mcp_url, viewer_key, bash("ls"))
    assert viewer.error.code == -32602
    assert Hold.objects.count() == 0 and Run.objects.count() == 0


def test_rules_and_standing_grants_answer_without_a_person(mcp_url, key, reviewer):
    """The ask's rules and grants (services.rules, the one place they are evaluated) apply to /mcp's
    calls: what they decide is answered at once, and only the rest waits for a person."""
    capability = Capability.objects.get(name="mcp")
    rules = [
        {"id": "reads", "when": 'item.title == "Read"', "then": "approve"},
        {
            "id": "no-force-push",
            "when": 'item.title == "Bash" && item.data.command.contains("push --force")',
            "then": "reject",
            "comment": "Never force-push.",
        },
    ]
    services.rules_save(capability=capability, rules=rules, actor=SYSTEM)
    read = {"tool_name": "Read", "input": {"file_path": "README.md"}, "tool_use_id": "toolu_r"}
    assert answer_of(call(mcp_url, key, read)) == {"behavior": "allow", "updatedInput": {"file_path": "README.md"}}
    pushed = answer_of(call(mcp_url, key, bash("git push --force", "toolu_p")))
    assert pushed == {"behavior": "deny", "message": "Rejected by rule no-force-push v1: Never force-push."}
    grant = services.grant_create(
        capability=capability,
        when='item.title == "Bash" && item.data.command == "make test"',
        expires_at=timezone.now() + timedelta(days=1),
        actor=reviewer,
    )
    assert answer_of(call(mcp_url, key, bash("make test", "toolu_t")))["behavior"] == "allow"
    decided = list(Hold.objects.order_by("pk").values_list("status", "decided_by"))
    assert decided == [
        ("decided", "rule reads v1"),
        ("decided", "rule no-force-push v1"),
        ("decided", f"grant {grant}"),
    ]
    # Neither a rule nor the grant decides this one: a person does.
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(call, mcp_url, key, bash("make deploy", "toolu_d"))
        hold = pending_hold()
        services.hold_decide(hold_id=hold.pk, actor=reviewer, body={"items": [{"id": "toolu_d", "action": "approve"}]})
        assert answer_of(waiting.result(30))["behavior"] == "allow"
    assert [r.status for r in Run.objects.all()] == ["completed"] * 4


def test_no_capability_configured_is_a_protocol_error(asgi, key):
    refused = refusal(asgi[0] + "/mcp", key, bash("ls"))
    assert refused.error.code == -32602 and "no capability named 'mcp'" in refused.error.message


def test_waiting_calls_hold_no_sync_worker(mcp_url, key, reviewer, asgi):
    """gunicorn's sync workers (tests/processes.py: 2 workers x 4 threads = 8) never see /mcp: with more
    calls waiting for people than there are sync workers, every one of them still answers at once."""
    url, web = asgi
    sync_workers = 2 * 4
    assert httpx.post(web + "/mcp", json={}).status_code == 404  # gunicorn does not serve /mcp at all
    with ThreadPoolExecutor(sync_workers + 1) as pool:
        waiting = [pool.submit(call, mcp_url, key, bash(f"job {n}", f"toolu_w{n}")) for n in range(sync_workers + 1)]
        wait_until(lambda: Hold.objects.filter(status="pending").count() == sync_workers + 1, 30, "every call held")
        barrier = threading.Barrier(sync_workers)

        def healthz(base):
            barrier.wait(10)
            return httpx.get(base + "/healthz", timeout=5).status_code

        with ThreadPoolExecutor(sync_workers) as probes:
            assert list(probes.map(healthz, [web] * sync_workers)) == [200] * sync_workers
        barrier.reset()
        assert httpx.get(url + "/healthz", timeout=5).status_code == 200  # the ASGI process answers too
        assert not any(w.done() for w in waiting)
        for hold in Hold.objects.filter(status="pending"):
            item = hold.items.get()
            services.hold_decide(
                hold_id=hold.pk, actor=reviewer, body={"items": [{"id": item.item_id, "action": "approve"}]}
            )
        assert {answer_of(w.result(30))["behavior"] for w in waiting} == {"allow"}
