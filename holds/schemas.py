"""The wire contract in one place: pydantic models of what agents and reviewers send.

`validate()` returns every wrong field by path (`items[0].confidence.amount`), the structure
from pydantic and the rules that span fields (confidence keys of `data`, unique ids, the decision
against its hold) from the checks below. The OpenAPI document is built from these models too.
"""

import json
import math
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from .canonical import canonical_json
from .item_schemas import bound_problems, compile_problems, item_validator, plain_problem
from .words import Action

# The wire's action words are words.Action's; a Literal keeps the published schema a plain enum.
ACTIONS = tuple(Action.values)
ActionWord = Literal[ACTIONS]
# What a rule or grant may decide by itself (a rule's `then` also takes ask and a quorum).
DecisiveAction = Literal[Action.APPROVE.value, Action.REJECT.value]
RuleThen = Literal[Action.APPROVE.value, Action.REJECT.value, "ask"]


NonEmpty = Annotated[str, StringConstraints(min_length=1)]
MAX_ASK_BYTES = 1024 * 1024
# SPEC "Shapes" (1 MiB) wins over issue 3 (64 KiB): an OpenAI RunState JSON is often larger.
MAX_STATE_BYTES = 1024 * 1024
MAX_FILE_BYTES = 25 * 1024 * 1024
MIN_EXPIRES_IN = 60
MAX_EXPIRES_IN = 30 * 24 * 3600
# SPEC "Per-item actions, details and schema": each at most 64 KiB (UTF-8 bytes; the schema as compact JSON).
MAX_ITEM_DETAILS_BYTES = 64 * 1024


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ItemIn(Strict):
    id: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    title: Annotated[str, StringConstraints(min_length=1, max_length=1000)]
    data: dict[str, Any]
    confidence: dict[str, Annotated[float, Field(ge=0, le=1)]] | None = None
    # For this item they replace the hold's actions (SPEC "Per-item actions, details and schema").
    actions: Annotated[list[ActionWord], Field(min_length=1, max_length=4)] | None = Field(
        default=None, description="this item's actions; they replace the hold's for this item"
    )
    details: str | None = Field(default=None, description="markdown shown with the item (at most 64 KiB)")
    # `schema` would shadow a BaseModel attribute; the wire name is the alias.
    schema_: dict[str, Any] | None = Field(
        default=None,
        alias="schema",
        description="JSON Schema (draft 2020-12, or draft-07 by $schema; local $ref only; at most 64 KiB) "
        "that an edit of data must satisfy; without it each key keeps its asked JSON type",
    )

    @field_validator("details")
    @classmethod
    def _details_size(cls, value: str | None) -> str | None:
        if value is not None and len(value.encode()) > MAX_ITEM_DETAILS_BYTES:
            raise ValueError(f"details are limited to {MAX_ITEM_DETAILS_BYTES} bytes")
        return value


class AskIn(Strict):
    intent: Annotated[str, StringConstraints(min_length=1, max_length=500)]
    items: Annotated[list[ItemIn], Field(min_length=1, max_length=100)]
    actions: Annotated[list[ActionWord], Field(min_length=1, max_length=4)] = [
        Action.APPROVE.value,
        Action.REJECT.value,
    ]
    details: str = ""
    expires_in: Annotated[int, Field(ge=MIN_EXPIRES_IN, le=MAX_EXPIRES_IN)] | None = None
    files: Annotated[list[NonEmpty], Field(max_length=20)] = []


# A decision's comment (the hold's and each item's): read by a person and by the agent, not a file.
COMMENT_MAX_CHARS = 4000
Comment = Annotated[str, StringConstraints(max_length=COMMENT_MAX_CHARS)]


class DecisionItemIn(Strict):
    id: NonEmpty
    action: ActionWord
    data: dict[str, Any] | None = None
    comment: Comment | None = None


class DecisionIn(Strict):
    items: Annotated[list[DecisionItemIn], Field(min_length=1, max_length=100)]
    comment: Comment | None = None


