"""Ports of the Claude Agent SDK's own permission examples, through the real service, on the real CLI
bundled in claude-agent-sdk, offline against a local fake of the Anthropic Messages API.

Sources (anthropics/claude-agent-sdk-python): examples/tool_permission_callback.py (the policy of
`my_permission_callback`), and the deferred-tool pattern of examples/deferred_tool_use.py (a PreToolUse
hook answering "defer"; that file is not in the snapshot read for this port, so the hook is written from
the SDK's documented `permissionDecision: "defer"`). Changed per docs/sdk.md: the callback's policy moves
into a PreToolUse hook (there is no can_use_tool mode: an invocation never waits), its "ask the user"
branch answers `defer`, and the options go to `ClaudeAgent(options, hold_matching=False)`.
"""

import json

from agentos.adapters import EXPIRED_MESSAGE
from agentos.adapters.claude import ClaudeAgent
from claude_agent_sdk import ClaudeAgentOptions, HookMatcher, create_sdk_mcp_server, tool

from tests.frameworks.anthropic_fake import FakeAnthropic, offline_env, tool_results
from tests.frameworks.conftest import pytestmark  # noqa: F401 (real service: transaction and Redis)

DANGEROUS = ["rm -rf", "sudo", "chmod 777", "dd if=", "mkfs"]


async def my_permission_hook(input_data, tool_use_id, context):
    """`my_permission_callback`'s policy as a PreToolUse hook; "ask the user" becomes a defer."""
    tool_name, tool_input = input_data["tool_name"], input_data.get("tool_input") or {}

    def decide(decision, reason=None, **extra):
        out = {"hookEventName": "PreToolUse", "permissionDecision": decision, **extra}
        if reason:
            out["permissionDecisionReason"] = reason
        return {"hookSpecificOutput": out}

    if tool_name in ["Read", "Glob", "Grep"]:
        return decide("allow")
    if tool_name == "Bash":
        command = tool_input.get("command", "")
        for dangerous in DANGEROUS:
            if dangerous in command:
                return decide("deny", f"Dangerous command pattern detected: {dangerous}")
        return decide("allow")
    # For all other tools, ask the user: a hold in the Review Queue.
    return decide("defer", "Waiting for a person")


def model_calling(name, tool_input):
    def script(messages):
        results = tool_results(messages)
        if not results:
            return [{"type": "tool_use", "id": "toolu_1", "name": name, "input": tool_input}]
        return [{"type": "text", "text": "FINAL " + json.dumps(results[-1].get("content"))}]

    return script


def options(fake, tmp_path, ran):
    @tool("pay", "Pay an invoice", {"payee": str, "amount": str})
    async def pay(args):
        ran.append(args)
        return {"content": [{"type": "text", "text": f"paid {args['payee']} {args['amount']}"}]}

    env = offline_env(fake, tmp_path)
    return ClaudeAgentOptions(
        mcp_servers={"bank": create_sdk_mcp_server("bank", tools=[pay])},
        hooks={"PreToolUse": [HookMatcher(matcher=None, hooks=[my_permission_hook])]},
        permission_mode="default",
        env=env,
        cwd=str(tmp_path),
        setting_sources=[],
    )


def test_an_unknown_tool_waits_for_a_person_who_edits_or_rejects_it(drive, tmp_path):
    ran = []
    with FakeAnthropic(model_calling("mcp__bank__pay", {"payee": "Acme", "amount": "120.00"})) as fake:
        d = drive(ClaudeAgent(options(fake, tmp_path, ran), hold_matching=False))
        run_id = d.start({"prompt": "pay Acme"})
        hold = d.held(run_id)
        (item,) = hold["items"]
        assert item["data"] == {"payee": "Acme", "amount": "120.00"} and ran == []
        edit = {"id": item["id"], "action": "edit", "data": {"payee": "Acme", "amount": "99.00"}}
        assert d.decide(hold, [edit]).status_code == 200
        done = d.finished(run_id)
        assert done["status"] == "completed", done
        assert done["output"] == 'FINAL [{"type": "text", "text": "paid Acme 99.00"}]'  # the model's own answer
        assert ran == [{"payee": "Acme", "amount": "99.00"}]

        run_id = d.start({"prompt": "pay Acme"})
        hold = d.held(run_id)
        decision = [{"id": hold["items"][0]["id"], "action": "reject", "comment": "paid last week"}]
        assert d.decide(hold, decision).status_code == 200
        done = d.finished(run_id)
        assert done["status"] == "completed" and "paid last week" in done["output"]
        assert ran == [{"payee": "Acme", "amount": "99.00"}]  # the rejected call never ran


def test_the_callbacks_own_denials_still_stand_without_a_hold(drive, tmp_path):
    ran = []
    with FakeAnthropic(model_calling("Bash", {"command": "sudo rm -rf /srv"})) as fake:
        d = drive(ClaudeAgent(options(fake, tmp_path, ran), hold_matching=False))
        run_id = d.start({"prompt": "clean up"})
        done = d.finished(run_id)
        assert done["status"] == "completed" and done["holds"] == []
        assert "Dangerous command pattern detected" in done["output"]


def test_a_second_pause_after_a_resume_then_an_expiry_denies_only_the_second_call(drive, tmp_path):
    # Both endings in one run: each Claude invocation starts the CLI, the dearest step of these ports.
    ran = []

    def script(messages):
        done = tool_results(messages)
        if len(done) < 2:
            payee = ["Acme", "Beta"][len(done)]
            tool_input = {"payee": payee, "amount": "1.00"}
            return [{"type": "tool_use", "id": f"toolu_{len(done) + 1}", "name": "mcp__bank__pay", "input": tool_input}]
        return [{"type": "text", "text": "FINAL " + json.dumps([r.get("content") for r in done])}]

    with FakeAnthropic(script) as fake:
        d = drive(ClaudeAgent(options(fake, tmp_path, ran), hold_matching=False))
        run_id = d.start({"prompt": "pay Acme, then Beta"})
        d.approve(d.held(run_id))
        second = d.held_again(run_id)
        assert second["items"][0]["data"]["payee"] == "Beta" and ran == [{"payee": "Acme", "amount": "1.00"}]
        run = d.expired(run_id)
        assert run["status"] == "completed" and "paid Acme 1.00" in run["output"], run
        assert EXPIRED_MESSAGE in run["output"] and "paid Beta" not in run["output"]
        assert ran == [{"payee": "Acme", "amount": "1.00"}]  # the expired call never ran
        assert [h["status"] for h in run["holds"]] == ["decided", "expired"]


def test_two_runs_at_once_on_a_fresh_config_dir_both_pause_and_resume(drive, tmp_path):
    ran = []
    with FakeAnthropic(model_calling("mcp__bank__pay", {"payee": "Acme", "amount": "120.00"})) as fake:
        d = drive(ClaudeAgent(options(fake, tmp_path, ran), hold_matching=False))
        runs = d.at_once([{"prompt": "pay Acme"}] * 2)
        for run in runs:
            assert run["status"] == "completed" and "paid Acme 120.00" in run["output"], run
        assert ran == [{"payee": "Acme", "amount": "120.00"}] * 2
