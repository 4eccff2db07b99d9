"""Claude Code's real CLI (bundled in claude-agent-sdk) with `--permission-prompt-tool` pointing at /mcp's
request_approval, offline against the local fake of the Messages API: a person's approve runs the
tool, an edit runs it with the edited input, a reject never runs it and the model reads the reason.

The options are the three lines README "MCP" tells a Claude Code user to add (an `rq` MCP server of
type http with the key, and the permission prompt tool), given through the SDK as `--mcp-config` and
`--permission-prompt-tool`.
"""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query
from django.db import connections

from holds import services
from holds.auth import actor_for_user
from holds.models import Hold
from tests import aio, factories
from tests.frameworks.anthropic_fake import FakeAnthropic, offline_env, tool_results
from tests.processes import Processes, free_port, service_env, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_redis]


@pytest.fixture(scope="module")
def asgi(tmp_path_factory, django_db_setup, django_db_blocker):
    processes = Processes(tmp_path_factory.mktemp("mcp-claude"))
    with django_db_blocker.unblock():
        url = processes.uvicorn(service_env(redis_url=processes.redis(free_port())), free_port())
    yield url
    processes.stop_all()
    connections.close_all()


def model_writing(command: str):
    """The model asks to run `command` with Bash, then reports what the tool answered."""

    def script(messages):
        results = tool_results(messages)
        if not results:
            return [{"type": "tool_use", "id": "toolu_write", "name": "Bash", "input": {"command": command}}]
        return [{"type": "text", "text": "FINAL " + json.dumps(results[-1].get("content"))}]

    return script


def run_claude(fake, tmp_path, url: str, key: str) -> ResultMessage:
    options = ClaudeAgentOptions(
        mcp_servers={"rq": {"type": "http", "url": url + "/mcp", "headers": {"Authorization": f"Bearer {key}"}}},
        permission_prompt_tool_name="mcp__rq__request_approval",
        env=offline_env(fake, tmp_path / "config"),
        cwd=str(tmp_path),
        setting_sources=[],
    )

    async def main():
        result = None
        async for message in query(prompt="write the file", options=options):
            if isinstance(message, ResultMessage):
                result = message
        return result

    return aio.run(main())


def decide_when_held(decision: dict) -> Hold:
    hold = wait_until(lambda: Hold.objects.filter(status="pending").first(), 120, "Claude Code's permission prompt")
    item = hold.items.get()
    reviewer = actor_for_user(factories.person(f"rev{hold.pk}", role="member"))
    services.hold_decide(hold_id=hold.pk, actor=reviewer, body={"items": [{"id": item.item_id, **decision}]})
    return hold


@pytest.mark.parametrize(
    ("decision", "written"),
    [
        ({"action": "approve"}, "original\n"),
        ({"action": "edit", "data": {"command": "echo edited-by-reviewer > out.txt"}}, "edited-by-reviewer\n"),
        ({"action": "reject", "comment": "no writes today"}, None),
    ],
    ids=["approve", "edit", "reject"],
)
def test_claude_code_asks_review_queue_before_a_tool_runs(asgi, tmp_path, decision, written):
    factories.capability(name="mcp", endpoint="http://127.0.0.1:9")
    key = factories.account("claude-code", role="member")[1]
    with FakeAnthropic(model_writing("echo original > out.txt")) as fake, ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_claude, fake, tmp_path, asgi, key)
        hold = decide_when_held(decision)
        result = running.result(180)
        last = fake.requests[-1]["messages"]
    (item,) = hold.items.all()
    assert (item.title, item.data) == ("Bash", {"command": "echo original > out.txt"})
    out = tmp_path / "out.txt"
    if written is None:
        assert not out.exists()  # never ran
        (denied,) = tool_results(last)
        assert denied.get("is_error") is True and "no writes today" in json.dumps(denied["content"])
        assert [d["tool_name"] for d in result.permission_denials] == ["Bash"]
    else:
        assert out.read_text() == written
        assert not result.permission_denials
    assert result.result.startswith("FINAL")
