"""Port of AWS's Bedrock Agents return-of-control sample, through the real service.

Source: aws-samples/amazon-bedrock-samples, agents-and-function-calling/bedrock-agents/features-examples/
03-create-agent-with-return-of-control (an HR agent whose action group returns control for
`get_available_vacations_days` and `reserve_vacation_time`; the application runs them and sends the result).
Bedrock's real runtime here is botocore: `InvokeAgent` is answered at before-send with real event-stream
bytes (SPEC "Settled": Adapters), scripted as the agent would answer. Changed per docs/sdk.md: the sample's
loop over `returnControl` becomes `BedrockAgent(..., run_action=..., ask_for=...)`.
"""

from agentos.adapters import EXPIRED_MESSAGE
from agentos.adapters.bedrock import BedrockAgent

from tests.frameworks.conftest import pytestmark  # noqa: F401 (real service: transaction and Redis)
from tests.test_sdk_adapter_bedrock import FakeBedrock, chunk, frame


def function_call(invocation_id, function, **params):
    return frame(
        "returnControl",
        {
            "invocationId": invocation_id,
            "invocationInputs": [
                {
                    "functionInvocationInput": {
                        "actionGroup": "VacationsActionGroup",
                        "function": function,
                        "actionInvocationType": "RESULT",
                        "parameters": [{"name": k, "type": "string", "value": v} for k, v in params.items()],
                    }
                }
            ],
        },
    )


def the_sample(ran):
    """The sample's functions, run by the application (here: recorded, no database)."""

    def run_action(entry):
        call = entry["functionInvocationInput"]
        args = {p["name"]: p["value"] for p in call["parameters"]}
        ran.append((call["function"], args))
        if call["function"] == "get_available_vacations_days":
            return "You have 10 days available."
        return f"Reserved {args['number_of_days']} days starting {args['start_date']}."

    return run_action


def last_result(request):
    (result,) = request["sessionState"]["returnControlInvocationResults"]
    return result["functionResult"]


def test_a_lookup_goes_through_and_a_reservation_waits_for_a_person(drive):
    for action in ("approve", "reject"):
        bedrock = FakeBedrock(
            [function_call("inv-1", "get_available_vacations_days", employee_id="1")],
            [
                function_call(
                    "inv-2", "reserve_vacation_time", employee_id="1", start_date="2026-12-20", number_of_days="3"
                )
            ],
            [chunk("All set.")],
        )
        ran = []
        d = drive(
            BedrockAgent(
                bedrock.client,
                "AGENT",
                "ALIAS",
                run_action=the_sample(ran),
                ask_for=lambda name, data: name != "VacationsActionGroup.get_available_vacations_days",
            )
        )
        run_id = d.start({"prompt": "Reserve 3 days of vacation from Dec 20"})
        hold = d.held(run_id)
        assert ran == [("get_available_vacations_days", {"employee_id": "1"})]  # no person for a lookup
        (item,) = hold["items"]
        assert hold["actions"] == ["approve", "reject"] and item["data"]["number_of_days"] == "3"
        assert "RESULT" in item["details"]
        assert (
            d.decide(hold, [{"id": item["id"], "action": action, "comment": "team offsite that week"}]).status_code
            == 200
        )
        done = d.finished(run_id)
        assert done["status"] == "completed" and done["output"] == "All set."
        sent = last_result(bedrock.requests[2][1])
        if action == "approve":
            assert ran[-1][0] == "reserve_vacation_time"
            assert sent["responseBody"]["TEXT"]["body"] == "Reserved 3 days starting 2026-12-20."
            assert "confirmationState" not in sent  # a RESULT call: the function's result, not a confirmation
        else:
            assert [f for f, _ in ran] == ["get_available_vacations_days"]  # the reservation never ran
            assert sent["confirmationState"] == "DENY"
            assert sent["responseBody"]["TEXT"]["body"] == "team offsite that week"


def reservation(invocation_id, days="3"):
    return function_call(
        invocation_id, "reserve_vacation_time", employee_id="1", start_date="2026-12-20", number_of_days=days
    )


def hr_agent(bedrock, ran):
    return BedrockAgent(
        bedrock.client,
        "AGENT",
        "ALIAS",
        run_action=the_sample(ran),
        ask_for=lambda name, data: name != "VacationsActionGroup.get_available_vacations_days",
    )


def test_expiry_denies_the_reservation_telling_the_agent_it_expired(drive):
    bedrock = FakeBedrock([reservation("inv-1")], [chunk("Nothing was reserved.")])
    ran = []
    d = drive(hr_agent(bedrock, ran))
    run = d.expired(d.start({"prompt": "Reserve 3 days of vacation from Dec 20"}))
    assert run["status"] == "completed" and run["output"] == "Nothing was reserved."
    sent = last_result(bedrock.requests[1][1])
    assert sent["confirmationState"] == "DENY" and sent["responseBody"]["TEXT"]["body"] == EXPIRED_MESSAGE
    assert ran == []


def test_a_second_pause_after_a_resume_is_a_second_hold(drive):
    bedrock = FakeBedrock([reservation("inv-1")], [reservation("inv-2", days="2")], [chunk("Both reserved.")])
    ran = []
    d = drive(hr_agent(bedrock, ran))
    run_id = d.start({"prompt": "Reserve 3 days from Dec 20, then 2 more"})
    d.approve(d.held(run_id))
    second = d.held_again(run_id)
    assert second["items"][0]["data"]["number_of_days"] == "2" and len(ran) == 1
    d.approve(second)
    run = d.finished(run_id)
    assert run["status"] == "completed" and run["output"] == "Both reserved."
    assert [args["number_of_days"] for _, args in ran] == ["3", "2"]


def test_two_runs_at_once_both_pause_and_resume(drive):
    # One client serves both runs: each start gets a returnControl, each resume the answer, in either order.
    bedrock = FakeBedrock([reservation("inv-1")], [reservation("inv-2")], [chunk("Reserved.")], [chunk("Reserved.")])
    ran = []
    d = drive(hr_agent(bedrock, ran))
    runs = d.at_once([{"prompt": "Reserve 3 days of vacation from Dec 20"}] * 2)
    assert [(r["status"], r["output"]) for r in runs] == [("completed", "Reserved.")] * 2, runs
    assert [f for f, _ in ran] == ["reserve_vacation_time"] * 2
    assert len({url for url, _ in bedrock.requests}) == 2  # two sessions (the id is in the URL), each used twice
