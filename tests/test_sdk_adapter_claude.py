"""Claude Agent SDK adapter: the hook and the callback called with the SDK's real types.

No CLI and no network: `query` is replaced by a stand-in that does what the CLI does with
the options it is given (fires the PreToolUse hooks or the permission callback, then ends).
"""

import asyncio

import agentos
import pytest
from agentos.adapters import run_coroutine
from agentos.adapters.claude import ASKED_KEY, SESSION_KEY, ClaudeAgent, Gate
from claude_agent_sdk import (
    ClaudeAgentOptions,
    HookMatcher,
    PermissionResultAllow,
    PermissionResultDeny,
    ResultMessage,
    ToolPermissionContext,
)
from claude_agent_sdk.types import DeferredToolUse

CALL = {"command": "rm -rf /srv/old-reports"}


@pytest.fixture
def agent(serve_agent):
    return lambda handler: serve_agent("ops", handler)


def result(session_id="sess-1", **kw):
    return ResultMessage(
        subtype="success",
        duration_ms=1,
        duration_api_ms=1,
        is_error=False,
        num_turns=1,
        session_id=session_id,
        **kw,
    )


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


class FakeCli:
    """Stands in for the CLI: runs the options' hooks for one Bash call, like the real one."""

    def __init__(self):
        self.ran = []
        self.seen_options = []

    async def query(self, *, prompt, options):
        self.seen_options.append((prompt, options))
        hooks = [h for m in options.hooks["PreToolUse"] for h in m.hooks if m.matcher in (None, "Bash")]
        out = await hooks[-1](hook_input(), "toolu_1", {"signal": None})
        spec = out["hookSpecificOutput"]
        if spec["permissionDecision"] == "defer":
            yield result(
                stop_reason="tool_deferred",
                deferred_tool_use=DeferredToolUse(id="toolu_1", name="Bash", input=CALL),
            )
            return
        if spec["permissionDecision"] == "allow":
            self.ran.append(spec.get("updatedInput", CALL))
            yield result(result="ran it")
        else:
            yield result(result=f"denied: {spec['permissionDecisionReason']}")


def test_it_defers_on_the_start_and_allows_the_edited_call_on_the_resume(rq, agent):
    cli = FakeCli()
    existing = HookMatcher(matcher="Write", hooks=[])
    options = ClaudeAgentOptions(hooks={"PreToolUse": [existing]})
    server = agent(ClaudeAgent(options, matcher="Bash", query=cli.query))
    run_id = rq.start_run("ops", {"prompt": "clean up"}, endpoint=server.url)

    hold = rq.open_hold(run_id)
    assert rq.runs[run_id]["status"] == "held"
    assert hold["intent"] == "Approve tool call: Bash"
    assert hold["items"] == [{"id": "toolu_1", "title": 'Bash(command="rm -rf /srv/old-reports")', "data": CALL}]
    assert rq.runs[run_id]["state"][SESSION_KEY] == "sess-1"
    assert cli.ran == []
    first_prompt, first_options = cli.seen_options[0]
    assert first_prompt == "clean up"
    assert first_options.hooks["PreToolUse"][0] is existing  # the developer's hooks stay
    assert first_options.resume is None

    edited = {"command": "rm -rf /srv/old-reports/2019"}
    answer = rq.decide(hold["hold_id"], [{"id": "toolu_1", "action": "edit", "data": edited}])
    assert answer == {"status": "completed", "output": "ran it"}
    assert cli.ran == [edited]
    assert cli.seen_options[1][1].resume == "sess-1"


def test_it_denies_a_rejected_call_with_the_comment(rq, agent):
    cli = FakeCli()
    server = agent(ClaudeAgent(matcher="Bash", query=cli.query))
    run_id = rq.start_run("ops", {"prompt": "clean up"}, endpoint=server.url)
    answer = rq.decide(
        rq.open_hold(run_id)["hold_id"],
        [{"id": "toolu_1", "action": "reject", "comment": "archive first"}],
    )
    assert answer["output"] == "denied: archive first"
    assert cli.ran == []


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


