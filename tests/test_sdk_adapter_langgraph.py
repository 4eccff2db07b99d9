"""LangGraph adapter against the real langgraph/langchain, offline: no model, no network."""

import operator
import sqlite3
from typing import Annotated, TypedDict

import pytest
from agentos.adapters.langgraph import LangGraphAgent
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt


@pytest.fixture
def agent(serve_agent):
    return lambda handler, capability="cap": serve_agent(capability, handler)


class PayState(TypedDict, total=False):
    payments: Annotated[list, operator.add]


def payment_graph(saver, bank):
    """Two nodes in one superstep, each pausing once before it pays."""

    def pay(payee, amount):
        def node(state):
            decision = interrupt({"title": f"Pay {payee}", "payee": payee, "amount": amount})
            if decision["action"] != "approve" and decision["action"] != "edit":
                return {"payments": [{"skipped": payee, "why": decision["comment"]}]}
            bank.append(decision["data"])
            return {"payments": [decision["data"]]}

        return node

    builder = StateGraph(PayState)
    builder.add_node("pay_acme", pay("Acme", "120.00"))
    builder.add_node("pay_globex", pay("Globex", "99.00"))
    builder.add_edge(START, "pay_acme")
    builder.add_edge(START, "pay_globex")
    return builder.compile(checkpointer=saver)


def test_it_asks_one_hold_for_two_interrupts_in_one_step_and_never_runs_a_rejected_one(rq, agent, tmp_path):
    db = tmp_path / "checkpoints.sqlite"
    bank = []
    first = LangGraphAgent(
        payment_graph(SqliteSaver(sqlite3.connect(db, check_same_thread=False)), bank), answer="decision"
    )
    server = agent(first)
    run_id = rq.start_run("cap", {"payments": []}, endpoint=server.url)
    hold = rq.open_hold(run_id)
    assert rq.runs[run_id]["status"] == "held"
    assert len(rq.runs[run_id]["holds"]) == 1
    by_title = {i["title"]: i for i in hold["items"]}
    assert set(by_title) == {"Pay Acme", "Pay Globex"}
    assert by_title["Pay Acme"]["data"] == {
        "title": "Pay Acme",
        "payee": "Acme",
        "amount": "120.00",
    }
    assert hold["actions"] == ["approve", "edit", "reject"]
    assert bank == []

    # A new process: a fresh checkpointer connection and graph resume the same thread.
    second = LangGraphAgent(
        payment_graph(SqliteSaver(sqlite3.connect(db, check_same_thread=False)), bank), answer="decision"
    )
    rq.runs[run_id]["endpoint"] = agent(second).url
    edited = {"title": "Pay Acme", "payee": "Acme Corp", "amount": "120.00"}
    answer = rq.decide(
        hold["hold_id"],
        [
            {"id": by_title["Pay Acme"]["id"], "action": "edit", "data": edited},
            {"id": by_title["Pay Globex"]["id"], "action": "reject"},
        ],
        comment="Globex was paid by card",
    )
    assert answer["status"] == "completed"
    assert bank == [edited]  # the rejected payment never ran
    assert sorted(answer["output"]["payments"], key=str) == sorted(
        [edited, {"skipped": "Globex", "why": "Globex was paid by card"}], key=str
    )


def test_it_rejects_every_pause_when_the_hold_expires(rq, agent):
    bank = []
    server = agent(LangGraphAgent(payment_graph(InMemorySaver(), bank), answer="decision", in_memory_ok=True))
    run_id = rq.start_run("cap", {}, endpoint=server.url)
    answer = rq.expire(rq.open_hold(run_id)["hold_id"])
    assert answer["status"] == "completed"
    assert bank == []
    assert {p["skipped"] for p in answer["output"]["payments"]} == {"Acme", "Globex"}


def test_it_suspends_on_the_same_hold_when_a_start_is_delivered_again(rq, agent):
    bank = []
    server = agent(LangGraphAgent(payment_graph(InMemorySaver(), bank), answer="decision", in_memory_ok=True))
    run_id = rq.start_run("cap", {}, endpoint=server.url)
    hold_id = rq.open_hold(run_id)["hold_id"]
    assert rq.deliver(run_id) == {"status": "suspended", "hold_id": hold_id}
    assert len(rq.runs[run_id]["holds"]) == 1


def test_it_refuses_a_graph_without_a_checkpointer():
    with pytest.raises(ValueError, match="checkpointer"):
        LangGraphAgent(payment_graph(None, []))


# --- LangChain's HumanInTheLoopMiddleware -------------------------------------------------


