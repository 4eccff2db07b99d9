"""Port of Google ADK's own tool-confirmation sample, through the real service.

Source: google/adk-python, contributing/samples/human_tool_confirmation/agent.py (read from a mirror of
the repository, thesynapses/adk-python at c727c3ff; the stored snapshot of google/adk-python predates
it). The tools `reimburse` (with `require_confirmation=confirmation_threshold`) and `request_time_off`
(with `tool_context.request_confirmation(payload={'approved_days': 0})`), the agent's instruction and
the resumable `App` are the sample's. Changed per docs/sdk.md:
- `model='gemini-2.5-flash'` → a scripted `BaseLlm` (no network; it ignores `generate_content_config`);
- the tools append what they did to a list (the sample's bodies are otherwise unchanged);
- `adk web`'s confirmation round trip → `ADKAgent(app=app, session_service=DatabaseSessionService(…))`.
"""

import pytest
from agentos.adapters import EXPIRED_MESSAGE
from agentos.adapters.adk import ADKAgent
from google.adk import Agent
from google.adk.apps import App, ResumabilityConfig
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.sessions import DatabaseSessionService, InMemorySessionService
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from tests.frameworks.conftest import pytestmark  # noqa: F401 (real service: transaction and Redis)

WAITING = ("approval is required", "requires confirmation")


class ScriptedLlm(BaseLlm):
    """Calls the tools of `turns[n]` on its n-th tool turn; while a call waits for a person it says so,
    and after the last turn it reports the tools' responses. It reads only the request, so a restarted
    agent continues the script from the session's history."""

    model: str = "scripted"
    turns: list = []

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False):
        responses = [p.function_response for p in llm_request.contents[-1].parts if p.function_response]
        if any(w in str(r.response) for r in responses for w in WAITING):
            yield text("Waiting for a manager's approval.")
            return
        step = sum(any(p.function_call for p in c.parts) for c in llm_request.contents if c.role == "model")
        if step < len(self.turns):
            calls = [types.Part(function_call=types.FunctionCall(id=i, name=n, args=a)) for i, n, a in self.turns[step]]
            yield LlmResponse(content=types.Content(role="model", parts=calls))
            return
        yield text("; ".join(f"{r.name}={r.response}" for r in responses))


def text(words):
    return LlmResponse(content=types.Content(role="model", parts=[types.Part.from_text(text=words)]))


def time_off_app(turns, done):
    def reimburse(amount: int, tool_context: ToolContext) -> str:
        """Reimburse the employee for the given amount."""
        done.append(("reimburse", amount))
        return {"status": "ok"}

    async def confirmation_threshold(amount: int, tool_context: ToolContext) -> bool:
        """Returns true if the amount is greater than 1000."""
        return amount > 1000

    def request_time_off(days: int, tool_context: ToolContext):
        """Request day off for the employee."""
        if days <= 0:
            return {"status": "Invalid days to request."}

        if days <= 2:
            return {
                "status": "ok",
                "approved_days": days,
            }

        tool_confirmation = tool_context.tool_confirmation
        if not tool_confirmation:
            tool_context.request_confirmation(
                hint=(
                    "Please approve or reject the tool call request_time_off() by"
                    " responding with a FunctionResponse with an expected"
                    " ToolConfirmation payload."
                ),
                payload={
                    "approved_days": 0,
                },
            )
            return {"status": "Manager approval is required."}

        approved_days = tool_confirmation.payload["approved_days"]
        approved_days = min(approved_days, days)
        done.append(("request_time_off", approved_days))
        if approved_days == 0:
            return {"status": "The time off request is rejected.", "approved_days": 0}
        return {
            "status": "ok",
            "approved_days": approved_days,
        }

    root_agent = Agent(
        model=ScriptedLlm(turns=turns),
        name="time_off_agent",
        instruction="""
    You are a helpful assistant that can help employees with reimbursement and time off requests.
    - Use the `reimburse` tool for reimbursement requests.
    - Use the `request_time_off` tool for time off requests.
    - Prioritize using tools to fulfill the user's request.
    - Always respond to the user with the tool results.
    """,
        tools=[
            FunctionTool(
                reimburse,
                require_confirmation=confirmation_threshold,
            ),
            request_time_off,
        ],
        generate_content_config=types.GenerateContentConfig(temperature=0.1),
    )

    return App(
        name="human_tool_confirmation",
        root_agent=root_agent,
        resumability_config=ResumabilityConfig(
            is_resumable=True,
        ),
    )


