"""Amazon Bedrock Agents: a `returnControl` block (requireConfirmation) becomes one hold.

    client = boto3.client("bedrock-agent-runtime")
    agentos.serve({"refunds": BedrockAgent(client, "AGENT_ID", "ALIAS_ID", idle_session_ttl=600)})

Each invocation input (a function or API call with its parameters) that `ask_for` picks is an
item; the hold offers approve and reject. `actionInvocationType` decides what an approval sends:
USER_CONFIRMATION confirms (Bedrock's Lambda runs the call); RESULT and USER_CONFIRMATION_AND_RESULT
send what `run_action` returned, as the function's result (so an adapter built without `run_action`
must say `confirm_only=True`, and a RESULT call then fails the run rather than pass an approval off as
a result). Calls that `ask_for` leaves out go through without a hold, answered the same way.
The decision goes back as `sessionState.returnControlInvocationResults`
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
CONFIRM_ONLY = "USER_CONFIRMATION"
NEEDS_RESULT = ("RESULT", "USER_CONFIRMATION_AND_RESULT")


def invocation_type(entry: dict[str, Any]) -> str:
    """The call's actionInvocationType (RESULT when Bedrock leaves it out: plain return of control)."""
    return _call(entry)[1].get("actionInvocationType") or "RESULT"


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
    """One item per invocation input, in order (the hold asks about those that `ask_for` picks)."""
    items = []
    for n, entry in enumerate(return_control.get("invocationInputs") or []):
        name = call_name(entry)
        data = call_data(entry)
        kind = invocation_type(entry)
        runs = "Bedrock runs it when you approve" if kind == CONFIRM_ONLY else "approving runs it here"
        items.append(
            {
                "id": f"{n + 1}.{name}",
                "title": call_title(name, data),
                "data": data,
                "details": f"`{name}`, actionInvocationType `{kind}`: {runs}; rejecting tells the agent no.",
            }
        )
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
        kind = invocation_type(entry)
        if confirm and kind in NEEDS_RESULT and item["id"] not in results:
            raise RuntimeError(f"{call_name(entry)} is {kind}: its result must come from run_action, and none did")
        answers.append(_result(entry, confirm, _body(decided, confirm, results.get(item["id"])), kind))
    return {
        "invocationId": return_control["invocationId"],
        "returnControlInvocationResults": answers,
    }


def _body(decided: DecidedItem | None, confirm: bool, result: str | None) -> str | None:
    if confirm:
        return result  # None for USER_CONFIRMATION: Bedrock's Lambda supplies the result
    if decided is None:
        return EXPIRED_MESSAGE
    return decided.comment or "A reviewer denied this call. Do not make it."


def _result(entry: dict[str, Any], confirm: bool, text: str | None, invocation: str) -> dict[str, Any]:
    kind, call = _call(entry)
    out: dict[str, Any] = {"actionGroup": call["actionGroup"]}
    if kind == "function":
        out["function"] = call["function"]
    else:
        out.update(apiPath=call["apiPath"], httpMethod=call["httpMethod"], httpStatusCode=200 if confirm else 403)
    # A plain RESULT call was never a confirmation: an approval just sends the result; a rejection is a DENY.
    if invocation != "RESULT" or not confirm:
        out["confirmationState"] = "CONFIRM" if confirm else "DENY"
    if text is not None:
        out["responseBody"] = {"TEXT": {"body": text}}
    return {"functionResult" if kind == "function" else "apiResult": out}


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
        confirm_only: bool = False,
        ask_for: Callable[[str, dict[str, Any]], bool] | None = None,
        intent: str | None = None,
        details: str | None = None,
        expires_in: int | None = None,
        clock: Callable[[], float] = time.time,
    ):
        if run_action is None and not confirm_only:
            raise ValueError(
                "pass run_action, which runs an approved RESULT or USER_CONFIRMATION_AND_RESULT call and returns"
                " its result, or confirm_only=True when every action group runs in Lambda (USER_CONFIRMATION)"
            )
        self.ask_for = ask_for or (lambda name, data: True)
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
        """Run the confirmed calls the app executes itself (RESULT, USER_CONFIRMATION_AND_RESULT), once
        per run and invocation id."""
        if self.run_action is None:
            return {}
        out = {}
        approved = {d.id for d in resume.approved}
        for item, entry in zip(return_control_items(rc), rc["invocationInputs"], strict=True):
            if item["id"] in approved and invocation_type(entry) in NEEDS_RESULT:
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
                resume = self._with_unasked(rc_saved, inv.resume)
                state = session_state(rc_saved, resume, self._results(inv, rc_saved, resume))
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
            if not self._asked_items(rc) or (confirmed and all(c in confirmed for c in calls)):
                # Nothing here needs a person (ask_for), or the new session asks for exactly what the
                # reviewer approved: go through without a hold.
                for c in calls:
                    if c in confirmed:
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

    def _with_unasked(self, rc: dict[str, Any], resume: Resume) -> Resume:
        """The decision, plus an approval of every call that `ask_for` let through without a person."""
        asked = {i["id"] for i in self._asked_items(rc)}
        through = [DecidedItem(i["id"], "approve", i["data"]) for i in return_control_items(rc) if i["id"] not in asked]
        return Resume(
            hold_id=resume.hold_id,
            resolved_by=resume.resolved_by,
            decided_items=[*resume.decided_items, *through],
            comment=resume.comment,
        )

    def _asked_items(self, rc: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            item
            for item, entry in zip(return_control_items(rc), rc["invocationInputs"], strict=True)
            if self.ask_for(call_name(entry), call_data(entry))
        ]

    def _ask(self, inv: Invocation, rc: dict[str, Any]) -> None:
        items = self._asked_items(rc)
        names = sorted({i["id"].split(".", 1)[1] for i in items})
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
