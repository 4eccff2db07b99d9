"""Port of the OpenAI Agents SDK's own human-in-the-loop example, through the real service.

Source: openai/openai-agents-python, examples/agent_patterns/human_in_the_loop.py (the tools, the dynamic
`needs_approval` and the agent are the example's). Changed per docs/sdk.md: the model is the SDK's
`ScriptedModel` (no network), and the `while has_interruptions:` loop (to_state/to_json, from_json,
approve/reject, Runner.run) is replaced by `OpenAIAgentsAgent(agent)`.
"""

from agentos.adapters import EXPIRED_MESSAGE
from agentos.adapters.openai_agents import OpenAIAgentsAgent
from agents import Agent, set_tracing_disabled
from agents.decorators import tool
from agents.testing import ScriptedModel, assistant_message, function_call

from tests.frameworks.conftest import pytestmark  # noqa: F401 (real service: transaction and Redis)

set_tracing_disabled(True)


def weather_agent(model, received):
    @tool
    async def get_weather(city: str) -> str:
        """Get the weather for a given city.

        Args:
            city: The city to get weather for.
        """
        received.append(("get_weather", city))
        return f"The weather in {city} is sunny"

    async def _needs_temperature_approval(_ctx, params, _call_id) -> bool:
        return "Oakland" in params.get("city", "")

    @tool(needs_approval=_needs_temperature_approval)
    async def get_temperature(city: str) -> str:
        """Get the temperature for a given city.

        Args:
            city: The city to get temperature for.
        """
        received.append(("get_temperature", city))
        return f"The temperature in {city} is 20° Celsius"

    return Agent(
        name="Weather Assistant",
        instructions=(
            "You are a helpful weather assistant. "
            "Answer questions about weather and temperature using the available tools."
        ),
        tools=[get_weather, get_temperature],
        model=model,
    )


def both_calls():
    return [
        function_call("get_weather", {"city": "Oakland"}, call_id="w1"),
        function_call("get_temperature", {"city": "Oakland"}, call_id="t1"),
    ]


def test_approve_runs_the_tool_and_reject_never_does(drive):
    for action in ("approve", "reject"):
        received = []
        model = ScriptedModel([both_calls(), [assistant_message("It is sunny and 20° in Oakland.")]])
        d = drive(OpenAIAgentsAgent(weather_agent(model, received)))
        run_id = d.start({"prompt": "What is the weather and temperature in Oakland?"})
        hold = d.held(run_id)
        (item,) = hold["items"]  # get_weather needs no approval: it already ran
        assert item["id"] == "t1" and item["data"] == {"city": "Oakland"}
        assert item["schema"]["properties"]["city"]["type"] == "string"
        assert d.decide(hold, [{"id": "t1", "action": action, "comment": "no thermometer"}]).status_code == 200
        done = d.finished(run_id)
        assert done["status"] == "completed" and done["output"] == "It is sunny and 20° in Oakland."
        expected = [("get_weather", "Oakland")] + ([("get_temperature", "Oakland")] if action == "approve" else [])
        assert received == expected


def test_edit_is_a_rejection_naming_the_call_and_the_models_repeat_runs_without_a_second_hold(drive):
    received = []
    model = ScriptedModel(
        [
            both_calls(),
            [function_call("get_temperature", {"city": "Oakland Hills"}, call_id="t2")],
            [assistant_message("20° in Oakland Hills.")],
        ]
    )
    d = drive(OpenAIAgentsAgent(weather_agent(model, received)))
    run_id = d.start({"prompt": "What is the weather and temperature in Oakland?"})
    hold = d.held(run_id)
    refused = d.decide(hold, [{"id": "t1", "action": "edit", "data": {"city": 5}}])
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "items[0].data.city"
    assert d.decide(hold, [{"id": "t1", "action": "edit", "data": {"city": "Oakland Hills"}}]).status_code == 200
    done = d.finished(run_id)
    assert done["status"] == "completed" and len(done["holds"]) == 1
    assert received == [("get_weather", "Oakland"), ("get_temperature", "Oakland Hills")]


def temperature(city, call_id):
    return [function_call("get_temperature", {"city": city}, call_id=call_id)]


def tool_outputs(model):
    """What the model was told each call returned, on its last call."""
    return {i["call_id"]: i["output"] for i in model.last_call.input if i.get("type") == "function_call_output"}


def test_expiry_rejects_the_call_telling_the_model_it_expired(drive):
    received = []
    model = ScriptedModel([both_calls(), [assistant_message("No temperature: the approval expired.")]])
    d = drive(OpenAIAgentsAgent(weather_agent(model, received)))
    run = d.expired(d.start({"prompt": "What is the weather and temperature in Oakland?"}))
    assert run["status"] == "completed" and run["output"] == "No temperature: the approval expired."
    assert tool_outputs(model)["t1"] == EXPIRED_MESSAGE
    assert received == [("get_weather", "Oakland")]


def test_a_second_pause_after_a_resume_is_a_second_hold(drive):
    received = []
    model = ScriptedModel(
        [temperature("Oakland", "t1"), temperature("Oakland Hills", "t2"), [assistant_message("20° in both.")]]
    )
    d = drive(OpenAIAgentsAgent(weather_agent(model, received)))
    run_id = d.start({"prompt": "Temperatures in Oakland and Oakland Hills?"})
    d.approve(d.held(run_id))
    second = d.held_again(run_id)
    assert [i["id"] for i in second["items"]] == ["t2"] and received == [("get_temperature", "Oakland")]
    d.approve(second)
    run = d.finished(run_id)
    assert run["status"] == "completed" and run["output"] == "20° in both." and len(run["holds"]) == 2
    assert received == [("get_temperature", "Oakland"), ("get_temperature", "Oakland Hills")]


def test_two_runs_at_once_both_pause_and_resume(drive):
    received = []
    # One agent serves both runs: each starts (a call), then each resumes (an answer), in either order.
    steps = [temperature("Oakland", "t1"), temperature("Oakland", "t1")] + [[assistant_message("20°.")]] * 2
    d = drive(OpenAIAgentsAgent(weather_agent(ScriptedModel(steps), received)))
    runs = d.at_once([{"prompt": "Temperature in Oakland?"}] * 2)
    assert [(r["status"], r["output"]) for r in runs] == [("completed", "20°.")] * 2, runs
    assert received == [("get_temperature", "Oakland")] * 2
