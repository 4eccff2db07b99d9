"""A Claude Agent SDK agent whose Bash calls wait for a person (the defer path).

    AGENTOS_SECRET=whsec_… python examples/claude_agent.py --port 8083   # needs the Claude CLI
    python examples/claude_agent.py --demo                               # offline stand-in

`--demo` replaces `claude_agent_sdk.query` with a stand-in that does what the CLI does with
the options it gets (fires the PreToolUse hook for one Bash call), so it runs with no model.
"""

from __future__ import annotations

import argparse

import agentos
from agentos.adapters.claude import ClaudeAgent
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage

OPTIONS = ClaudeAgentOptions(allowed_tools=["Read"], permission_mode="default")


async def offline_query(*, prompt, options):
    call = {"command": "rm -rf /srv/old-reports"}
    hook = options.hooks["PreToolUse"][-1].hooks[0]
    out = await hook(
        {
            "hook_event_name": "PreToolUse",
            "session_id": "demo-session",
            "transcript_path": "",
            "cwd": "/",
            "tool_name": "Bash",
            "tool_input": call,
            "tool_use_id": "toolu_1",
        },
        "toolu_1",
        {"signal": None},
    )
    spec = out["hookSpecificOutput"]
    text = {"defer": None, "allow": f"ran {spec.get('updatedInput', call)}"}.get(
        spec["permissionDecision"], f"denied: {spec.get('permissionDecisionReason')}"
    )
    yield ResultMessage(
        subtype="success",
        duration_ms=0,
        duration_api_ms=0,
        is_error=False,
        num_turns=1,
        session_id="demo-session",
        result=text,
        stop_reason="tool_deferred" if spec["permissionDecision"] == "defer" else "end_turn",
    )


def handlers(offline: bool = False):
    kw = {"query": offline_query} if offline else {}
    return {"ops_with_claude": ClaudeAgent(OPTIONS, matcher="Bash", **kw)}


def demo() -> None:
    from agentos.testing import FakeReviewQueue

    with FakeReviewQueue() as rq, agentos.Server(handlers(True), port=0, secret=rq.secret) as a:
        run_id = rq.start_run("ops_with_claude", {"prompt": "clean up old reports"}, a.url)
        hold = rq.open_hold(run_id)
        print("held:", hold["intent"], hold["items"][0]["data"])
        edit = {"id": "toolu_1", "action": "edit", "data": {"command": "ls /srv/old-reports"}}
        print("answer:", rq.decide(hold["hold_id"], [edit]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8083)
    parser.add_argument("--demo", action="store_true")
    args = parser.parse_args()
    demo() if args.demo else agentos.serve(handlers(), port=args.port)