class ExtendIn(Strict):
    expires_in: Annotated[int, Field(ge=MIN_EXPIRES_IN, le=MAX_EXPIRES_IN)]
    reason: Annotated[str, StringConstraints(min_length=1, max_length=500)]


def validate_extend(body: Any) -> tuple["ExtendIn | None", list[dict]]:
    extend, errors = _pydantic_errors(ExtendIn, body)
    if extend is not None and not extend.reason.strip():
        return None, [{"field": "reason", "message": "a reason is required"}]
    return extend, errors


class RunStartIn(Strict):
    capability: NonEmpty
    input: dict[str, Any] = {}


def path_of(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "body"


def _pydantic_errors(model: type[BaseModel], body: Any) -> tuple[BaseModel | None, list[dict]]:
    try:
        return model.model_validate(body), []
    except ValidationError as exc:
        errors = []
        for err in exc.errors(include_url=False):
            # Unions add the branch's type name to the path; the caller wants the field's path.
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p))
            errors.append({"field": path_of(loc), "message": err["msg"]})
        return None, errors


def _dedupe(errors: list[dict]) -> list[dict]:
    seen, out = set(), []
    for err in errors:
        key = (err["field"], err["message"])
        if key not in seen:
            seen.add(key)
            out.append(err)
    return out


def validate_ask(body: Any, *, compile_schemas: bool = True) -> tuple[AskIn | None, list[dict]]:
    """The ask checked whole. Its item schemas are bounded first and compiled only within the bounds;
    `compile_schemas=False` leaves compiling to a later call that knows the token is live (item_schemas:
    compiling is the costly part)."""
    ask, errors = _pydantic_errors(AskIn, body)
    if not isinstance(body, dict):
        return None, errors
    errors += _repeats(body.get("actions"), "actions")
    items = body.get("items")
    schemas = _item_schemas(body)
    if isinstance(items, list):
        ids = set()
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                continue
            item_id = item.get("id")
            if isinstance(item_id, str) and item_id:
                if item_id in ids:
                    errors.append({"field": f"items[{i}].id", "message": f"id '{item_id}' is used twice"})
                ids.add(item_id)
            errors += _repeats(item.get("actions"), f"items[{i}].actions")
            data, confidence = item.get("data"), item.get("confidence")
            if isinstance(data, dict) and isinstance(confidence, dict):
                for key in confidence:
                    if key not in data:
                        errors.append(
                            {"field": f"items[{i}].confidence.{key}", "message": "must name a top-level key of data"}
                        )
    errors += bound_problems(schemas)
    if compile_schemas:
        errors += _compile_problems_within(schemas, errors)
    errors = _dedupe(errors)
    return (ask if not errors else None), errors


def _item_schemas(body: Any) -> list[tuple[str, dict]]:
    """(where, schema) of each item that brings a schema."""
    items = body.get("items") if isinstance(body, dict) else None
    if not isinstance(items, list):
        return []
    return [
        (f"items[{i}].schema", item["schema"])
        for i, item in enumerate(items)
        if isinstance(item, dict) and isinstance(item.get("schema"), dict)
    ]


def item_schema_compile_problems(body: Any, errors: list[dict]) -> list[dict]:
    """The step validate_ask(compile_schemas=False) left out, given the errors it found: compiling
    the item schemas that nothing refused."""
    return _compile_problems_within(_item_schemas(body), errors)


def _compile_problems_within(schemas: list[tuple[str, dict]], errors: list[dict]) -> list[dict]:
    """Compiling costs; only schemas within the ask's bounds (no error on `items`) and each within
    its own (no error on that schema) are compiled."""
    refused = {e["field"] for e in errors}
    if "items" in refused:
        return []
    return compile_problems([(where, schema) for where, schema in schemas if where not in refused])


def _repeats(actions: Any, where: str) -> list[dict]:
    errors, seen = [], set()
    if isinstance(actions, list):
        for i, action in enumerate(actions):
            if isinstance(action, str) and action in seen:
                errors.append({"field": f"{where}[{i}]", "message": f"'{action}' is listed twice"})
            seen.add(action if isinstance(action, str) else None)
    return errors


