"""A Bedrock agent whose `payments.pay` function requires confirmation.

    AGENTOS_SECRET=whsec_… BEDROCK_AGENT_ID=… BEDROCK_AGENT_ALIAS_ID=… \
        python examples/bedrock_agent.py --port 8084            # needs AWS credentials
    python examples/bedrock_agent.py --demo                     # offline: a stubbed client

`--demo` answers InvokeAgent with real AWS event-stream bytes through botocore's
`before-send` event, so botocore's own serializer and parser still run.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import struct

import agentos
import boto3
from agentos.adapters.bedrock import BedrockAgent
from botocore.awsrequest import AWSResponse

PAY = {
    "invocationId": "demo-1",
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
        }
    ],
}


def _frame(event_type: str, payload: dict) -> bytes:
    headers = b""
    for name, value in (
        (":message-type", "event"),
        (":event-type", event_type),
        (":content-type", "application/json"),
    ):
        headers += bytes([len(name)]) + name.encode() + b"\x07"
        headers += struct.pack(">H", len(value)) + value.encode()
    body = json.dumps(payload).encode()
    prelude = struct.pack(">II", 16 + len(headers) + len(body), len(headers))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    message = prelude + headers + body
    return message + struct.pack(">I", binascii.crc32(message))


def offline_client():
    client = boto3.client(
        "bedrock-agent-runtime",
        region_name="us-east-1",
        aws_access_key_id="demo",
        aws_secret_access_key="demo",
    )

    class Raw:
        def __init__(self, data):
            self.data = data

        def stream(self, *args, **kwargs):
            yield self.data

    def send(request, **kwargs):
        body = json.loads(request.body)
        if "sessionState" in body:
            state = body["sessionState"]["returnControlInvocationResults"][0]["functionResult"]
            text = f"The payment was {state['confirmationState']}ed."
            data = _frame("chunk", {"bytes": base64.b64encode(text.encode()).decode()})
        else:
            data = _frame("returnControl", PAY)
        headers = {"content-type": "application/vnd.amazon.eventstream"}
        return AWSResponse(request.url, 200, headers, Raw(data))

    client.meta.events.register("before-send.bedrock-agent-runtime.InvokeAgent", send)
    return client


def handlers(client=None):
    client = client or boto3.client("bedrock-agent-runtime")
    agent_id = os.environ.get("BEDROCK_AGENT_ID", "DEMOAGENT")
    alias_id = os.environ.get("BEDROCK_AGENT_ALIAS_ID", "DEMOALIAS")
    # Match the agent's idleSessionTTLInSeconds: later decisions start a new session.
    return {"pay_with_bedrock": BedrockAgent(client, agent_id, alias_id, idle_session_ttl=600, confirm_only=True)}


def demo() -> None:
    from agentos.testing import FakeReviewQueue

    with (
        FakeReviewQueue() as rq,
        agentos.Server(handlers(offline_client()), port=0, secret=rq.secret) as agent,
    ):
        run_id = rq.start_run("pay_with_bedrock", {"prompt": "pay Acme 50"}, agent.url)
        hold = rq.open_hold(run_id)
        print("held:", hold["intent"], hold["actions"], hold["items"][0]["data"])
        approve = {"id": hold["items"][0]["id"], "action": "approve"}
        print("answer:", rq.decide(hold["hold_id"], [approve]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8084)
    parser.add_argument("--demo", action="store_true")
    args = parser.parse_args()
    demo() if args.demo else agentos.serve(handlers(), port=args.port)
