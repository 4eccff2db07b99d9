"""Claude Agent SDK adapter: the SDK's real query loop and the real CLI bundled in claude-agent-sdk,
offline, against a local fake of the Anthropic Messages API (tests/frameworks/anthropic_fake.py)
that scripts the model's tool_use replies. The hooks are also called directly with the SDK's shapes.
"""

import asyncio
import json

import agentos
import pytest
from agentos.adapters import run_coroutine
from agentos.adapters.claude import ASKED_KEY, SESSION_KEY, ClaudeAgent, Gate
from claude_agent_sdk import ClaudeAgentOptions, HookMatcher, create_sdk_mcp_server, tool

from tests.frameworks.anthropic_fake import FakeAnthropic, offline_env, tool_results

CALL = {"command": "rm -rf /srv/old-reports"}


@pytest.fixture
def agent(serve_agent):
    return lambda handler: serve_agent("ops", handler)


def hook_input(tool_use_id="toolu_1", tool_input=None, session_id="sess-1"):
    return {
        "hook_event_name": "PreToolUse",
        "session_id": session_id,
        "transcript_path": "/t",
        "cwd": "/",
        "tool_name": "Bash",
        "tool_input": tool_input or CALL,
        "tool_use_id": tool_use_id,
    }


# --- the real CLI ---------------------------------------------------------------------------------


def pay_model(messages):
    """Calls pay once; then answers with what the tool said (or that it was refused)."""
    results = tool_results(messages)
    if not results:
        return [
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "mcp__bank__pay",
                "input": {"payee": "Acme", "amount": "120.00"},
            }
        ]
    return [{"type": "text", "text": "FINAL " + json.dumps(results[-1].get("content"))}]


def cli_options(fake, tmp_path, ran, **kw):
    @tool("pay", "Pay an invoice", {"payee": str, "amount": str})
    async def pay(args):
        ran.append(args)
        return {"content": [{"type": "text", "text": f"paid {args['payee']} {args['amount']}"}]}

    env = offline_env(fake, tmp_path)
    server = create_sdk_mcp_server("bank", tools=[pay])
    return ClaudeAgentOptions(mcp_servers={"bank": server}, env=env, cwd=str(tmp_path), setting_sources=[], **kw)


def test_the_real_cli_defers_then_runs_the_edited_call_and_adds_no_turn(rq, agent, tmp_path):
    ran = []
    with FakeAnthropic(pay_model) as fake:
        adapter = ClaudeAgent(cli_options(fake, tmp_path, ran), matcher="mcp__bank__pay")
        run_id = rq.start_run("ops", {"prompt": "pay Acme"}, endpoint=agent(adapter).url)
        hold = rq.open_hold(run_id)
        assert hold["items"][0]["data"] == {"payee": "Acme", "amount": "120.00"} and ran == []
        assert rq.runs[run_id]["state"][SESSION_KEY]
        edit = {"id": "toolu_1", "action": "edit", "data": {"payee": "Acme", "amount": "99.00"}}
        answer = rq.decide(hold["hold_id"], [edit])
        assert ran == [{"payee": "Acme", "amount": "99.00"}]
        # The model's own final answer, after exactly one more model call: no "continue" turn of ours.
        assert answer == {"status": "completed", "output": 'FINAL [{"type": "text", "text": "paid Acme 99.00"}]'}
        assert len(fake.requests) == 2
        assert len(rq.runs[run_id]["holds"]) == 1


def test_the_real_cli_never_runs_a_rejected_call_and_the_model_reads_the_comment(rq, agent, tmp_path):
    ran = []
    with FakeAnthropic(pay_model) as fake:
        adapter = ClaudeAgent(cli_options(fake, tmp_path, ran), matcher="mcp__bank__pay")
        run_id = rq.start_run("ops", {"prompt": "pay Acme"}, endpoint=agent(adapter).url)
        hold = rq.open_hold(run_id)
        answer = rq.decide(hold["hold_id"], [{"id": "toolu_1", "action": "reject", "comment": "paid last week"}])
        assert ran == []
        assert answer["status"] == "completed" and "paid last week" in answer["output"]
        (refusal,) = tool_results(fake.requests[-1]["messages"])
        assert refusal.get("is_error") is True