def validate_start(body: Any) -> tuple[RunStartIn | None, list[dict]]:
    return _pydantic_errors(RunStartIn, body)


def schema_errors(schema: dict | None, value: Any, root: str) -> list[dict]:
    """Every place where `value` breaks a capability's JSON Schema (input or output), by path."""
    if not schema:
        return []
    errors = []
    for err in sorted(jsonschema.Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.absolute_path)):
        path = root
        for part in err.absolute_path:
            path += f"[{part}]" if isinstance(part, int) else f".{part}"
        errors.append({"field": path, "message": err.message})
    return errors


def blank_to_none(text: str | None) -> str | None:
    return text if text is not None and text.strip() else None


@dataclass(frozen=True)
class Asked:
    """One item as a decision is checked against it: its data as asked, its effective actions
    (its own, else the hold's) and its schema, if any."""

    data: dict
    actions: list[str]
    schema: dict | None = None


def json_kind(value: Any) -> str:
    """A value's JSON type as the type rule compares them: integers and other numbers are both numbers."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return "object" if isinstance(value, dict) else "array"


def edit_errors(asked: Asked, data: dict, where: str) -> list[dict]:
    """Why an edit's data may not be stored: the item's schema alone decides when it has one; else it
    has exactly the asked keys, each of the JSON type it was asked with (a key asked as null takes
    anything; no other key may become null)."""
    if asked.schema is not None:
        try:
            validator = item_validator(asked.schema)
        except ValueError as exc:  # checked at the ask; kept so that a bad row can never become a 500
            return [{"field": f"{where}.schema", "message": str(exc)}]
        errors = []
        for err in sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.instance_path]):
            parts, message = plain_problem(err)
            path = f"{where}.data"
            for part in parts:
                path += f"[{part}]" if isinstance(part, int) else f".{part}"
            errors.append({"field": path, "message": message})
        return errors
    if set(data) != set(asked.data):
        missing = sorted(set(asked.data) - set(data))
        extra = sorted(set(data) - set(asked.data))
        return [
            {
                "field": f"{where}.data",
                "message": f"must have exactly the asked keys (missing {missing}, unknown {extra})",
            }
        ]
    errors = []
    for key, old in asked.data.items():
        want, got = json_kind(old), json_kind(data[key])
        if want == "null" or want == got:
            continue
        message = (
            f"may not become null (it was asked as a {want})"
            if got == "null"
            else f"must be a {want}, as it was asked (got a {got})"
        )
        errors.append({"field": f"{where}.data.{key}", "message": message})
    return errors


def validate_decision(body: Any, *, asked: dict[str, Asked]) -> tuple[DecisionIn | None, list]:
    """Checks a decision against its hold: `asked` maps each item id to the item as asked."""
    decision, errors = _pydantic_errors(DecisionIn, body)
    if decision is None:
        return None, errors
    hold_comment = blank_to_none(decision.comment)
    seen: set[str] = set()
    for i, item in enumerate(decision.items):
        where = f"items[{i}]"
        if item.id not in asked:
            errors.append({"field": f"{where}.id", "message": f"'{item.id}' is not an item of this hold"})
            continue
        if item.id in seen:
            errors.append({"field": f"{where}.id", "message": f"'{item.id}' is decided twice"})
        seen.add(item.id)
        if item.action not in asked[item.id].actions:
            errors.append({"field": f"{where}.action", "message": f"'{item.action}' is not offered for this item"})
        if item.action == Action.EDIT:
            if item.data is None:
                errors.append({"field": f"{where}.data", "message": "an edit sends the full data object"})
            else:
                errors += edit_errors(asked[item.id], item.data, where)
        elif item.data is not None:
            errors.append({"field": f"{where}.data", "message": "data is only sent with the edit action"})
        if item.action == Action.FEEDBACK and blank_to_none(item.comment) is None and hold_comment is None:
            errors.append(
                {"field": f"{where}.comment", "message": "feedback needs a comment (the item's or the hold's)"}
            )
    for item_id in asked:
        if item_id not in seen:
            errors.append({"field": "items", "message": f"item '{item_id}' has no action"})
    return (decision if not errors else None), errors


def reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text} does not fit a float64")
    return value


SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# A text's bytes with every digit as "0", "e" and "E" as "e", "+" kept and the rest as spaces: what
# float_may_overflow looks for, found by substring search (a regex took 13 ms over 640 KB, 1.9 ms this way).
_NUMBER_SHAPES = bytes(48 if 48 <= b <= 57 else 101 if b in (69, 101) else 43 if b == 43 else 32 for b in range(256))


def float_may_overflow(raw: bytes) -> bool:
    """Whether a number in `raw` might not fit a float64: an exponent of three digits or more, or a run
    of 210 digits (with two exponent digits at most, a number needs 309 - 99 digits before its point).
    May say so when none does (inside a string, a negative exponent); parse_json then checks each."""
    shapes = raw.translate(_NUMBER_SHAPES)
    return b"e000" in shapes or b"e+000" in shapes or b"0" * 210 in shapes


def parse_json(raw: bytes) -> Any:
    """JSON as the contract means it: no NaN or Infinity; integers exact at any size; no NUL and
    no lone surrogates (neither can be stored as text); nesting no deeper than Python's stack."""
    try:
        # Checking each number costs a Python call per number (8 ms for 20,000 of them, half the parse),
        # so only a text where one might overflow pays for it.
        floats = finite_float if float_may_overflow(raw) else float
        value = json.loads(raw.decode("utf-8"), parse_constant=reject_constant, parse_float=floats)
        # Only a \u escape can smuggle these in: raw NUL is invalid JSON, raw surrogates invalid
        # UTF-8. The byte tests are cheap and may match more than they must (an escaped backslash);
        # the walks over the value decide, and run only then (not for every "\u00b7").
        if b"\\u0000" in raw and _has_nul(value):
            raise ValueError("NUL (\\u0000) cannot be stored")
        if SURROGATE_ESCAPE.search(raw):
            json.dumps(value, ensure_ascii=False).encode("utf-8")
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None
    except UnicodeEncodeError:
        raise ValueError("a lone surrogate (\\ud800-\\udfff) is not a character") from None
    return value


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any("\x00" in key or _has_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_has_nul(item) for item in value)
    return False


