"""Ports of LangGraph's and LangChain's own human-in-the-loop examples, through the real service.

Sources (the nodes below are the docs' own code; only what docs/sdk.md says to change is changed):
- langchain-ai/docs, src/oss/langgraph/interrupts.mdx (docs.langchain.com/oss/python/langgraph/interrupts):
  "Approve or reject", "Review and edit state", "Interrupts in tools", "Validating human input".
- langchain-ai/docs, src/oss/langchain/human-in-the-loop.mdx: HumanInTheLoopMiddleware, batched and per_call.
Changed per docs/sdk.md: the checkpointer is SqliteSaver (the docs use InMemorySaver), the graph is served by
LangGraphAgent, the model is scripted (no network), and each example's one adapter line.
"""

import sqlite3
from typing import Literal, TypedDict

from agentos.adapters import EXPIRED_MESSAGE
from agentos.adapters.langgraph import LangGraphAgent
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from tests.frameworks.conftest import pytestmark  # noqa: F401 (real service: transaction and Redis)


def saver(tmp_path):
    return SqliteSaver(sqlite3.connect(tmp_path / "checkpoints.sqlite", check_same_thread=False))


# --- "Approve or reject" --------------------------------------------------------------------------


class ApprovalState(TypedDict, total=False):
    action_details: str
    status: str


def approval_graph(checkpointer, ran):
    def approval_node(state: ApprovalState) -> Command[Literal["proceed", "cancel"]]:
        is_approved = interrupt(
            {"question": "Do you want to proceed with this action?", "details": state["action_details"]}
        )
        if is_approved:
            return Command(goto="proceed")
        else:
            return Command(goto="cancel")

    def proceed(state):
        ran.append(state["action_details"])
        return {"status": "approved"}

    def cancel(state):
        return {"status": "rejected"}

    builder = StateGraph(ApprovalState)
    builder.add_node("approval", approval_node)
    builder.add_node("proceed", proceed)
    builder.add_node("cancel", cancel)
    builder.add_edge(START, "approval")
    builder.add_edge("proceed", END)
    builder.add_edge("cancel", END)
    return builder.compile(checkpointer=checkpointer)


def test_approve_or_reject_takes_the_docs_branches(drive, tmp_path):
    ran = []
    d = drive(LangGraphAgent(approval_graph(saver(tmp_path), ran)))
    for action, status in (("reject", "rejected"), ("approve", "approved")):
        run_id = d.start({"action_details": f"Transfer $500 ({action})"})
        hold = d.held(run_id)
        (item,) = hold["items"]
        assert item["data"]["details"] == f"Transfer $500 ({action})"
        assert (
            d.decide(
                hold, [{"id": item["id"], "action": action, "comment": "no" if action == "reject" else None}]
            ).status_code
            == 200
        )
        assert d.finished(run_id)["output"]["status"] == status
    assert ran == ["Transfer $500 (approve)"]  # the rejected step never ran


def test_two_runs_at_once_on_a_fresh_checkpoint_file_both_pause_and_resume(drive, tmp_path):
    ran = []
    d = drive(LangGraphAgent(approval_graph(saver(tmp_path), ran)))
    runs = d.at_once([{"action_details": "Transfer $1"}, {"action_details": "Transfer $2"}])
    assert [r["output"]["status"] for r in runs] == ["approved", "approved"], runs
    assert sorted(ran) == ["Transfer $1", "Transfer $2"]


# --- "Review and edit state" ----------------------------------------------------------------------


class ReviewState(TypedDict, total=False):
    generated_text: str


def review_graph(checkpointer):
    def review_node(state: ReviewState):
        edited_content = interrupt({"instruction": "Review and edit this content", "content": state["generated_text"]})
        return {"generated_text": edited_content}

    builder = StateGraph(ReviewState)
    builder.add_node("review", review_node)
    builder.add_edge(START, "review")
    return builder.compile(checkpointer=checkpointer)


def edited_content(value, decided):
    # docs/sdk.md, "Review and edit state": the node reads the edited text itself.
    return (decided.data if decided and decided.action == "edit" else value)["content"]


def test_review_and_edit_gives_the_node_the_edited_text(drive, tmp_path):
    d = drive(LangGraphAgent(review_graph(saver(tmp_path)), answer=edited_content))
    run_id = d.start({"generated_text": "Helo wrld"})
    hold = d.held(run_id)
    (item,) = hold["items"]
    # A wrongly typed edit is refused at the decision; the hold stays pending and can be answered again.
    bad = {"id": item["id"], "action": "edit", "data": {**item["data"], "content": 42}}
    refused = d.decide(hold, [bad])
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "items[0].data.content"
    good = {"id": item["id"], "action": "edit", "data": {**item["data"], "content": "Hello world"}}
    assert d.decide(hold, [good]).status_code == 200
    assert d.finished(run_id)["output"] == {"generated_text": "Hello world"}