def test_it_holds_with_the_can_use_tool_callback_and_answers_from_the_decision(rq):
    inv, run_id = invocation(rq)
    adapter = ClaudeAgent(mode="can_use_tool")
    ctx = ToolPermissionContext(tool_use_id="toolu_1", suggestions=[])
    first = run_coroutine(Gate(adapter, inv).can_use_tool("Bash", CALL, ctx))
    assert isinstance(first, PermissionResultDeny)
    assert first.interrupt is True  # ends the run: the invocation never waits
    hold_id = inv.hold_id
    assert hold_id == rq.open_hold(run_id)["hold_id"]

    # The resume: the model makes the call again, with a new tool_use_id.
    again = ToolPermissionContext(tool_use_id="toolu_9", suggestions=[])
    edited = {"command": "ls /srv"}
    inv2 = decided(rq, run_id, hold_id, [{"id": "toolu_1", "action": "edit", "data": edited, "comment": None}])
    gate = Gate(adapter, inv2)
    allow = run_coroutine(gate.can_use_tool("Bash", CALL, again))
    assert allow == PermissionResultAllow(updated_input=edited)
    # The decision answers that one call: a repeat is held again, not allowed.
    repeat = run_coroutine(gate.can_use_tool("Bash", CALL, again))
    assert isinstance(repeat, PermissionResultDeny) and repeat.interrupt is True


def test_it_answers_each_tool_use_id_once(rq):
    inv, run_id = invocation(rq)
    ctx = ToolPermissionContext(tool_use_id="toolu_1", suggestions=[])
    run_coroutine(Gate(ClaudeAgent(mode="can_use_tool"), inv).can_use_tool("Bash", CALL, ctx))
    inv2 = decided(
        rq,
        run_id,
        inv.hold_id,
        [{"id": "toolu_1", "action": "approve", "data": CALL, "comment": None}],
    )
    gate = Gate(ClaudeAgent(mode="can_use_tool"), inv2)
    assert isinstance(run_coroutine(gate.can_use_tool("Bash", CALL, ctx)), PermissionResultAllow)
    again = run_coroutine(gate.can_use_tool("Bash", CALL, ctx))
    assert isinstance(again, PermissionResultDeny) and again.interrupt is True


@pytest.mark.parametrize(
    ("action", "comment", "expected"),
    [
        ("approve", None, PermissionResultAllow(updated_input=None)),
        ("reject", "not today", PermissionResultDeny(message="not today")),
        ("feedback", "use --dry-run", PermissionResultDeny(message="use --dry-run")),
    ],
)
def test_it_maps_each_decision_to_a_permission_result(rq, action, comment, expected):
    inv, run_id = invocation(rq)
    ctx = ToolPermissionContext(tool_use_id="toolu_1", suggestions=[])
    run_coroutine(Gate(ClaudeAgent(mode="can_use_tool"), inv).can_use_tool("Bash", CALL, ctx))
    inv2 = decided(
        rq,
        run_id,
        inv.hold_id,
        [{"id": "toolu_1", "action": action, "data": CALL, "comment": comment}],
    )
    got = run_coroutine(Gate(ClaudeAgent(mode="can_use_tool"), inv2).can_use_tool("Bash", CALL, ctx))
    assert got == expected


def test_it_does_not_let_a_decision_answer_a_different_call(rq):
    inv, run_id = invocation(rq)
    ctx = ToolPermissionContext(tool_use_id="toolu_1", suggestions=[])
    run_coroutine(Gate(ClaudeAgent(mode="can_use_tool"), inv).can_use_tool("Bash", CALL, ctx))
    inv2 = decided(
        rq,
        run_id,
        inv.hold_id,
        [{"id": "toolu_1", "action": "approve", "data": CALL, "comment": None}],
    )
    other = ToolPermissionContext(tool_use_id="toolu_5", suggestions=[])
    got = run_coroutine(
        Gate(ClaudeAgent(mode="can_use_tool"), inv2).can_use_tool("Bash", {"command": "rm -rf /"}, other)
    )
    assert isinstance(got, PermissionResultDeny)
    assert got.interrupt is True  # asked anew, not allowed on the old approval


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