REIMBURSE = [("fc_reimburse", "reimburse", {"amount": 2000})]
TIME_OFF = [("fc_time_off", "request_time_off", {"days": 5})]


def served(tmp_path, turns, done, db="adk.db", **kw):
    sessions = DatabaseSessionService(f"sqlite+aiosqlite:///{tmp_path / db}")
    return ADKAgent(app=time_off_app(turns, done), session_service=sessions, **kw)


def test_reimburse_over_the_threshold_is_approved_or_rejected(drive, tmp_path):
    done = []
    d = drive(served(tmp_path, [REIMBURSE], done))
    for action, output in (
        ("approve", "reimburse={'status': 'ok'}"),
        # ADK's fixed refusal, and the reviewer's comment with it (ADK alone never tells the model why).
        ("reject", "reimburse={'error': 'This tool call is rejected.', 'reason': 'over budget'}"),
    ):
        run_id = d.start({"prompt": "Please reimburse $2000 for the conference"})
        hold = d.held(run_id)
        (item,) = hold["items"]
        assert item["id"] == "fc_reimburse" and item["data"] == {"amount": 2000}
        assert item["actions"] == ["approve", "reject"]  # a boolean confirmation has no edit
        assert d.decide(hold, [{"id": item["id"], "action": action, "comment": "over budget"}]).status_code == 200
        run = d.finished(run_id)
        assert run["status"] == "completed" and run["output"] == output, run
    assert done == [("reimburse", 2000)]  # the rejected call never ran


def test_time_off_is_edited_as_the_samples_payload_and_a_bad_type_is_refused(drive, tmp_path):
    done = []
    d = drive(served(tmp_path, [TIME_OFF], done))
    run_id = d.start({"prompt": "I need 5 days off next week"})
    hold = d.held(run_id)
    (item,) = hold["items"]
    assert item["data"] == {"approved_days": 0} and item["schema"]["properties"]["approved_days"]["type"] == "integer"
    assert "request_time_off(days=5)" in item["details"]
    refused = d.decide(hold, [{"id": item["id"], "action": "edit", "data": {"approved_days": "3"}}])
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "items[0].data.approved_days"
    assert d.decide(hold, [{"id": item["id"], "action": "edit", "data": {"approved_days": 3}}]).status_code == 200
    run = d.finished(run_id)
    assert run["output"] == "request_time_off={'status': 'ok', 'approved_days': 3}", run
    assert done == [("request_time_off", 3)]


def test_a_rejected_time_off_tells_the_model_the_reviewers_comment(drive, tmp_path):
    done = []
    d = drive(served(tmp_path, [TIME_OFF], done))
    run_id = d.start({"prompt": "I need 5 days off next week"})
    hold = d.held(run_id)
    decision = [{"id": "fc_time_off", "action": "reject", "comment": "the team is short-staffed that week"}]
    assert d.decide(hold, decision).status_code == 200
    run = d.finished(run_id)
    assert run["output"] == (
        "request_time_off={'status': 'The time off request is rejected.', 'approved_days': 0, "
        "'reason': 'the team is short-staffed that week'}"
    ), run
    assert done == [("request_time_off", 0)]  # the sample's tool reads the payload as asked: 0 days