# --- "Validating human input" ---------------------------------------------------------------------


class AgeState(TypedDict, total=False):
    age: int


def age_graph(checkpointer):
    def get_age_node(state: AgeState):
        prompt = "What is your age?"
        while True:
            answer = interrupt(prompt)
            if isinstance(answer, int) and answer > 0:
                break
            else:
                prompt = f"'{answer}' is not a valid age. Please enter a positive number."
        return {"age": answer}

    builder = StateGraph(AgeState)
    builder.add_node("get_age", get_age_node)
    builder.add_edge(START, "get_age")
    return builder.compile(checkpointer=checkpointer)


AGE = {"type": "object", "properties": {"value": {"type": "integer", "minimum": 1}}, "required": ["value"]}


def test_a_validation_loop_gets_a_typed_answer_checked_before_it_is_stored(drive, tmp_path):
    d = drive(LangGraphAgent(age_graph(saver(tmp_path)), schema=AGE))
    run_id = d.start({})
    hold = d.held(run_id)
    (item,) = hold["items"]
    assert item["data"] == {"value": "What is your age?"} and item["schema"] == AGE
    refused = d.decide(hold, [{"id": item["id"], "action": "edit", "data": {"value": -3}}])
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "items[0].data.value"
    assert d.decide(hold, [{"id": item["id"], "action": "edit", "data": {"value": 30}}]).status_code == 200
    assert d.finished(run_id)["output"] == {"age": 30}


# --- "Interrupts in tools" ------------------------------------------------------------------------


class ToolModel(GenericFakeChatModel):
    """Scripted model: no network. create_agent binds tools; the fake has no tools to bind."""

    def bind_tools(self, tools, **kw):
        return self


def email_agent(checkpointer, sent):
    @tool
    def send_email(to: str, subject: str, body: str):
        """Send an email to a recipient."""
        response = interrupt(
            {
                "action": "send_email",
                "to": to,
                "subject": subject,
                "body": body,
                "message": "Approve sending this email?",
            }
        )
        if response.get("action") == "approve":
            final_to = response.get("to", to)
            final_subject = response.get("subject", subject)
            final_body = response.get("body", body)
            sent.append((final_to, final_subject, final_body))
            return f"Email sent to {final_to} with subject '{final_subject}'"
        return "Email cancelled by user"

    call = {"name": "send_email", "args": {"to": "alice@example.com", "subject": "Hi", "body": "Hello"}, "id": "c1"}
    model = ToolModel(
        messages=iter([AIMessage(content="", tool_calls=[{**call, "type": "tool_call"}]), AIMessage("done")])
    )
    return create_agent(model, tools=[send_email], checkpointer=checkpointer)


def messages_in(inv):
    return {"messages": [{"role": "user", "content": inv.input["task"]}]}


def last_tool_message(values):
    return [m.content for m in values["messages"] if m.type == "tool"][-1]


def test_interrupts_in_tools_send_the_edited_email_and_never_a_rejected_one(drive, tmp_path):
    sent = []
    for action, expected in (
        ("edit", "Email sent to bob@example.com with subject 'Hi'"),
        ("reject", "Email cancelled by user"),
    ):
        (tmp_path / action).mkdir()
        graph = email_agent(saver(tmp_path / action), sent)
        d = drive(LangGraphAgent(graph, input=messages_in, output=last_tool_message))
        run_id = d.start({"task": "email alice"})
        hold = d.held(run_id)
        (item,) = hold["items"]
        decision = {"id": item["id"], "action": action, "comment": "not now" if action == "reject" else None}
        if action == "edit":
            decision["data"] = {**item["data"], "to": "bob@example.com"}
        assert d.decide(hold, [decision]).status_code == 200
        assert d.finished(run_id)["output"] == expected
    assert sent == [("bob@example.com", "Hi", "Hello")]


# --- LangChain HumanInTheLoopMiddleware -----------------------------------------------------------


def hitl_agent(checkpointer, ran, mode, turns=None):
    @tool
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        ran.append(("write_file", path, content))
        return f"wrote {path}"

    @tool
    def execute_sql(query: str) -> str:
        """Run a SQL statement."""
        ran.append(("execute_sql", query))
        return "ok"

    calls = [
        {"name": "write_file", "args": {"path": "a.txt", "content": "x"}, "id": "c1", "type": "tool_call"},
        {"name": "execute_sql", "args": {"query": "DELETE FROM t"}, "id": "c2", "type": "tool_call"},
    ]
    replies = [AIMessage(content="", tool_calls=t) for t in turns or [calls]]
    model = ToolModel(messages=iter([*replies, AIMessage("done")]))
    middleware = HumanInTheLoopMiddleware(
        interrupt_on={
            "write_file": True,
            "execute_sql": {"allowed_decisions": ["approve", "reject"], "description": "SQL needs a DBA's eye"},
        },
        **({} if mode == "batched" else {"interrupt_mode": "per_call"}),
    )
    return create_agent(model, tools=[write_file, execute_sql], checkpointer=checkpointer, middleware=[middleware])


