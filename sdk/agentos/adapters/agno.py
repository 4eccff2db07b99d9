"""Agno: a paused run (confirmation, user input, external execution) becomes one hold.

    def build():   # the same agent in every process: same tools, same database
        return Agent(model=..., tools=[pay], db=SqliteDb(db_file="agno.db"), telemetry=False)

    agentos.serve({"payments": AgnoAgent(build)})

Every paused tool call is an item with its own decisions:
- `@tool(requires_confirmation=True)`: approve runs it, edit runs it with the reviewer's arguments
  (checked against the tool's own parameter schema), reject and feedback never run it and give the
  model the comment as Agno's rejection note.
- `@tool(requires_user_input=True, user_input_fields=[...])`: the reviewer fills the fields in, as an edit
  of the item's data (each field's type becomes the item's schema). On expiry the tool never runs: the
  model gets the expiry as the call's error.
- `@tool(external_execution=True)`: approve or edit runs `run_external(tool_name, args)` here and hands
  Agno its result; a reject never runs it and gives the model the comment as the call's error.

The run resumes in whatever process gets the resume, from the agent's own database: the run's
`run_id`, `session_id` and paused requirements are kept in run state. A resume that finds none answers
`failed` naming what was missing. The database's tables are created when the adapter is made (Agno
would create them on first use, and two first uses at once race), and a pause is asked about only once
Agno can read it back from its database; a pause it failed to store fails the run instead.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .. import Invocation
from ..resume import DecidedItem
from . import EXPIRED_MESSAGE, call_title, hold_actions, item_actions, jsonable

STATE_KEY = "agno:paused"
JSON_TYPES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "list": "array",
    "dict": "object",
}


class AgnoAgent:
    """A handler that runs an Agno `Agent` built by `build()` (called once per invocation)."""

    def __init__(
        self,
        build: Callable[[], Any],
        *,
        prompt: Callable[[Invocation], str] | None = None,
        output: Callable[[Any], Any] | None = None,
        run_external: Callable[[str, dict[str, Any]], str] | None = None,
        intent: str | None = None,
        actions: list[str] | None = None,
        details: str | None = None,
        expires_in: int | None = None,
    ):
        agent = build()
        if getattr(agent, "db", None) is None:
            raise ValueError("give the agent a database (SqliteDb, PostgresDb): the run resumes from it")
        if run_external is None and any(getattr(t, "external_execution", False) for t in agent.tools or []):
            raise ValueError("the agent has external_execution tools: pass run_external(tool_name, args) -> result")
        prepare_tables(agent.db)
        self.build = build
        self.prompt = prompt or (lambda inv: inv.input["prompt"])
        self.output = output or (lambda run: run.content)
        self.run_external = run_external
        self.intent = intent
        self.actions = actions
        self.details = details
        self.expires_in = expires_in

    def __call__(self, inv: Invocation) -> Any:
        from agno.run.requirement import RunRequirement

        agent = self.build()
        saved = inv.state.run.get(STATE_KEY, None)
        if inv.resume is None:
            if saved is not None:
                self._ask(inv, agent, [RunRequirement.from_dict(r) for r in saved["requirements"]])
            run = agent.run(self.prompt(inv), session_id=f"agentos-{inv.run_id}")
        else:
            if saved is None:
                raise RuntimeError(f"run {inv.run_id} has no paused Agno run in run state: nothing to resume")
            requirements = [RunRequirement.from_dict(r) for r in saved["requirements"]]
            for requirement in requirements:
                self._apply(requirement, decided_for(inv, requirement))
            try:
                run = agent.continue_run(
                    run_id=saved["run_id"], session_id=saved["session_id"], requirements=requirements
                )
            except Exception as exc:
                raise RuntimeError(
                    f"Agno could not continue run {saved['run_id']} of session {saved['session_id']}: {exc}"
                ) from exc
        if getattr(run, "is_paused", False):
            stored = agent.get_run_output(run.run_id, session_id=run.session_id)
            if stored is None or not getattr(stored, "is_paused", False):
                # Agno logs a failed save and carries on: a person must never decide a pause that cannot resume.
                raise RuntimeError(
                    f"Agno paused run {run.run_id} of session {run.session_id} but its database did not keep it "
                    "(see Agno's log): not asking a person about a pause that cannot resume"
                )
            requirements = list(run.active_requirements or [])
            inv.state.run.put(
                STATE_KEY,
                {
                    "run_id": run.run_id,
                    "session_id": run.session_id,
                    "requirements": [jsonable(r.to_dict()) for r in requirements],
                },
            )
            self._ask(inv, agent, requirements)
        return self.output(run)

    def _apply(self, requirement: Any, decided: DecidedItem | None) -> None:
        """The reviewer's decision, said to Agno in its own words."""
        execution = requirement.tool_execution
        action = "reject" if decided is None or decided.action == "feedback" else decided.action
        note = EXPIRED_MESSAGE if decided is None else (decided.comment or "A reviewer rejected this call.")
        kind = requirement.pause_type
        if kind == "user_input":
            if action == "edit":
                requirement.provide_user_input(decided.data)
                return
            # Agno has no rejection of a user-input pause, and answering one always runs the tool: the call
            # becomes an external execution whose result is the error, so the tool never runs without input.
            execution.requires_user_input = False
            execution.answered = True
            execution.external_execution_required = True
            execution.tool_call_error = True
            requirement.set_external_execution_result(note if decided is None else f"No input was given: {note}")
            return
        if kind == "external_execution":
            if action == "reject":
                execution.tool_call_error = True
                requirement.set_external_execution_result(f"Rejected by a reviewer: {note}")
                return
            args = decided.data if action == "edit" else execution.tool_args
            requirement.set_external_execution_result(self.run_external(execution.tool_name, args))
            return
        if action == "reject":
            requirement.reject(note=note)
            return
        if action == "edit":
            # Agno has no edit: the call runs with the arguments on the execution (history keeps the model's).
            execution.tool_args = dict(decided.data)
        requirement.confirm()

    def _ask(self, inv: Invocation, agent: Any, requirements: list[Any]) -> None:
        schemas = {getattr(t, "name", None): getattr(t, "parameters", None) for t in agent.tools or []}
        items = [requirement_item(r, schemas, self.actions) for r in requirements]
        names = sorted({r.tool_execution.tool_name for r in requirements})
        intent = self.intent or f"Approve {len(items)} tool call(s): {', '.join(names)}"[:500]
        actions = hold_actions([i["actions"] for i in items])
        inv.ask(intent, items, actions=actions, details=self.details, expires_in=self.expires_in)


