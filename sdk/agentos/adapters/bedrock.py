"""Amazon Bedrock Agents: a `returnControl` block (requireConfirmation) becomes one hold.

    client = boto3.client("bedrock-agent-runtime")
    agentos.serve({"refunds": BedrockAgent(client, "AGENT_ID", "ALIAS_ID", idle_session_ttl=600)})

Each invocation input (a function or API call with its parameters) is an item; the hold offers
approve and reject. The decision goes back as `sessionState.returnControlInvocationResults`
with `confirmationState` CONFIRM or DENY. A Bedrock session dies after the agent's
`idleSessionTTLInSeconds` (at most 90 minutes); a decision that comes later starts a new session
whose input carries the original request, the decision and the facts, and the call the reviewer
confirmed is confirmed again there without a second hold.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from .. import Invocation
from ..resume import DecidedItem, Resume
from . import EXPIRED_MESSAGE, call_title

STATE_KEY = "bedrock:pause"


def _call(entry: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(kind, input) of one invocation input: kind is "function" or "api"."""
    if "functionInvocationInput" in entry:
        return "function", entry["functionInvocationInput"]
    return "api", entry["apiInvocationInput"]


def call_name(entry: dict[str, Any]) -> str:
    kind, call = _call(entry)
    if kind == "function":
        return f"{call.get('actionGroup')}.{call.get('function')}"
    return f"{call.get('actionGroup')}: {call.get('httpMethod')} {call.get('apiPath')}"


def call_data(entry: dict[str, Any]) -> dict[str, Any]:
    """The parameters as the agent sent them (Bedrock sends every value as a string)."""
    _, call = _call(entry)
    data = {p["name"]: p.get("value") for p in call.get("parameters") or []}
    body = (call.get("requestBody") or {}).get("content") or {}
    for content in body.values():
        for prop in content.get("properties") or []:
            data.setdefault(prop["name"], prop.get("value"))
    return data


def return_control_items(return_control: dict[str, Any]) -> list[dict[str, Any]]:
    """One hold item per invocation input, in order."""
    items = []
    for n, entry in enumerate(return_control.get("invocationInputs") or []):
        name = call_name(entry)
        data = call_data(entry)
        items.append({"id": f"{n + 1}.{name}", "title": call_title(name, data), "data": data})
    return items