def changed_fields(asked: dict, decided: dict) -> list[tuple[str, Any, Any]]:
    """The fields an edit changed, in asked order, as (key, old, new): values compared as JSON
    (an object's key order never counts), so the last look and the decided page agree."""
    return [
        (key, old, decided.get(key))
        for key, old in asked.items()
        if canonical_json(old) != canonical_json(decided.get(key))
    ]


# --- responses (the OpenAPI document describes them; the API builds them in serializers.py) ---


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorOut(Open):
    error: str
    message: str


class FieldError(BaseModel):
    field: str
    message: str


class InvalidOut(ErrorOut):
    errors: list[FieldError]


class HoldCreatedOut(BaseModel):
    hold_id: str
    # decided: the capability's rules or grants decided every item at the ask (SPEC Round 3).
    status: Literal["pending", "decided"]


class DecidedByOut(BaseModel):
    """Which rule (and version) or standing grant decided an item at the ask."""

    type: Literal["rule", "grant"]
    id: str
    version: int | None = None


class ResumeItemOut(BaseModel):
    id: str
    action: ActionWord
    data: dict[str, Any]
    comment: str | None
    decided_by: DecidedByOut | None = None


class ResumeOut(BaseModel):
    hold_id: str
    resolved_by: Literal["human", "expired", "rule"]
    items: list[ResumeItemOut]
    comment: str | None
    # A compact JWS (Ed25519) over what was decided; its keys are at /.well-known/jwks.json (docs/receipts.md).
    receipt: str = Field(
        description="Decision receipt: a compact JWS (alg Ed25519) verifiable with /.well-known/jwks.json"
    )


class HoldItemOut(BaseModel):
    id: str
    title: str
    data: dict[str, Any]
    confidence: dict[str, float] | None = None
    actions: list[ActionWord] | None = None
    details: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    decided_by: DecidedByOut | None = None