def prepare_tables(db: Any) -> None:
    """Creates the database's tables once, before any run, as AgentOS's own app does at startup: Agno
    otherwise creates them on first use, and two first uses at once race (`table … already exists`),
    losing one paused run. An async database prepares itself (Agno has no sync call for it)."""
    create = getattr(db, "_create_all_tables", None)
    if callable(create) and not inspect.iscoroutinefunction(create):
        create()


def decided_for(inv: Invocation, requirement: Any) -> DecidedItem | None:
    if inv.resume.expired:
        return None
    try:
        return inv.resume.item(requirement.tool_execution.tool_call_id)
    except KeyError:
        return None


def requirement_item(requirement: Any, schemas: dict[str, Any], wanted: list[str] | None) -> dict[str, Any]:
    """One paused call as a hold item: its id is the tool call's id."""
    execution = requirement.tool_execution
    name, args = execution.tool_name, jsonable(execution.tool_args or {})
    item: dict[str, Any] = {"id": execution.tool_call_id, "title": call_title(name, args)}
    kind = requirement.pause_type
    if kind == "user_input":
        fields = requirement.user_input_schema or []
        item["data"] = {f.name: jsonable(f.value) for f in fields}
        item["schema"] = {
            "type": "object",
            "properties": {f.name: _field_schema(f) for f in fields},
            "required": [f.name for f in fields],
        }
        descriptions = [f"- `{f.name}`: {f.description}" for f in fields if f.description]
        item["details"] = f"`{name}` needs input from a person.\n\n" + "\n".join(descriptions)
        item["actions"] = ["edit"]
        return item
    item["data"] = args
    schema = schemas.get(name)
    if isinstance(schema, dict) and schema.get("properties"):
        item["schema"] = jsonable(schema)
    if kind == "external_execution":
        item["details"] = f"`{name}` runs outside the agent: approving runs it here with these arguments."
    item["actions"] = item_actions({"approve", "edit", "reject"}, wanted)
    return item


def _field_schema(field: Any) -> dict[str, Any]:
    kind = JSON_TYPES.get(getattr(field.field_type, "__name__", ""), None)
    out: dict[str, Any] = {"type": kind} if kind else {}
    if field.description:
        out["description"] = field.description
    return out