def test_two_confirmations_of_one_turn_are_one_hold_answered_in_one_message(drive, tmp_path):
    # ADK goes on as soon as one confirmation is answered; both answers travel together, so the model
    # is called once, with both results.
    done = []
    d = drive(served(tmp_path, [REIMBURSE + TIME_OFF], done))
    run_id = d.start({"prompt": "Reimburse $2000 and book 5 days off"})
    hold = d.held(run_id)
    assert [i["id"] for i in hold["items"]] == ["fc_reimburse", "fc_time_off"]
    decision = [
        {"id": "fc_reimburse", "action": "reject", "comment": "no receipt"},
        {"id": "fc_time_off", "action": "edit", "data": {"approved_days": 4}},
    ]
    assert d.decide(hold, decision).status_code == 200
    run = d.finished(run_id)
    assert run["output"] == (
        "reimburse={'error': 'This tool call is rejected.', 'reason': 'no receipt'}; "
        "request_time_off={'status': 'ok', 'approved_days': 4}"
    ), run
    assert done == [("request_time_off", 4)]


def test_expiry_refuses_both_kinds_of_confirmation_saying_it_expired(drive, tmp_path):
    done = []
    d = drive(served(tmp_path, [REIMBURSE + TIME_OFF], done, expires_in=3600))
    run_id = d.start({"prompt": "Reimburse $2000 and book 5 days off"})
    hold = d.held(run_id)
    d.expire(hold)
    run = d.finished(run_id)
    assert run["holds"][0]["status"] == "expired"
    assert run["output"] == (
        f"reimburse={{'error': 'This tool call is rejected.', 'reason': '{EXPIRED_MESSAGE}'}}; "
        f"request_time_off={{'status': 'The time off request is rejected.', 'approved_days': 0, "
        f"'reason': '{EXPIRED_MESSAGE}'}}"
    ), run
    assert done == [("request_time_off", 0)]  # reimburse never ran


def test_a_restarted_agent_resumes_from_the_database_and_pauses_again(drive, tmp_path):
    done = []
    d = drive(served(tmp_path, [REIMBURSE, TIME_OFF], done))
    run_id = d.start({"prompt": "Reimburse $2000, then book 5 days off"})
    first = d.held(run_id)
    # The agent process is gone; a new one (new App, new session service on the same file) resumes.
    d.restart(served(tmp_path, [REIMBURSE, TIME_OFF], done))
    assert d.decide(first, [{"id": "fc_reimburse", "action": "approve"}]).status_code == 200
    assert d.next_state(run_id)["status"] == "held"
    second = d.held(run_id)
    assert [i["id"] for i in second["items"]] == ["fc_time_off"]
    assert d.decide(second, [{"id": "fc_time_off", "action": "edit", "data": {"approved_days": 2}}]).status_code == 200
    run = d.finished(run_id)
    assert run["status"] == "completed" and run["output"] == "request_time_off={'status': 'ok', 'approved_days': 2}"
    assert done == [("reimburse", 2000), ("request_time_off", 2)]


def test_a_lost_session_database_fails_the_run_naming_it(drive, tmp_path):
    done = []
    d = drive(served(tmp_path, [REIMBURSE], done))
    run_id = d.start({"prompt": "Please reimburse $2000"})
    hold = d.held(run_id)
    d.restart(served(tmp_path, [REIMBURSE], done, db="empty.db"))  # the new process's database is empty
    assert d.decide(hold, [{"id": "fc_reimburse", "action": "approve"}]).status_code == 200
    run = d.finished(run_id)
    assert run["status"] == "failed" and done == [], (run["output"], run["error"])
    assert f"run {run_id}: ADK session {run_id} of app human_tool_confirmation is not in the session service" in str(
        run["error"]
    )


def test_an_in_memory_session_service_is_refused_unless_allowed(tmp_path):
    app = time_off_app([], [])
    with pytest.raises(ValueError, match="DatabaseSessionService"):
        ADKAgent(app=app, session_service=InMemorySessionService())
    ADKAgent(app=app, session_service=InMemorySessionService(), in_memory_ok=True)