class HoldOut(BaseModel):
    hold_id: str
    run_id: str
    capability: str
    status: Literal["pending", "decided", "expired", "cancelled"]
    intent: str
    actions: list[ActionWord]
    items: list[HoldItemOut]
    details: str
    files: list[str]
    expires_at: str | None
    created_at: str
    decided_by: str | None
    decided_at: str | None
    resume: ResumeOut | None


class HoldBriefOut(BaseModel):
    hold_id: str
    run_id: str
    capability: str
    status: str
    intent: str
    created_at: str
    expires_at: str | None
    decided_by: str | None
    decided_at: str | None


class HoldListOut(BaseModel):
    items: list[HoldBriefOut]
    next_cursor: str | None


class DecisionOut(BaseModel):
    hold_id: str
    status: Literal["decided"]
    decided_by: str
    decided_at: str


class RunCreatedOut(BaseModel):
    run_id: str
    status: str


class HoldRef(BaseModel):
    hold_id: str
    status: str


class RunOut(BaseModel):
    run_id: str
    capability: str
    version: str
    status: Literal["running", "held", "completed", "failed", "asked_for_human"]
    seq: int
    input: Any
    output: Any
    error: str | None
    parent: str | None
    children: list[str]
    holds: list[HoldRef]
    created_at: str


class FileOut(BaseModel):
    file_id: str
    name: str
    size: int
    content_type: str
    sha256: str


class InvocationRetryOut(BaseModel):
    invocation_id: str
    status: str


# --- evals (SPEC "Evals") -------------------------------------------------------------------------


class DatasetIn(Strict):
    name: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    capability: NonEmpty


class RecordedHoldIn(Strict):
    """One recorded hold: the ask as the agent sent it, and the resume that was sent (null: none was)."""

    hold_id: str | None = None
    ask: dict[str, Any]
    resume: dict[str, Any] | None = None


class DatasetItemIn(Strict):
    input: dict[str, Any]
    recorded_holds: Annotated[list[RecordedHoldIn], Field(max_length=1000)] = []
    expected_output: Any = None


class DatasetItemFromRunIn(Strict):
    from_run: Annotated[str, StringConstraints(min_length=1, max_length=40)]


class ExperimentIn(Strict):
    dataset: Annotated[str, StringConstraints(min_length=1, max_length=40)]


def validate_dataset(body: Any) -> tuple[DatasetIn | None, list[dict]]:
    return _pydantic_errors(DatasetIn, body)


def validate_experiment(body: Any) -> tuple[ExperimentIn | None, list[dict]]:
    return _pydantic_errors(ExperimentIn, body)


def validate_dataset_item(body: Any) -> tuple[BaseModel | None, list[dict]]:
    """`{from_run}` records a run; anything else is an item written by hand."""
    model = DatasetItemFromRunIn if isinstance(body, dict) and "from_run" in body else DatasetItemIn
    return _pydantic_errors(model, body)


class DatasetCreatedOut(BaseModel):
    dataset_id: str


class DatasetOut(BaseModel):
    dataset_id: str
    name: str
    capability: str
    items: int
    created_by: str
    created_at: str


class DatasetListOut(BaseModel):
    items: list[DatasetOut]
    next_cursor: str | None


class DatasetItemCreatedOut(BaseModel):
    item_id: str


class RecordedHoldOut(BaseModel):
    hold_id: str | None = None
    ask: dict[str, Any]
    resume: dict[str, Any] | None


class DatasetItemOut(BaseModel):
    item_id: str
    dataset_id: str
    input: Any
    recorded_holds: list[RecordedHoldOut]
    expected_output: Any
    source_run: str | None
    created_by: str
    created_at: str


class DatasetItemListOut(BaseModel):
    items: list[DatasetItemOut]
    next_cursor: str | None


class ExperimentCreatedOut(BaseModel):
    experiment_id: str
    runs: list[str]


