"""Port of Pydantic AI's own human-in-the-loop example, through the real service.

Source: pydantic/pydantic-ai, docs/deferred-tools.md, "Human-in-the-Loop Tool Approval"
(`tool_requires_approval.py`: the agent, `PROTECTED_FILES`, `update_file` with `ApprovalRequired` and
`delete_file` with `requires_approval=True` are the example's), and "External Tool Execution" for
`CallDeferred`. Changed per docs/sdk.md:
- `Agent('openai:gpt-5.2', …)` → `Agent(FunctionModel(script), …)`: a scripted model, no network;
- the tools append what they did to a list (the example returns the same strings);
- the `results = DeferredToolResults() … agent.run_sync(message_history=messages, deferred_tool_results=results)`
  block → `PydanticAIAgent(agent)`, served by the service (the second prompt of the example is dropped:
  the resumed run gets only the decisions).
"""

import json

from agentos.adapters import EXPIRED_MESSAGE
from agentos.adapters.pydantic_ai import STATE_KEY, PydanticAIAgent
from pydantic_ai import (
    Agent,
    ApprovalRequired,
    CallDeferred,
    DeferredToolRequests,
    ModelResponse,
    RunContext,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from holds.models import RunState
from tests.frameworks.conftest import pytestmark  # noqa: F401 (real service: transaction and Redis)

FIRST_TURN = [
    ToolCallPart("delete_file", {"path": "__init__.py"}, tool_call_id="delete_file"),
    ToolCallPart("update_file", {"path": "README.md", "content": "Hello, world!"}, tool_call_id="update_file_readme"),
    ToolCallPart("update_file", {"path": ".env", "content": ""}, tool_call_id="update_file_dotenv"),
]


def scripted(*turns):
    """The model's n-th response is `turns[n]` (tool calls), and after the last one it reports what the
    tools returned. It counts its own responses in the history, so a restored history continues the script."""

    def respond(messages, info: AgentInfo) -> ModelResponse:
        step = sum(isinstance(m, ModelResponse) for m in messages)
        if step < len(turns):
            return ModelResponse(parts=list(turns[step]))
        returns = [p for p in messages[-1].parts if p.part_kind in ("tool-return", "retry-prompt")]
        seen = sorted(f"{p.tool_call_id}={p.content}" for p in returns)
        return ModelResponse(parts=[TextPart("; ".join(seen))])

    return FunctionModel(respond)


def file_agent(model, done):
    agent = Agent(model, output_type=[str, DeferredToolRequests])

    PROTECTED_FILES = {".env"}

    @agent.tool
    def update_file(ctx: RunContext, path: str, content: str) -> str:
        if path in PROTECTED_FILES and not ctx.tool_call_approved:
            raise ApprovalRequired(metadata={"reason": "protected"})
        done.append(("update_file", path, content))
        return f"File {path!r} updated: {content!r}"

    @agent.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str:
        done.append(("delete_file", path))
        return f"File {path!r} deleted"

    return agent


def ids(hold):
    return {i["id"]: i for i in hold["items"]}


def test_approve_one_and_reject_the_other_with_the_examples_message(drive):
    done = []
    d = drive(PydanticAIAgent(file_agent(scripted(FIRST_TURN), done)))
    run_id = d.start({"prompt": "Delete `__init__.py`, write `Hello, world!` to `README.md`, and clear `.env`"})
    hold = d.held(run_id)
    items = ids(hold)
    assert set(items) == {"delete_file", "update_file_dotenv"}  # the README update needed no approval: it ran
    assert done == [("update_file", "README.md", "Hello, world!")]
    assert items["update_file_dotenv"]["data"] == {"path": ".env", "content": ""}
    assert "protected" in items["update_file_dotenv"]["details"]
    assert items["delete_file"]["schema"]["properties"]["path"]["type"] == "string"
    # The history waits in run state, on the server side; the hold shows only the calls' arguments.
    saved = json.dumps(RunState.objects.get(key=STATE_KEY).value)
    assert '"part_kind": "user-prompt"' in saved and "user-prompt" not in json.dumps(hold)
    decision = [
        {"id": "update_file_dotenv", "action": "approve"},
        {"id": "delete_file", "action": "reject", "comment": "Deleting files is not allowed"},
    ]
    assert d.decide(hold, decision).status_code == 200
    run = d.finished(run_id)
    assert run["status"] == "completed", run
    assert run["output"] == (
        "delete_file=Deleting files is not allowed; update_file_dotenv=File '.env' updated: ''; "
        "update_file_readme=File 'README.md' updated: 'Hello, world!'"
    )
    assert done == [("update_file", "README.md", "Hello, world!"), ("update_file", ".env", "")]


def test_a_typed_edit_replaces_the_arguments_and_a_bad_one_is_refused_at_the_decision(drive):
    done = []
    d = drive(PydanticAIAgent(file_agent(scripted(FIRST_TURN), done)))
    run_id = d.start({"prompt": "clear .env"})
    hold = d.held(run_id)
    bad = [
        {"id": "update_file_dotenv", "action": "edit", "data": {"path": ".env", "content": 5}},
        {"id": "delete_file", "action": "approve"},
    ]
    refused = d.decide(hold, bad)
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "items[0].data.content"
    good = [
        {"id": "update_file_dotenv", "action": "edit", "data": {"path": ".env", "content": "DEBUG=0"}},
        {"id": "delete_file", "action": "approve"},
    ]
    assert d.decide(hold, good).status_code == 200
    assert d.finished(run_id)["status"] == "completed"
    # Pydantic AI runs one step's approved calls concurrently: in either order, each once.
    assert sorted(done[1:]) == [("delete_file", "__init__.py"), ("update_file", ".env", "DEBUG=0")]


def test_expiry_denies_every_call_saying_it_expired(drive):
    done = []
    d = drive(PydanticAIAgent(file_agent(scripted(FIRST_TURN), done), expires_in=3600))
    run_id = d.start({"prompt": "clear .env"})
    d.expire(d.held(run_id))
    run = d.finished(run_id)
    assert run["status"] == "completed" and run["holds"][0]["status"] == "expired"
    assert f"delete_file={EXPIRED_MESSAGE}" in run["output"]
    assert f"update_file_dotenv={EXPIRED_MESSAGE}" in run["output"]
    assert done == [("update_file", "README.md", "Hello, world!")]


def test_a_restarted_agent_resumes_and_pauses_again_on_the_next_step(drive):
    done = []
    second = [ToolCallPart("delete_file", {"path": "README.md.bak"}, tool_call_id="delete_backup")]
    d = drive(PydanticAIAgent(file_agent(scripted(FIRST_TURN, second), done)))
    run_id = d.start({"prompt": "clean up"})
    first = d.held(run_id)
    # The process that asked is gone: a new one, with a new Agent, resumes from the history in run state.
    d.restart(PydanticAIAgent(file_agent(scripted(FIRST_TURN, second), done)))
    decision = [{"id": "update_file_dotenv", "action": "approve"}, {"id": "delete_file", "action": "approve"}]
    assert d.decide(first, decision).status_code == 200
    run = d.next_state(run_id)
    assert run["status"] == "held", run
    again = d.held(run_id)
    assert again["hold_id"] != first["hold_id"] and list(ids(again)) == ["delete_backup"]
    reject = {"id": "delete_backup", "action": "reject", "comment": "keep the backup"}
    assert d.decide(again, [reject]).status_code == 200
    run = d.finished(run_id)
    assert run["status"] == "completed" and run["output"] == "delete_backup=keep the backup"
    assert ("delete_file", "README.md.bak") not in done and ("delete_file", "__init__.py") in done


def test_a_lost_history_fails_the_run_naming_it(drive):
    done = []
    d = drive(PydanticAIAgent(file_agent(scripted(FIRST_TURN), done)))
    run_id = d.start({"prompt": "clear .env"})
    hold = d.held(run_id)
    d.lose_run_state(run_id, STATE_KEY)
    decision = [{"id": "update_file_dotenv", "action": "approve"}, {"id": "delete_file", "action": "approve"}]
    assert d.decide(hold, decision).status_code == 200
    run = d.finished(run_id)
    assert run["status"] == "failed"
    assert f"run {run_id} has no paused Pydantic AI run in run state" in str(run["error"])
    assert done == [("update_file", "README.md", "Hello, world!")]


def test_an_external_call_runs_here_once_approved_and_a_rejection_reaches_the_model(drive):
    # "External Tool Execution": the tool raises CallDeferred; its result comes from outside the agent.
    ran = []
    agent = Agent(
        scripted([ToolCallPart("run_job", {"job": "reindex"}, tool_call_id="job_1")]),
        output_type=[str, DeferredToolRequests],
    )

    @agent.tool_plain
    async def run_job(job: str) -> str:
        raise CallDeferred

    def run_external(name, args):
        ran.append((name, args))
        return f"{args['job']} done"

    d = drive(PydanticAIAgent(agent, run_external=run_external))
    for action, output in (("edit", "job_1=reindex-all done"), ("reject", "job_1=")):
        run_id = d.start({"prompt": "reindex"})
        hold = d.held(run_id)
        (item,) = hold["items"]
        assert item["data"] == {"job": "reindex"} and "outside the agent" in item["details"]
        decision = {"id": "job_1", "action": action, "comment": "not during business hours"}
        if action == "edit":
            decision["data"] = {"job": "reindex-all"}
        assert d.decide(hold, [decision]).status_code == 200
        run = d.finished(run_id)
        assert run["status"] == "completed" and run["output"].startswith(output), run
    assert ran == [("run_job", {"job": "reindex-all"})]
    assert "not during business hours" in run["output"]
