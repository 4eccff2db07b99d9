"""OpenAI Agents SDK adapter against the real `agents` package with a scripted fake model."""

import json

import pytest
from agentos.adapters.openai_agents import STATE_KEY, OpenAIAgentsAgent
from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

set_tracing_disabled(True)


@pytest.fixture
def agent(serve_agent):
    return lambda handler: serve_agent("support", handler)


def payments_agent(model, bank):
    @function_tool(needs_approval=True)
    def pay(payee: str, amount: str) -> str:
        """Pay a payee."""
        bank.append((payee, amount))
        return f"paid {payee} {amount}"

    @function_tool
    def balance() -> str:
        """Read the balance."""
        bank.append(("balance read",))
        return "1000.00"

    return Agent(name="Payments", instructions="Pay invoices.", tools=[pay, balance], model=model)


def tool_outputs(call):
    return {
        i["call_id"]: i["output"] for i in call.input if isinstance(i, dict) and i.get("type") == "function_call_output"
    }


def test_it_holds_the_interruptions_and_resumes_with_approve_and_reject(rq, agent):
    bank = []
    model = ScriptedModel(
        [
            [
                function_call("pay", {"payee": "Acme", "amount": "120.00"}, call_id="c1"),
                function_call("pay", {"payee": "Globex", "amount": "99.00"}, call_id="c2"),
                function_call("balance", {}, call_id="c3"),
            ],
            [assistant_message("Paid Acme; Globex was declined.")],
        ]
    )
    server = agent(OpenAIAgentsAgent(payments_agent(model, bank)))
    run_id = rq.start_run("support", {"prompt": "pay the invoices"}, endpoint=server.url)

    hold = rq.open_hold(run_id)
    assert [(i["id"], i["title"], i["data"]) for i in hold["items"]] == [
        ("c1", 'pay(payee="Acme", amount="120.00")', {"payee": "Acme", "amount": "120.00"}),
        ("c2", 'pay(payee="Globex", amount="99.00")', {"payee": "Globex", "amount": "99.00"}),
    ]
    assert hold["actions"] == ["approve", "edit", "reject"]
    assert bank == [("balance read",)]  # calls that need no approval already ran
    saved = rq.runs[run_id]["state"][STATE_KEY]
    assert "$schemaVersion" in saved
    assert STATE_KEY not in json.dumps(hold) and "$schemaVersion" not in json.dumps(hold)

    answer = rq.decide(
        hold["hold_id"],
        [
            {"id": "c1", "action": "approve"},
            {"id": "c2", "action": "reject", "comment": "Globex is paid by card"},
        ],
    )
    assert answer == {"status": "completed", "output": "Paid Acme; Globex was declined."}
    assert bank == [("balance read",), ("Acme", "120.00")]
    outputs = tool_outputs(model.last_call)
    assert outputs["c1"] == "paid Acme 120.00"
    assert outputs["c2"] == "Globex is paid by card"
    model.assert_complete()


def test_it_resumes_from_the_saved_state_in_a_new_process(rq, agent):
    bank = []
    first_model = ScriptedModel([[function_call("pay", {"payee": "Acme", "amount": "1.00"}, call_id="c1")]])
    server = agent(OpenAIAgentsAgent(payments_agent(first_model, bank)))
    run_id = rq.start_run("support", {"prompt": "pay"}, endpoint=server.url)

    # Another process: a new, equivalent Agent object restores the JSON.
    second_model = ScriptedModel([[assistant_message("done")]])
    rq.runs[run_id]["endpoint"] = agent(OpenAIAgentsAgent(payments_agent(second_model, bank))).url
    answer = rq.decide(rq.open_hold(run_id)["hold_id"], [{"id": "c1", "action": "approve"}])
    assert answer["output"] == "done"
    assert bank == [("Acme", "1.00")]


def test_it_turns_an_edit_into_a_rejection_that_gives_the_corrected_arguments(rq, agent):
    bank = []
    model = ScriptedModel(
        [
            [function_call("pay", {"payee": "Acme", "amount": "120.00"}, call_id="c1")],
            # The model follows the rejection message and calls again with the reviewer's version.
            [function_call("pay", {"payee": "Acme Corp", "amount": "100.00"}, call_id="c2")],
            [assistant_message("Paid Acme Corp 100.00")],
        ]
    )
    server = agent(OpenAIAgentsAgent(payments_agent(model, bank)))
    run_id = rq.start_run("support", {"prompt": "pay"}, endpoint=server.url)
    hold = rq.open_hold(run_id)
    answer = rq.decide(
        hold["hold_id"],
        [
            {
                "id": "c1",
                "action": "edit",
                "data": {"payee": "Acme Corp", "amount": "100.00"},
                "comment": "legal name",
            },
        ],
    )
    assert answer["output"] == "Paid Acme Corp 100.00"
    assert bank == [("Acme Corp", "100.00")]  # never the original, and no second hold
    assert len(rq.runs[run_id]["holds"]) == 1
    message = tool_outputs(model.calls[1])["c1"]
    assert "Call pay again with exactly these arguments instead" in message
    assert '{"amount": "100.00", "payee": "Acme Corp"}' in message
    assert "legal name" in message


def test_it_asks_again_when_the_model_does_not_call_as_edited(rq, agent):
    bank = []
    model = ScriptedModel(
        [
            [function_call("pay", {"payee": "Acme", "amount": "120.00"}, call_id="c1")],
            [function_call("pay", {"payee": "Acme", "amount": "500.00"}, call_id="c2")],
        ]
    )
    server = agent(OpenAIAgentsAgent(payments_agent(model, bank)))
    run_id = rq.start_run("support", {"prompt": "pay"}, endpoint=server.url)
    answer = rq.decide(
        rq.open_hold(run_id)["hold_id"],
        [
            {"id": "c1", "action": "edit", "data": {"payee": "Acme", "amount": "100.00"}},
        ],
    )
    assert answer["status"] == "suspended"
    assert rq.open_hold(run_id)["items"][0]["data"] == {"payee": "Acme", "amount": "500.00"}
    assert bank == []


def test_it_rejects_everything_when_the_hold_expires(rq, agent):
    bank = []
    model = ScriptedModel(
        [
            [function_call("pay", {"payee": "Acme", "amount": "120.00"}, call_id="c1")],
            [assistant_message("nothing paid")],
        ]
    )
    server = agent(OpenAIAgentsAgent(payments_agent(model, bank)))
    run_id = rq.start_run("support", {"prompt": "pay"}, endpoint=server.url)
    answer = rq.expire(rq.open_hold(run_id)["hold_id"])
    assert answer["output"] == "nothing paid"
    assert bank == []
    assert "expired" in tool_outputs(model.last_call)["c1"]
