"""Ports of Agno's own human-in-the-loop cookbook, through the real service.

Sources (agno-agi/agno): cookbook/02_agents/10_human_in_the_loop/confirmation_required.py,
user_input_required.py and external_tool_execution.py. Changed per docs/sdk.md: the model is scripted
(no network), the tools' bodies do not reach the internet, and the `for requirement in
run_response.active_requirements: ...` loop with `continue_run` is replaced by `AgnoAgent(build)`.
"""

import json
import threading

from agentos.adapters import EXPIRED_MESSAGE
from agentos.adapters.agno import AgnoAgent
from agno.agent import Agent
from agno.db.sqlite import SqliteDb
from agno.tools import tool
from sqlalchemy import event

from tests.agno_model import ScriptedModel, call, say, tool_messages
from tests.frameworks.conftest import pytestmark  # noqa: F401 (real service: transaction and Redis)


def model_calling(name, args):
    def script(messages):
        done = tool_messages(messages)
        return say(f"FINAL {done[-1].content}") if done else call(name, args, "call_1")

    return ScriptedModel(script)


def test_confirmation_required_edit_and_reject(drive, tmp_path):
    fetched = []

    @tool(requires_confirmation=True)
    def get_top_hackernews_stories(num_stories: int) -> str:
        """Fetch top stories from Hacker News.

        Args:
            num_stories (int): Number of stories to retrieve
        """
        fetched.append(num_stories)
        return json.dumps([{"title": f"story {n}"} for n in range(num_stories)])

    def build():
        return Agent(
            model=model_calling("get_top_hackernews_stories", {"num_stories": 2}),
            tools=[get_top_hackernews_stories],
            markdown=True,
            db=SqliteDb(session_table="test_session", db_file=str(tmp_path / "example.db")),
            telemetry=False,
        )

    d = drive(AgnoAgent(build, prompt=lambda inv: "Fetch the top 2 hackernews stories."))
    run_id = d.start({})
    hold = d.held(run_id)
    (item,) = hold["items"]
    assert item["data"] == {"num_stories": 2} and item["schema"]["properties"]["num_stories"]["type"] == "integer"
    refused = d.decide(hold, [{"id": item["id"], "action": "edit", "data": {"num_stories": "3"}}])
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "items[0].data.num_stories"
    assert d.decide(hold, [{"id": item["id"], "action": "edit", "data": {"num_stories": 3}}]).status_code == 200
    assert d.finished(run_id)["output"].startswith("FINAL [{")
    assert fetched == [3]

    run_id = d.start({})
    hold = d.held(run_id)
    decision = [{"id": hold["items"][0]["id"], "action": "reject", "comment": "not today"}]
    assert d.decide(hold, decision).status_code == 200
    assert d.finished(run_id)["output"] == "FINAL not today"
    assert fetched == [3]  # the rejected call never ran


def test_user_input_required_is_filled_in_by_the_reviewer(drive, tmp_path):
    sent = []

    @tool(requires_user_input=True, user_input_fields=["to_address"])
    def send_email(subject: str, body: str, to_address: str) -> str:
        """
        Send an email.

        Args:
            subject (str): The subject of the email.
            body (str): The body of the email.
            to_address (str): The address to send the email to.
        """
        sent.append((subject, body, to_address))
        return f"Sent email to {to_address} with subject {subject} and body {body}"

    def build():
        return Agent(
            model=model_calling("send_email", {"subject": "Hello", "body": "Hello, world!"}),
            tools=[send_email],
            markdown=True,
            db=SqliteDb(db_file=str(tmp_path / "user_input_required.db")),
            telemetry=False,
        )

    d = drive(AgnoAgent(build))
    run_id = d.start({"prompt": "Send an email with the subject 'Hello' and the body 'Hello, world!'"})
    hold = d.held(run_id)
    (item,) = hold["items"]
    assert item["actions"] == ["edit"] and item["data"]["to_address"] is None
    data = {**item["data"], "to_address": "alice@example.com"}
    assert d.decide(hold, [{"id": item["id"], "action": "edit", "data": data}]).status_code == 200
    assert d.finished(run_id)["status"] == "completed"
    assert sent == [("Hello", "Hello, world!", "alice@example.com")]


def test_user_input_required_that_expires_never_runs_the_tool(drive, tmp_path):
    sent = []

    @tool(requires_user_input=True, user_input_fields=["to_address"])
    def send_email(subject: str, body: str, to_address: str) -> str:
        """Send an email."""
        sent.append((subject, body, to_address))
        return f"Sent email to {to_address}"

    def build():
        return Agent(
            model=model_calling("send_email", {"subject": "Hello", "body": "Hello, world!"}),
            tools=[send_email],
            db=SqliteDb(db_file=str(tmp_path / "user_input_expiry.db")),
            telemetry=False,
        )

    d = drive(AgnoAgent(build))
    run_id = d.start({"prompt": "Send an email"})
    run = d.expired(run_id)
    assert sent == []  # never with empty fields
    assert run["status"] == "completed" and run["output"] == f"FINAL {EXPIRED_MESSAGE}"
    assert [h["status"] for h in run["holds"]] == ["expired"]