def session_state(
    return_control: dict[str, Any],
    resume: Resume,
    results: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The `sessionState` that answers a returnControl block with the reviewer's decision.

    `results` maps item ids to the text a confirmed call returned, when the app ran it.
    """
    results = results or {}
    decisions = {d.id: d for d in resume.decided_items}
    answers = []
    for item, entry in zip(return_control_items(return_control), return_control["invocationInputs"], strict=True):
        decided = decisions.get(item["id"])
        confirm = decided is not None and decided.action == "approve"
        answers.append(_result(entry, confirm, _body(decided, confirm, results.get(item["id"]))))
    return {
        "invocationId": return_control["invocationId"],
        "returnControlInvocationResults": answers,
    }


def _body(decided: DecidedItem | None, confirm: bool, result: str | None) -> str:
    if confirm:
        return result if result is not None else "A reviewer approved this call."
    if decided is None:
        return EXPIRED_MESSAGE
    return decided.comment or "A reviewer denied this call. Do not make it."


def _result(entry: dict[str, Any], confirm: bool, text: str) -> dict[str, Any]:
    kind, call = _call(entry)
    state = "CONFIRM" if confirm else "DENY"
    body = {"TEXT": {"body": text}}
    if kind == "function":
        return {
            "functionResult": {
                "actionGroup": call["actionGroup"],
                "function": call["function"],
                "confirmationState": state,
                "responseBody": body,
            }
        }
    return {
        "apiResult": {
            "actionGroup": call["actionGroup"],
            "apiPath": call["apiPath"],
            "httpMethod": call["httpMethod"],
            "httpStatusCode": 200 if confirm else 403,
            "confirmationState": state,
            "responseBody": body,
        }
    }


def facts(input_text: str, return_control: dict[str, Any], resume: Resume) -> str:
    """The input of a new session: the original request plus what the reviewer decided."""
    decisions = {d.id: d for d in resume.decided_items}
    lines = [
        input_text,
        "",
        "Earlier in this task you asked to make these calls, and they were held for a human "
        "reviewer. The reviewer has decided:",
    ]
    for item in return_control_items(return_control):
        decided = decisions.get(item["id"])
        args = json.dumps(item["data"], ensure_ascii=False, sort_keys=True)
        if decided is not None and decided.action == "approve":
            lines.append(f"- {item['title'][:120]}: APPROVED. Make this call again with {args}.")
        else:
            why = decided.comment if decided is not None else EXPIRED_MESSAGE
            lines.append(f"- {item['title'][:120]}: DENIED. Do not make it. {why or ''}".rstrip())
    return "\n".join(lines)


class BedrockAgent:
    """A handler that talks to a Bedrock agent whose action groups require confirmation."""

    def __init__(
        self,
        client: Any,
        agent_id: str,
        agent_alias_id: str,
        *,
        idle_session_ttl: int = 600,
        input: Callable[[Invocation], str] | None = None,
        run_action: Callable[[dict[str, Any]], str] | None = None,
        intent: str | None = None,
        details: str | None = None,
        expires_in: int | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.client = client
        self.agent_id = agent_id
        self.agent_alias_id = agent_alias_id
        self.idle_session_ttl = idle_session_ttl
        self.input = input or (lambda inv: inv.input["prompt"])
        self.run_action = run_action
        self.intent = intent
        self.details = details
        self.expires_in = expires_in
        self.clock = clock

    def _invoke(self, session_id: str, **kw: Any) -> tuple[str, dict[str, Any] | None]:
        resp = self.client.invoke_agent(
            agentId=self.agent_id, agentAliasId=self.agent_alias_id, sessionId=session_id, **kw
        )
        text, return_control = [], None
        for event in resp["completion"]:
            if "chunk" in event:
                text.append(event["chunk"].get("bytes", b"").decode())
            elif "returnControl" in event:
                return_control = event["returnControl"]
        return "".join(text), return_control

    def _results(self, inv: Invocation, rc: dict[str, Any], resume: Resume) -> dict[str, str]:
        """Run the confirmed calls the app executes itself, once per run and invocation id."""
        if self.run_action is None:
            return {}
        out = {}
        approved = {d.id for d in resume.approved}
        for item, entry in zip(return_control_items(rc), rc["invocationInputs"], strict=True):
            if item["id"] in approved:
                step = f"bedrock:{rc['invocationId']}:{item['id']}"
                out[item["id"]] = inv.once(step, lambda e=entry: self.run_action(e))
        return out

    def __call__(self, inv: Invocation) -> Any:
        saved = inv.state.run.get(STATE_KEY, None)
        input_text = self.input(inv)
        confirmed: list[dict[str, Any]] = []
        if inv.resume is None:
            if saved is not None:
                self._ask(inv, saved["return_control"])  # a repeated start: same hold
            session_id = _session_id(inv)
            text, rc = self._invoke(session_id, inputText=input_text)
        else:
            if saved is None:
                raise RuntimeError("no paused Bedrock call in run state to resume")
            rc_saved = saved["return_control"]
            if self.clock() - saved["at"] < self.idle_session_ttl:
                session_id = saved["session_id"]
                state = session_state(rc_saved, inv.resume, self._results(inv, rc_saved, inv.resume))
                text, rc = self._invoke(session_id, sessionState=state)
            else:
                # The session is gone: start anew with the decision and the facts in the input.
                session_id = _session_id(inv)
                approved = {d.id for d in inv.resume.approved}
                confirmed = [
                    {"name": call_name(e), "data": call_data(e)}
                    for i, e in zip(return_control_items(rc_saved), rc_saved["invocationInputs"], strict=True)
                    if i["id"] in approved
                ]
                text, rc = self._invoke(session_id, inputText=facts(saved["input_text"], rc_saved, inv.resume))
        while rc is not None:
            calls = [{"name": call_name(e), "data": call_data(e)} for e in rc["invocationInputs"]]
            if confirmed and all(c in confirmed for c in calls):
                # The new session asks for exactly what the reviewer approved: confirm it.
                for c in calls:
                    confirmed.remove(c)
                approve_all = Resume(
                    hold_id="",
                    resolved_by="human",
                    decided_items=[DecidedItem(i["id"], "approve", i["data"]) for i in return_control_items(rc)],
                )
                state = session_state(rc, approve_all, self._results(inv, rc, approve_all))
                text, rc = self._invoke(session_id, sessionState=state)
                continue
            inv.state.run.put(
                STATE_KEY,
                {
                    "session_id": session_id,
                    "at": self.clock(),
                    "return_control": rc,
                    "input_text": saved["input_text"] if saved else input_text,
                },
            )
            self._ask(inv, rc)
        return text

    def _ask(self, inv: Invocation, rc: dict[str, Any]) -> None:
        items = return_control_items(rc)
        names = sorted({call_name(e) for e in rc["invocationInputs"]})
        intent = self.intent or f"Approve {len(items)} call(s): {', '.join(names)}"[:500]
        inv.ask(
            intent,
            items,
            actions=["approve", "reject"],
            details=self.details,
            expires_in=self.expires_in,
        )


def _session_id(inv: Invocation) -> str:
    # Bedrock session ids allow [0-9a-zA-Z._:-]; the seq makes each new session distinct.
    return f"agentos-{inv.run_id.replace('_', '-')}-{inv.seq}"
