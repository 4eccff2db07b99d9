"""Agno adapter on Agno's real runtime (agno 3.x) with a scripted model and a SQLite database, offline."""

import pytest
from agentos.adapters.agno import STATE_KEY, AgnoAgent
from agno.agent import Agent
from agno.db.sqlite import SqliteDb
from agno.tools import tool

from tests.agno_model import ScriptedModel, call, say, tool_messages


@pytest.fixture
def agent(serve_agent):
    return lambda handler: serve_agent("payments", handler)


def payments(tmp_path, ran, first):
    """An agent whose model makes `first` (name, args) as one call, then says what the tool answered."""

    def script(messages):
        results = tool_messages(messages)
        if not results:
            return call(first[0], first[1], "call_1")
        return say(f"FINAL {results[-1].content}")

    @tool(requires_confirmation=True)
    def pay(payee: str, amount: int) -> str:
        """Pay an invoice."""
        ran.append(("pay", payee, amount))
        return f"paid {payee} {amount}"

    @tool(requires_user_input=True, user_input_fields=["to_address"])
    def send_email(subject: str, to_address: str) -> str:
        """Send an email."""
        ran.append(("send_email", subject, to_address))
        return f"sent {subject} to {to_address}"

    def build():
        db = SqliteDb(db_file=str(tmp_path / "agno.db"))
        return Agent(model=ScriptedModel(script), tools=[pay, send_email], db=db, telemetry=False)

    return build


def test_it_holds_a_confirmation_and_runs_the_edited_call_in_a_new_agent(rq, agent, tmp_path):
    ran = []
    build = payments(tmp_path, ran, ("pay", {"payee": "Acme", "amount": 120}))
    run_id = rq.start_run("payments", {"prompt": "pay Acme"}, endpoint=agent(AgnoAgent(build)).url)
    hold = rq.open_hold(run_id)
    (item,) = hold["items"]
    assert item["id"] == "call_1" and item["data"] == {"payee": "Acme", "amount": 120}
    assert item["schema"]["properties"]["amount"] == {"type": "integer"}
    assert item["actions"] == ["approve", "edit", "reject"] and ran == []
    assert set(rq.runs[run_id]["state"][STATE_KEY]) == {"run_id", "session_id", "requirements"}
    # Another process: a fresh server and agent, resumed from the agent's database.
    rq.runs[run_id]["endpoint"] = agent(AgnoAgent(build)).url
    answer = rq.decide(hold["hold_id"], [{"id": "call_1", "action": "edit", "data": {"payee": "Acme", "amount": 99}}])
    assert ran == [("pay", "Acme", 99)]
    assert answer == {"status": "completed", "output": "FINAL paid Acme 99"}


def test_a_rejected_call_never_runs_and_the_model_gets_the_comment(rq, agent, tmp_path):
    ran = []
    build = payments(tmp_path, ran, ("pay", {"payee": "Acme", "amount": 120}))
    run_id = rq.start_run("payments", {"prompt": "pay Acme"}, endpoint=agent(AgnoAgent(build)).url)
    hold = rq.open_hold(run_id)
    answer = rq.decide(hold["hold_id"], [{"id": "call_1", "action": "reject", "comment": "paid last week"}])
    assert ran == [] and answer == {"status": "completed", "output": "FINAL paid last week"}


def test_user_input_is_given_as_an_edit_of_the_fields(rq, agent, tmp_path):
    ran = []
    build = payments(tmp_path, ran, ("send_email", {"subject": "Hello"}))
    run_id = rq.start_run("payments", {"prompt": "mail"}, endpoint=agent(AgnoAgent(build)).url)
    hold = rq.open_hold(run_id)
    (item,) = hold["items"]
    assert item["data"] == {"subject": "Hello", "to_address": None} and item["actions"] == ["edit"]
    assert item["schema"]["properties"]["to_address"]["type"] == "string"
    rq.decide(
        hold["hold_id"],
        [{"id": "call_1", "action": "edit", "data": {"subject": "Hello", "to_address": "a@example.com"}}],
    )
    assert ran == [("send_email", "Hello", "a@example.com")]


def test_a_resume_with_nothing_saved_fails_naming_the_run(rq, agent, tmp_path):
    ran = []
    build = payments(tmp_path, ran, ("pay", {"payee": "Acme", "amount": 120}))
    run_id = rq.start_run("payments", {"prompt": "pay Acme"}, endpoint=agent(AgnoAgent(build)).url)
    hold = rq.open_hold(run_id)
    del rq.runs[run_id]["state"][STATE_KEY]
    answer = rq.decide(hold["hold_id"], [{"id": "call_1", "action": "approve"}])
    assert answer["status"] == "failed" and run_id in answer["error"] and ran == []


def test_it_refuses_an_agent_without_a_database():
    with pytest.raises(ValueError, match="database"):
        AgnoAgent(lambda: Agent(model=ScriptedModel(lambda m: say("hi")), telemetry=False))