class ExperimentCountsOut(BaseModel):
    completed: int
    failed: int
    asked_for_human: int
    running: int


class ExperimentRunOut(BaseModel):
    run_id: str
    dataset_item_id: str | None
    status: Literal["running", "held", "completed", "failed", "asked_for_human"]
    output: Any
    expected_output: Any
    matches: bool | None


class ExperimentOut(BaseModel):
    experiment_id: str
    dataset: str
    status: Literal["running", "finished"]
    counts: ExperimentCountsOut
    runs: list[ExperimentRunOut]
    created_at: str
    finished_at: str | None


class ExperimentBriefOut(BaseModel):
    experiment_id: str
    dataset: str
    status: Literal["running", "finished"]
    created_at: str
    finished_at: str | None


class ExperimentListOut(BaseModel):
    items: list[ExperimentBriefOut]
    next_cursor: str | None


# --- rules and standing grants (documented here; holds/rules.py checks them) -------------------


class QuorumThen(BaseModel):
    quorum: int = Field(ge=1, le=10)
    from_: list[Literal["admin", "member"]] = Field(alias="from", min_length=1)


class RuleIn(BaseModel):
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,100}$")
    when: str = Field(min_length=1, max_length=2000, description="CEL over item, run and capability")
    then: RuleThen | QuorumThen = "ask"
    comment: str | None = Field(default=None, max_length=2000, description="required for reject")


class RulesIn(BaseModel):
    rules: list[RuleIn] = Field(max_length=50)


class RuleSetOut(BaseModel):
    capability: str
    version: int
    rules: list[RuleIn]
    saved_by: str | None
    saved_at: str | None


class BacktestRuleOut(BaseModel):
    would_decide: int
    decided_otherwise: int
    errors: int
    error: str | None


class BacktestDifferenceOut(BaseModel):
    hold_id: str
    item_id: str
    title: str
    person: ActionWord
    would: DecisiveAction
    by: str
    url: str


class BacktestOut(BaseModel):
    items: int
    would_decide: int
    decided_otherwise: int
    since: str
    capped: bool
    by_rule: dict[str, BacktestRuleOut]
    differences: list[BacktestDifferenceOut]


class RuleSetSavedOut(RuleSetOut):
    backtest: BacktestOut


class BacktestIn(BaseModel):
    """A rule list, or one grant's expression."""

    rules: list[RuleIn] | None = None
    when: str | None = None


class GrantIn(BaseModel):
    when: str = Field(min_length=1, max_length=2000)
    expires_at: str = Field(description="ISO 8601 with offset; at most 90 days away")
    max_uses: int | None = Field(default=None, ge=1, le=1_000_000)
    comment: str | None = Field(default=None, max_length=2000)
    hold_id: str | None = Field(default=None, description="the decided hold it is made from")
    item_id: str | None = None


class GrantOut(BaseModel):
    grant_id: str
    capability: str
    when: str
    comment: str | None
    created_by: str
    created_at: str
    expires_at: str
    max_uses: int | None
    uses: int
    last_used_at: str | None
    revoked_at: str | None
    revoked_by: str | None
    from_hold_id: str | None
    from_item_id: str | None


class GrantCreatedOut(GrantOut):
    backtest: BacktestOut | None


class GrantListOut(BaseModel):
    grants: list[GrantOut]


# --- out of office (issue 34 delegation) --------------------------------------------------------------


class AwayIn(Strict):
    away_from: str = Field(description="ISO 8601 with offset: when the out-of-office starts")
    away_until: str = Field(description="ISO 8601 with offset: after away_from, not already past")
    delegate: Annotated[str, StringConstraints(min_length=1, max_length=150)] = Field(
        description="the username of another active person who already may decide every capability you may"
    )


def validate_away(body: Any) -> tuple[AwayIn | None, list[dict]]:
    return _pydantic_errors(AwayIn, body)


class AwayOut(BaseModel):
    username: str
    away_from: str | None
    away_until: str | None
    delegate: str | None = Field(description="who is told in your stead, 'acting for' you, within the window")
    away_now: bool = Field(description="whether the window is on now")
