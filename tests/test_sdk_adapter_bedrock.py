"""Bedrock adapter against real botocore: requests are validated and serialized by botocore,
and answers are parsed by botocore from real AWS event-stream bytes.

botocore's Stubber cannot express InvokeAgent's event stream (`completion` must be an
EventStream), so the stub sits one step later, on `before-send`, and returns raw bytes.
"""

import base64
import binascii
import json
import struct

import boto3
import pytest
from agentos.adapters.bedrock import BedrockAgent, return_control_items, session_state
from agentos.resume import Resume
from botocore.awsrequest import AWSResponse

RETURN_CONTROL = {
    "invocationId": "inv-123",
    "invocationInputs": [
        {
            "functionInvocationInput": {
                "actionGroup": "payments",
                "function": "pay",
                "actionInvocationType": "USER_CONFIRMATION",
                "parameters": [
                    {"name": "payee", "type": "string", "value": "Acme"},
                    {"name": "amount", "type": "number", "value": "50"},
                ],
            }
        },
        {
            "apiInvocationInput": {
                "actionGroup": "files",
                "apiPath": "/files/{id}",
                "httpMethod": "DELETE",
                "actionInvocationType": "USER_CONFIRMATION",
                "parameters": [{"name": "id", "type": "string", "value": "f-9"}],
            }
        },
    ],
}


def frame(event_type, payload):
    headers = b""
    for name, value in (
        (":message-type", "event"),
        (":event-type", event_type),
        (":content-type", "application/json"),
    ):
        headers += bytes([len(name)]) + name.encode() + b"\x07"
        headers += struct.pack(">H", len(value)) + value.encode()
    body = json.dumps(payload).encode()
    total = 12 + len(headers) + len(body) + 4
    prelude = struct.pack(">II", total, len(headers))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    message = prelude + headers + body
    return message + struct.pack(">I", binascii.crc32(message))


def chunk(text):
    return frame("chunk", {"bytes": base64.b64encode(text.encode()).decode()})


class Raw:
    def __init__(self, data):
        self.data = data

    def stream(self, *args, **kwargs):
        yield self.data