class ToolModel(GenericFakeChatModel):
    def bind_tools(self, tools, **kw):
        return self


def hitl_agent(calls, ran, mode="batched", gates=None):
    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        ran.append(("send_email", to, body))
        return f"sent to {to}"

    @tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(("delete_file", path))
        return f"deleted {path}"

    model = ToolModel(
        messages=iter(
            [
                AIMessage(
                    content="",
                    tool_calls=[
                        {"name": name, "args": args, "id": f"call_{n}", "type": "tool_call"}
                        for n, (name, args) in enumerate(calls)
                    ],
                ),
                AIMessage("all done"),
            ]
        )
    )
    gates = gates or {
        "send_email": True,
        "delete_file": {"allowed_decisions": ["approve", "reject"]},
    }
    kw = {} if mode == "batched" else {"interrupt_mode": "per_call"}
    return create_agent(
        model,
        tools=[send_email, delete_file],
        checkpointer=InMemorySaver(),
        middleware=[HumanInTheLoopMiddleware(interrupt_on=gates, **kw)],
    )


def messages_input(inv):
    return {"messages": [{"role": "user", "content": inv.input["task"]}]}


def tool_messages(output):
    return {m["tool_call_id"]: m for m in output["messages"] if m.get("type") == "tool"}


def keep_messages(values):
    return {"messages": [m.model_dump() for m in values["messages"]]}


@pytest.mark.parametrize("mode", ["batched", "per_call"])
def test_it_turns_middleware_requests_into_one_hold_each_call_with_its_own_decisions(rq, agent, mode):
    ran = []
    graph = hitl_agent(
        [("send_email", {"to": "a@x", "body": "hi"}), ("delete_file", {"path": "/report"})],
        ran,
        mode=mode,
    )
    server = agent(LangGraphAgent(graph, input=messages_input, output=keep_messages, in_memory_ok=True))
    run_id = rq.start_run("cap", {"task": "tidy up"}, endpoint=server.url)
    hold = rq.open_hold(run_id)
    assert [(i["title"], i["data"]) for i in hold["items"]] == [
        ('send_email(to="a@x", body="hi")', {"to": "a@x", "body": "hi"}),
        ('delete_file(path="/report")', {"path": "/report"}),
    ]
    # Each call keeps its own decisions (never the intersection), its description and its argument schema.
    assert [i["actions"] for i in hold["items"]] == [["approve", "edit", "reject"], ["approve", "reject"]]
    assert hold["actions"] == ["approve", "edit", "reject"]
    assert all(i["details"].startswith("Tool execution requires approval") for i in hold["items"])
    assert hold["items"][0]["schema"]["properties"] == {
        "to": {"title": "To", "type": "string"},
        "body": {"title": "Body", "type": "string"},
    }
    assert hold["intent"] == "Approve 2 tool call(s): delete_file, send_email"
    assert ran == []

    send, delete = (i["id"] for i in hold["items"])
    answer = rq.decide(
        hold["hold_id"],
        [
            {"id": send, "action": "approve"},
            {"id": delete, "action": "reject", "comment": "keep the report"},
        ],
    )
    assert answer["status"] == "completed"
    assert ran == [("send_email", "a@x", "hi")]
    results = tool_messages(answer["output"])
    assert results["call_1"]["status"] == "error"  # a rejection, never a `respond`
    assert "keep the report" in results["call_1"]["content"]
    assert results["call_0"]["content"] == "sent to a@x"


def test_it_runs_an_edited_tool_call_with_the_reviewers_arguments(rq, agent):
    ran = []
    graph = hitl_agent([("send_email", {"to": "a@x", "body": "hi"})], ran)
    server = agent(LangGraphAgent(graph, input=messages_input, output=keep_messages, in_memory_ok=True))
    run_id = rq.start_run("cap", {"task": "mail"}, endpoint=server.url)
    hold = rq.open_hold(run_id)
    assert hold["actions"] == ["approve", "edit", "reject"]
    rq.decide(
        hold["hold_id"],
        [
            {
                "id": hold["items"][0]["id"],
                "action": "edit",
                "data": {"to": "b@x", "body": "hello"},
            },
        ],
    )
    assert ran == [("send_email", "b@x", "hello")]