def tool_results(values):
    return {m.tool_call_id: (m.status, m.content) for m in values["messages"] if m.type == "tool"}


def run_middleware(drive, tmp_path, mode, turns=None):
    ran = []
    graph = hitl_agent(saver(tmp_path), ran, mode, turns)
    d = drive(LangGraphAgent(graph, input=messages_in, output=tool_results))
    run_id = d.start({"task": "tidy"})
    hold = d.held(run_id)
    return d, run_id, hold, {i["title"].split("(")[0]: i for i in hold["items"]}, ran


def test_batched_middleware_keeps_each_calls_own_decisions_and_description(drive, tmp_path):
    d, run_id, hold, by_name, ran = run_middleware(drive, tmp_path, "batched")
    write, sql = by_name["write_file"], by_name["execute_sql"]
    assert write["actions"] == ["approve", "edit", "reject"] and sql["actions"] == ["approve", "reject"]
    assert sql["details"] == "SQL needs a DBA's eye"
    assert write["schema"]["properties"]["content"]["type"] == "string"
    decision = [
        {"id": write["id"], "action": "edit", "data": {"path": "b.txt", "content": "y"}},
        {"id": sql["id"], "action": "reject", "comment": "use a migration"},
    ]
    assert d.decide(hold, decision).status_code == 200
    output = d.finished(run_id)["output"]
    assert ran == [("write_file", "b.txt", "y")]
    assert output["c2"][0] == "error" and "use a migration" in output["c2"][1]


def test_per_call_middleware_asks_each_call_and_applies_each_decision(drive, tmp_path):
    d, run_id, hold, by_name, ran = run_middleware(drive, tmp_path, "per_call")
    write, sql = by_name["write_file"], by_name["execute_sql"]
    # One interrupt per call, each its own item, with its own decisions, description and argument schema.
    assert write["actions"] == ["approve", "edit", "reject"] and sql["actions"] == ["approve", "reject"]
    assert sql["details"] == "SQL needs a DBA's eye"
    reject = {"id": sql["id"], "action": "reject", "comment": "use a migration"}
    bad = {"id": write["id"], "action": "edit", "data": {"path": "b.txt", "content": 7}}
    refused = d.decide(hold, [bad, reject])
    assert refused.status_code == 422  # the tool's own schema, checked before anything is stored
    assert [e["field"] for e in refused.json()["errors"]] == ["items[0].data.content"]
    good = {"id": write["id"], "action": "edit", "data": {"path": "b.txt", "content": "y"}}
    assert d.decide(hold, [good, reject]).status_code == 200
    output = d.finished(run_id)["output"]
    assert ran == [("write_file", "b.txt", "y")]
    assert output["c2"][0] == "error" and "use a migration" in output["c2"][1]


def test_expiry_rejects_every_call_telling_the_model_it_expired(drive, tmp_path):
    d, run_id, hold, by_name, ran = run_middleware(drive, tmp_path, "batched")
    output = d.expired(run_id)["output"]
    assert ran == []
    for call_id in ("c1", "c2"):
        status, content = output[call_id]
        assert status == "error" and EXPIRED_MESSAGE in content, output


def test_a_second_pause_after_a_resume_is_a_second_hold(drive, tmp_path):
    write = {"name": "write_file", "args": {"path": "a.txt", "content": "x"}, "id": "c1", "type": "tool_call"}
    sql = {"name": "execute_sql", "args": {"query": "DELETE FROM t"}, "id": "c2", "type": "tool_call"}
    d, run_id, first, by_name, ran = run_middleware(drive, tmp_path, "batched", turns=[[write], [sql]])
    assert list(by_name) == ["write_file"]
    d.approve(first)
    second = d.held_again(run_id)
    assert [i["title"].split("(")[0] for i in second["items"]] == ["execute_sql"] and ran == [
        ("write_file", "a.txt", "x")
    ]
    d.approve(second)
    run = d.finished(run_id)
    assert run["output"] == {"c1": ["success", "wrote a.txt"], "c2": ["success", "ok"]}, run
    assert ran == [("write_file", "a.txt", "x"), ("execute_sql", "DELETE FROM t")]