def test_external_tool_execution_runs_here_only_once_approved(drive, tmp_path):
    executed = []

    @tool(external_execution=True)
    def execute_shell_command(command: str) -> str:
        """Execute a shell command.

        Args:
            command (str): The shell command to execute
        """
        raise AssertionError("runs outside the agent")

    def run_external(name, args):
        executed.append(args["command"])
        return "a.txt b.txt"

    def build():
        return Agent(
            model=model_calling("execute_shell_command", {"command": "ls"}),
            tools=[execute_shell_command],
            markdown=True,
            db=SqliteDb(session_table="test_session", db_file=str(tmp_path / "example.db")),
            telemetry=False,
        )

    d = drive(AgnoAgent(build, run_external=run_external))
    run_id = d.start({"prompt": "What files do I have in my current directory?"})
    hold = d.held(run_id)
    edit = {"id": hold["items"][0]["id"], "action": "edit", "data": {"command": "ls -a"}}
    assert d.decide(hold, [edit]).status_code == 200
    assert d.finished(run_id)["output"] == "FINAL a.txt b.txt"
    assert executed == ["ls -a"]

    run_id = d.start({"prompt": "again"})
    hold = d.held(run_id)
    assert (
        d.decide(hold, [{"id": hold["items"][0]["id"], "action": "reject", "comment": "no shell"}]).status_code == 200
    )
    output = d.finished(run_id)["output"]
    assert executed == ["ls -a"] and "no shell" in output


class FirstUseAtOnce:
    """Forces the race of two first uses: each run's first CREATE TABLE waits until the other run has
    reached its own (so both have found the table missing), then both go on. Armed once the adapter is
    made; prepared tables mean no run issues a CREATE TABLE, and nothing waits."""

    def __init__(self):
        self.barrier = threading.Barrier(2, timeout=30)
        self.armed = False
        self.arrived = 0
        self.lock = threading.Lock()

    def watch(self, engine):
        @event.listens_for(engine, "before_cursor_execute")
        def hold(conn, cursor, statement, *args):
            if not (self.armed and statement.lstrip().upper().startswith("CREATE TABLE")):
                return
            with self.lock:
                self.arrived += 1
                first_two = self.arrived <= 2
            if first_two:
                self.barrier.wait()

        return engine


def test_two_runs_at_once_on_a_fresh_sqlite_file_both_pause_and_resume(drive, tmp_path):
    """Agno creates its tables on first use; two first uses at once raced (`table … already exists`) and
    one paused run was not stored, yet a person was asked."""
    fetched = []
    race = FirstUseAtOnce()

    @tool(requires_confirmation=True)
    def get_top_hackernews_stories(num_stories: int) -> str:
        """Fetch top stories from Hacker News."""
        fetched.append(num_stories)
        return f"{num_stories} stories"

    def build():
        db = SqliteDb(db_file=str(tmp_path / "fresh.db"))
        race.watch(db.db_engine)
        return Agent(
            model=model_calling("get_top_hackernews_stories", {"num_stories": 2}),
            tools=[get_top_hackernews_stories],
            db=db,
            telemetry=False,
        )

    d = drive(AgnoAgent(build, prompt=lambda inv: "Fetch the top 2 hackernews stories."))
    race.armed = True
    for run in d.at_once([{}, {}]):
        assert (run["status"], run["output"]) == ("completed", "FINAL 2 stories"), run
    assert fetched == [2, 2]


def test_a_pause_agno_did_not_store_fails_the_run_without_asking(drive, tmp_path):
    class ForgetfulDb(SqliteDb):
        """Logs nothing and keeps nothing, as a failed save does in Agno (which only logs it)."""

        def upsert_session(self, *args, **kwargs):
            return None

        def upsert_run(self, *args, **kwargs):
            return None

    @tool(requires_confirmation=True)
    def get_top_hackernews_stories(num_stories: int) -> str:
        """Fetch top stories from Hacker News."""
        raise AssertionError("never approved")

    def build():
        return Agent(
            model=model_calling("get_top_hackernews_stories", {"num_stories": 2}),
            tools=[get_top_hackernews_stories],
            db=ForgetfulDb(db_file=str(tmp_path / "forgetful.db")),
            telemetry=False,
        )

    d = drive(AgnoAgent(build, prompt=lambda inv: "Fetch the top 2 hackernews stories."))
    run = d.finished(d.start({}))
    assert run["status"] == "failed" and run["holds"] == []
    assert "did not keep it" in str(run["error"])


def test_a_second_pause_after_a_resume_then_an_expiry_refuses_only_the_second_call(drive, tmp_path):
    fetched = []

    @tool(requires_confirmation=True)
    def get_top_hackernews_stories(num_stories: int) -> str:
        """Fetch top stories from Hacker News."""
        fetched.append(num_stories)
        return f"{num_stories} stories"

    def script(messages):
        done = tool_messages(messages)
        if len(done) < 2:
            return call("get_top_hackernews_stories", {"num_stories": len(done) + 1}, f"call_{len(done) + 1}")
        return say("FINAL " + " | ".join(m.content for m in done))

    def build():
        return Agent(
            model=ScriptedModel(script),
            tools=[get_top_hackernews_stories],
            db=SqliteDb(db_file=str(tmp_path / "two_pauses.db")),
            telemetry=False,
        )

    d = drive(AgnoAgent(build, prompt=lambda inv: "Fetch stories twice."))
    run_id = d.start({})
    first = d.held(run_id)
    assert [i["id"] for i in first["items"]] == ["call_1"]
    d.approve(first)
    second = d.held_again(run_id)
    assert [i["id"] for i in second["items"]] == ["call_2"]
    run = d.expired(run_id)
    assert run["status"] == "completed" and run["output"] == f"FINAL 1 stories | {EXPIRED_MESSAGE}"
    assert fetched == [1]
    assert [h["status"] for h in run["holds"]] == ["decided", "expired"]