def test_the_developers_own_defer_hook_is_composed_not_lost(rq, agent, tmp_path):
    ran, seen = [], []

    async def my_defer_hook(input_data, tool_use_id, context):
        # The SDK's deferred-tool example: the developer's hook defers the call itself.
        seen.append(tool_use_id)
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "defer"}}

    with FakeAnthropic(pay_model) as fake:
        hooks = {"PreToolUse": [HookMatcher(matcher="mcp__bank__pay", hooks=[my_defer_hook])]}
        adapter = ClaudeAgent(cli_options(fake, tmp_path, ran, hooks=hooks), hold_matching=False)
        run_id = rq.start_run("ops", {"prompt": "pay Acme"}, endpoint=agent(adapter).url)
        hold = rq.open_hold(run_id)
        answer = rq.decide(hold["hold_id"], [{"id": "toolu_1", "action": "approve"}])
        assert ran == [{"payee": "Acme", "amount": "120.00"}]
        assert answer["status"] == "completed" and seen == ["toolu_1", "toolu_1"]


def test_a_resume_without_a_session_fails_naming_the_run(rq, agent, tmp_path):
    ran = []
    with FakeAnthropic(pay_model) as fake:
        adapter = ClaudeAgent(cli_options(fake, tmp_path, ran), matcher="mcp__bank__pay")
        run_id = rq.start_run("ops", {"prompt": "pay Acme"}, endpoint=agent(adapter).url)
        hold = rq.open_hold(run_id)
        del rq.runs[run_id]["state"][SESSION_KEY]
        answer = rq.decide(hold["hold_id"], [{"id": "toolu_1", "action": "approve"}])
        assert answer["status"] == "failed" and run_id in answer["error"] and ran == []


# --- the hooks, called directly -----------------------------------------------------------------


def invocation(rq, resume=None):
    run_id = rq.create_run("ops", {}, endpoint="")
    payload = rq.invocation_payload(run_id, resume)
    return agentos.Invocation(payload["invocation"], payload["resume"]), run_id


def test_it_answers_the_hook_with_the_sdk_shapes(rq):
    inv, run_id = invocation(rq)
    gate = Gate(ClaudeAgent(), inv)
    out = run_coroutine(gate.pre_tool_use(hook_input(), "toolu_1", {"signal": None}))
    assert out["hookSpecificOutput"]["hookEventName"] == "PreToolUse"
    assert out["hookSpecificOutput"]["permissionDecision"] == "defer"
    assert inv.hold_id == rq.open_hold(run_id)["hold_id"]
    assert rq.runs[run_id]["state"][ASKED_KEY] == {"toolu_1": {"name": "Bash", "input": CALL}}

    second = run_coroutine(gate.pre_tool_use(hook_input("toolu_2"), "toolu_2", {"signal": None}))
    assert second["hookSpecificOutput"]["permissionDecision"] == "deny"  # one hold at a time


def decided(rq, run_id, hold_id, items):
    hold = rq.holds[hold_id]
    hold["status"] = "decided"
    resume = {"hold_id": hold_id, "resolved_by": "human", "items": items, "comment": None}
    payload = rq.invocation_payload(run_id, resume)
    return agentos.Invocation(payload["invocation"], payload["resume"])


def test_it_denies_the_deferred_call_when_the_hold_expired(rq):
    inv, run_id = invocation(rq)
    gate = Gate(ClaudeAgent(), inv)
    run_coroutine(gate.pre_tool_use(hook_input(), "toolu_1", {"signal": None}))
    hold_id = inv.hold_id
    rq.holds[hold_id]["status"] = "expired"
    payload = rq.invocation_payload(
        run_id, {"hold_id": hold_id, "resolved_by": "expired", "items": [], "comment": None}
    )
    inv2 = agentos.Invocation(payload["invocation"], payload["resume"])
    out = run_coroutine(Gate(ClaudeAgent(), inv2).pre_tool_use(hook_input(), "toolu_1", {}))
    assert out["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "expired" in out["hookSpecificOutput"]["permissionDecisionReason"]


def test_it_runs_from_a_thread_that_already_has_a_running_loop():
    # Playwright's sync API, a notebook or an async server leave a loop running in the caller's
    # thread, where asyncio.run() refuses; the adapters still have to work there.
    loop = asyncio.new_event_loop()
    asyncio._set_running_loop(loop)
    try:

        async def answer():
            return 42

        assert run_coroutine(answer()) == 42
    finally:
        asyncio._set_running_loop(None)
        loop.close()