def test_it_turns_feedback_into_a_rejection_with_the_comment(rq, agent):
    ran = []
    graph = hitl_agent([("send_email", {"to": "a@x", "body": "hi"})], ran)
    server = agent(
        LangGraphAgent(
            graph, input=messages_input, output=keep_messages, in_memory_ok=True, actions=["approve", "feedback"]
        )
    )
    run_id = rq.start_run("cap", {"task": "mail"}, endpoint=server.url)
    hold = rq.open_hold(run_id)
    assert hold["actions"] == ["approve", "feedback"]
    answer = rq.decide(
        hold["hold_id"],
        [
            {"id": hold["items"][0]["id"], "action": "feedback", "comment": "say please"},
        ],
    )
    assert ran == []
    result = tool_messages(answer["output"])["call_0"]
    assert result["status"] == "error"
    assert "say please" in result["content"]


# --- the docs' own ways of reading a plain interrupt ------------------------------------------


class Draft(TypedDict, total=False):
    text: str
    sent: bool


def gate_graph(node):
    builder = StateGraph(Draft)
    builder.add_node("gate", node)
    builder.add_edge(START, "gate")
    return builder.compile(checkpointer=InMemorySaver())


def test_a_truth_reading_node_takes_its_reject_branch_on_a_reject(rq, agent):
    def approval(state):
        if interrupt({"question": "Send it?", "text": state["text"]}):
            return {"sent": True}
        return {"sent": False}

    server = agent(LangGraphAgent(gate_graph(approval), in_memory_ok=True))
    run_id = rq.start_run("cap", {"text": "hi"}, endpoint=server.url)
    hold = rq.open_hold(run_id)
    answer = rq.decide(hold["hold_id"], [{"id": hold["items"][0]["id"], "action": "reject", "comment": "no"}])
    assert answer == {"status": "completed", "output": {"text": "hi", "sent": False}}


def test_an_edit_gives_an_edit_reading_node_the_edited_value_itself(rq, agent):
    def review(state):
        return {"text": interrupt(state["text"])}

    server = agent(LangGraphAgent(gate_graph(review), in_memory_ok=True))
    run_id = rq.start_run("cap", {"text": "draft"}, endpoint=server.url)
    hold = rq.open_hold(run_id)
    assert hold["items"][0]["data"] == {"value": "draft"}
    edit = {"id": hold["items"][0]["id"], "action": "edit", "data": {"value": "final"}}
    assert rq.decide(hold["hold_id"], [edit])["output"] == {"text": "final"}


def test_a_resume_with_no_pending_interrupt_fails_naming_the_thread(rq, agent):
    def review(state):
        return {"text": interrupt(state["text"])}

    server = agent(LangGraphAgent(gate_graph(review), in_memory_ok=True))
    run_id = rq.start_run("cap", {"text": "draft"}, endpoint=server.url)
    hold = rq.open_hold(run_id)
    # The agent restarted with an empty in-memory checkpointer: the pause is gone.
    rq.runs[run_id]["endpoint"] = agent(LangGraphAgent(gate_graph(review), in_memory_ok=True)).url
    answer = rq.decide(hold["hold_id"], [{"id": hold["items"][0]["id"], "action": "approve"}])
    assert answer["status"] == "failed" and f"thread {run_id}" in answer["error"]


def test_it_refuses_an_in_memory_checkpointer_unless_told():
    with pytest.raises(ValueError, match="in_memory_ok"):
        LangGraphAgent(payment_graph(InMemorySaver(), []))


def test_a_response_schema_becomes_the_items_schema_and_the_node_gets_a_valid_value(rq, agent):
    from pydantic import BaseModel

    class Age(BaseModel):
        age: int

    class AgeState(TypedDict, total=False):
        age: int

    def ask_age(state):
        return {"age": interrupt("How old are you?", response_schema=Age).age}

    builder = StateGraph(AgeState)
    builder.add_node("ask", ask_age)
    builder.add_edge(START, "ask")
    server = agent(LangGraphAgent(builder.compile(checkpointer=InMemorySaver()), in_memory_ok=True))
    run_id = rq.start_run("cap", {}, endpoint=server.url)
    hold = rq.open_hold(run_id)
    (item,) = hold["items"]
    assert item["data"] == {"age": None} and item["details"] == "How old are you?"
    assert item["schema"]["properties"]["age"]["type"] == "integer"
    assert item["actions"] == ["edit"]  # nothing to approve until a person answers; no way to say no
    with pytest.raises(ValueError, match="data.age"):
        rq.decide(hold["hold_id"], [{"id": item["id"], "action": "edit", "data": {"age": "thirty"}}])
    answer = rq.decide(hold["hold_id"], [{"id": item["id"], "action": "edit", "data": {"age": 30}}])
    assert answer == {"status": "completed", "output": {"age": 30}}