class FakeBedrock:
    """Answers each InvokeAgent with the next scripted event list; records every request."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.requests = []
        self.client = boto3.client(
            "bedrock-agent-runtime",
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )
        self.client.meta.events.register("before-send.bedrock-agent-runtime.InvokeAgent", self.send)

    def send(self, request, **kwargs):
        self.requests.append((request.url, json.loads(request.body)))
        data = b"".join(self.answers.pop(0))
        headers = {
            "content-type": "application/vnd.amazon.eventstream",
            "x-amz-bedrock-agent-session-id": "s",
        }
        return AWSResponse(request.url, 200, headers, Raw(data))


@pytest.fixture
def agent(serve_agent):
    return lambda handler: serve_agent("refunds", handler)


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now


def test_it_turns_a_return_control_block_into_items():
    assert return_control_items(RETURN_CONTROL) == [
        {
            "id": "1.payments.pay",
            "title": 'payments.pay(payee="Acme", amount="50")',
            "data": {"payee": "Acme", "amount": "50"},
            "details": "`payments.pay`, actionInvocationType `USER_CONFIRMATION`: Bedrock runs it when you approve;"
            " rejecting tells the agent no.",
        },
        {
            "id": "2.files: DELETE /files/{id}",
            "title": 'files: DELETE /files/{id}(id="f-9")',
            "data": {"id": "f-9"},
            "details": "`files: DELETE /files/{id}`, actionInvocationType `USER_CONFIRMATION`: Bedrock runs it when"
            " you approve; rejecting tells the agent no.",
        },
    ]


def test_it_turns_a_decision_into_confirm_and_deny_results():
    resume = Resume.from_json(
        {
            "hold_id": "h_1",
            "resolved_by": "human",
            "comment": "no",
            "items": [
                {"id": "1.payments.pay", "action": "approve", "data": {}, "comment": None},
                {
                    "id": "2.files: DELETE /files/{id}",
                    "action": "reject",
                    "data": {},
                    "comment": "no",
                },
            ],
        }
    )
    state = session_state(RETURN_CONTROL, resume)
    assert state["invocationId"] == "inv-123"
    pay, delete = state["returnControlInvocationResults"]
    assert pay["functionResult"]["confirmationState"] == "CONFIRM"
    assert "responseBody" not in pay["functionResult"]  # Bedrock's Lambda supplies the result
    assert (pay["functionResult"]["actionGroup"], pay["functionResult"]["function"]) == (
        "payments",
        "pay",
    )
    assert delete["apiResult"]["confirmationState"] == "DENY"
    assert delete["apiResult"]["responseBody"] == {"TEXT": {"body": "no"}}


def test_it_holds_a_return_control_and_answers_in_the_same_session(rq, agent):
    bedrock = FakeBedrock(
        [chunk("Checking… "), frame("returnControl", RETURN_CONTROL)],
        [chunk("Paid Acme; kept the file.")],
    )
    clock = Clock()
    server = agent(
        BedrockAgent(bedrock.client, "AGENT1", "ALIAS1", idle_session_ttl=600, clock=clock, confirm_only=True)
    )
    run_id = rq.start_run("refunds", {"prompt": "pay Acme and delete f-9"}, endpoint=server.url)
    hold = rq.open_hold(run_id)
    assert hold["actions"] == ["approve", "reject"]
    assert [i["data"] for i in hold["items"]] == [{"payee": "Acme", "amount": "50"}, {"id": "f-9"}]
    url, first = bedrock.requests[0]
    assert "/agents/AGENT1/agentAliases/ALIAS1/sessions/" in url
    assert first["inputText"] == "pay Acme and delete f-9"

    clock.now += 300
    answer = rq.decide(
        hold["hold_id"],
        [
            {"id": hold["items"][0]["id"], "action": "approve"},
            {"id": hold["items"][1]["id"], "action": "reject", "comment": "keep it"},
        ],
    )
    assert answer == {"status": "completed", "output": "Paid Acme; kept the file."}
    url2, second = bedrock.requests[1]
    assert url2 == url  # the same session
    assert "inputText" not in second
    results = second["sessionState"]["returnControlInvocationResults"]
    assert second["sessionState"]["invocationId"] == "inv-123"
    assert results[0]["functionResult"]["confirmationState"] == "CONFIRM"
    assert results[1]["apiResult"]["confirmationState"] == "DENY"
    assert results[1]["apiResult"]["responseBody"]["TEXT"]["body"] == "keep it"


def with_type(entry, kind):
    ((key, call),) = entry.items()
    return {key: {**call, "actionInvocationType": kind}}


def test_it_starts_a_new_session_with_the_decision_when_the_idle_ttl_passed(rq, agent):
    pay = with_type(RETURN_CONTROL["invocationInputs"][0], "USER_CONFIRMATION_AND_RESULT")
    pay_only = {"invocationId": "inv-1", "invocationInputs": [pay]}
    pay_again = {"invocationId": "inv-2", "invocationInputs": [pay]}
    bedrock = FakeBedrock(
        [frame("returnControl", pay_only)],
        [frame("returnControl", pay_again)],  # the new session asks for the approved call
        [chunk("Paid Acme 50.")],
    )
    clock = Clock()
    ran = []
    server = agent(
        BedrockAgent(
            bedrock.client,
            "AGENT1",
            "ALIAS1",
            idle_session_ttl=600,
            clock=clock,
            run_action=lambda e: ran.append(e) or "paid",
        )
    )
    run_id = rq.start_run("refunds", {"prompt": "pay Acme"}, endpoint=server.url)
    hold = rq.open_hold(run_id)

    clock.now += 601
    answer = rq.decide(hold["hold_id"], [{"id": hold["items"][0]["id"], "action": "approve"}])
    assert answer["output"] == "Paid Acme 50."
    assert len(rq.runs[run_id]["holds"]) == 1  # the reviewer is not asked twice
    (url1, _), (url2, new), (url3, confirm) = bedrock.requests
    assert url2 != url1 and url3 == url2
    assert new["inputText"].startswith("pay Acme\n")
    assert "APPROVED" in new["inputText"] and '"payee": "Acme"' in new["inputText"]
    result = confirm["sessionState"]["returnControlInvocationResults"][0]["functionResult"]
    assert result["confirmationState"] == "CONFIRM"
    assert result["responseBody"]["TEXT"]["body"] == "paid"
    assert len(ran) == 1


def test_it_denies_everything_when_the_hold_expires(rq, agent):
    bedrock = FakeBedrock([frame("returnControl", RETURN_CONTROL)], [chunk("Nothing done.")])
    server = agent(BedrockAgent(bedrock.client, "A", "B", clock=Clock(), confirm_only=True))
    run_id = rq.start_run("refunds", {"prompt": "go"}, endpoint=server.url)
    answer = rq.expire(rq.open_hold(run_id)["hold_id"])
    assert answer["output"] == "Nothing done."
    results = bedrock.requests[1][1]["sessionState"]["returnControlInvocationResults"]
    assert [next(iter(r.values()))["confirmationState"] for r in results] == ["DENY", "DENY"]


LOOKUP = {
    "functionInvocationInput": {
        "actionGroup": "payments",
        "function": "balance",
        "actionInvocationType": "RESULT",
        "parameters": [{"name": "account", "type": "string", "value": "main"}],
    }
}


def test_a_result_call_sends_run_actions_result_and_a_rejection_never_runs(rq, agent):
    # The AWS return-of-control sample: plain RESULT calls, no confirmation configured in Bedrock.
    pay = with_type(RETURN_CONTROL["invocationInputs"][0], "RESULT")
    rc = {"invocationId": "inv-7", "invocationInputs": [pay]}
    for action, comment in (("approve", None), ("reject", "not this month")):
        bedrock = FakeBedrock([frame("returnControl", rc)], [chunk("ok")])
        ran = []
        server = agent(
            BedrockAgent(
                bedrock.client, "A", "B", clock=Clock(), run_action=lambda e, ran=ran: ran.append(e) or "paid 50"
            )
        )
        run_id = rq.start_run("refunds", {"prompt": "pay"}, endpoint=server.url)
        hold = rq.open_hold(run_id)
        rq.decide(hold["hold_id"], [{"id": hold["items"][0]["id"], "action": action, "comment": comment}])
        (result,) = bedrock.requests[1][1]["sessionState"]["returnControlInvocationResults"]
        if action == "approve":
            assert len(ran) == 1
            assert result["functionResult"]["responseBody"]["TEXT"]["body"] == "paid 50"
            assert "confirmationState" not in result["functionResult"]
        else:
            assert ran == []
            assert result["functionResult"]["confirmationState"] == "DENY"
            assert result["functionResult"]["responseBody"]["TEXT"]["body"] == "not this month"


def test_it_refuses_to_build_without_run_action_unless_confirm_only():
    with pytest.raises(ValueError, match="run_action"):
        BedrockAgent(object(), "A", "B")


def test_ask_for_lets_read_only_calls_through_without_a_hold(rq, agent):
    pay = with_type(RETURN_CONTROL["invocationInputs"][0], "RESULT")
    bedrock = FakeBedrock(
        [frame("returnControl", {"invocationId": "inv-1", "invocationInputs": [LOOKUP]})],
        [frame("returnControl", {"invocationId": "inv-2", "invocationInputs": [LOOKUP, pay]})],
        [chunk("done")],
    )
    ran = []
    server = agent(
        BedrockAgent(
            bedrock.client,
            "A",
            "B",
            clock=Clock(),
            run_action=lambda e: ran.append(next(iter(e.values()))["function"]) or "r",
            ask_for=lambda name, data: name != "payments.balance",
        )
    )
    run_id = rq.start_run("refunds", {"prompt": "pay if enough"}, endpoint=server.url)
    hold = rq.open_hold(run_id)
    assert ran == ["balance"]  # the first lookup went through at once
    assert [i["id"] for i in hold["items"]] == ["2.payments.pay"]  # only the payment waits for a person
    rq.decide(hold["hold_id"], [{"id": "2.payments.pay", "action": "approve"}])
    assert ran == ["balance", "balance", "pay"]
    results = bedrock.requests[2][1]["sessionState"]["returnControlInvocationResults"]
    assert [r["functionResult"]["responseBody"]["TEXT"]["body"] for r in results] == ["r", "r"]
