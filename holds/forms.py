"""The decision form: radio per item, typed edit inputs, one comment -> a decision body.

Field names are positional (`item-3-action`, `item-3-f-0`) so that no agent-written key ever
becomes an HTML name or id. Each edit input is parsed back to the JSON type the field was asked
with: a reviewer cannot turn the number 120 into the string "120" by editing it. The rules that
span fields (feedback needs a comment, only the hold's actions...) are schemas.validate_decision,
the same function the write path runs, so the form and the API cannot disagree.
"""

import json
import re
from dataclasses import dataclass, field

from . import services
from .models import Hold, HoldItem
from .rendering import json_type
from .schemas import COMMENT_MAX_CHARS, blank_to_none, changed_fields, finite_float, parse_json, validate_decision
from .words import Action

LONG_STRING = 80
# A JSON number: what a decimal field accepts (no NaN, no Infinity, no "1_000").
JSON_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def input_kind(value) -> str:
    """Which input edits a value of this JSON type."""
    if isinstance(value, bool):
        return "checkbox"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "textarea" if len(value) > LONG_STRING or "\n" in value or "\r" in value else "text"
    if value is None:
        return "null"
    return "json"


SCHEMA_KINDS = {"integer": "integer", "number": "number", "boolean": "checkbox"}


def schema_kinds(schema) -> dict[str, str]:
    """Inputs an item's schema asks for where its data cannot say: a key asked as null (or as text)
    whose schema property is a plain integer, number or boolean gets that input."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return {}
    return {
        key: SCHEMA_KINDS[prop["type"]]
        for key, prop in properties.items()
        if isinstance(prop, dict) and isinstance(prop.get("type"), str) and prop["type"] in SCHEMA_KINDS
    }


# An enum with more options than this is typed, not picked (and checked by the schema on the server).
MAX_ENUM_OPTIONS = 200
SCALARS = (str, int, float, bool, type(None))


def schema_enums(schema) -> dict[str, list]:
    """The options of each key whose schema property is an `enum` of plain values: it is edited with a
    select, so a reviewer picks one of the values the schema allows instead of guessing them."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return {}
    return {
        key: prop["enum"]
        for key, prop in properties.items()
        if isinstance(prop, dict)
        and isinstance(prop.get("enum"), list)
        and 0 < len(prop["enum"]) <= MAX_ENUM_OPTIONS
        and all(isinstance(option, SCALARS) for option in prop["enum"])
    }


def option_text(value) -> str:
    """An enum option as the select's value: its JSON, so that "1", 1 and true stay apart."""
    return json.dumps(value, ensure_ascii=False)


def input_text(value) -> str:
    """The initial text of an edit input."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return ""
    if isinstance(value, int | float):
        return json.dumps(value)
    return json.dumps(value, ensure_ascii=False, indent=2)


@dataclass
class EditField:
    index: int
    key: str
    original: object
    kind: str
    name: str
    text: str  # what the input holds now (the original, or what was posted)
    checked: bool = False  # checkbox: true; null: "keep null"
    error: str = ""
    options: list = field(default_factory=list)  # select: the schema's enum
    whole: bool = False  # integer: the schema says "integer", so 3.7 is refused here already

    @property
    def json_type(self) -> str:
        return json_type(self.original)

    @property
    def choices(self) -> list[tuple[str, str]]:
        """The select's (value, label) pairs; a blank first one when what was asked is not an option,
        so that nothing is picked for the reviewer."""
        pairs = [(option_text(o), o if isinstance(o, str) else option_text(o)) for o in self.options]
        if option_text(self.original) not in {value for value, _ in pairs}:
            pairs.insert(0, ("", "— choose —"))
        return pairs


@dataclass
class ItemForm:
    item: HoldItem
    prefix: str
    actions: list[str] = field(default_factory=list)  # this item's own, else the hold's
    action: str = ""
    fields: list[EditField] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    new_data: dict | None = None

    @property
    def changes(self) -> list[tuple[str, object, object]]:
        if self.action != Action.EDIT or self.new_data is None:
            return []
        return changed_fields(self.item.data, self.new_data)


class DecisionForm:
    """Bound to request.POST (or unbound for a fresh page); `body` is the decision once valid."""

    def __init__(self, hold: Hold, items: list[HoldItem], data=None):
        self.hold = hold
        self.actions = [a for a in Action.values if a in (hold.actions or [])]
        self.data = data
        self.bound = data is not None
        # Line breaks as the page shows them (browsers post CRLF), so the limit counts what was typed.
        self.comment = ((data.get("comment", "") if data is not None else "") or "").replace("\r\n", "\n")
        self.comment_error = ""
        self.errors: list[str] = []
        self.items: list[ItemForm] = []
        approve_all = self.bound and data.get("approve_all") is not None
        # Items a rule or grant decided at the ask are not people's to decide: the page lists them apart.
        self.ruled = [item for item in items if item.decided_by] if hold.status == Hold.Status.PENDING else []
        for item in items:
            if item in self.ruled:
                continue
            prefix = f"item-{item.position}"
            own = item.effective_actions(hold.actions or [])
            form = ItemForm(item=item, prefix=prefix, actions=[a for a in Action.values if a in own])
            if self.bound:
                # Approve all touches only the items that offer approve; the others keep their choice.
                form.action = (
                    Action.APPROVE.value
                    if approve_all and Action.APPROVE in form.actions
                    else data.get(f"{prefix}-action", "")
                )
            declared, enums = schema_kinds(item.schema), schema_enums(item.schema)
            for n, (key, value) in enumerate((item.data or {}).items()):
                kind = "select" if key in enums else declared.get(key) or input_kind(value)
                name = f"{prefix}-f-{n}"
                text = option_text(value) if kind == "select" else input_text(value)
                ef = EditField(index=n, key=key, original=value, kind=kind, name=name, text=text)
                ef.options, ef.whole = enums.get(key, []), declared.get(key) == "integer"
                ef.checked = value is True if kind == "checkbox" else kind == "null"
                if self.bound:
                    ef.text = data.get(name, "")
                    if kind in ("textarea", "json") and "\r" not in (value if isinstance(value, str) else ""):
                        # Browsers send textarea line breaks as CRLF; the agent's text had LF.
                        ef.text = ef.text.replace("\r\n", "\n")
                    if kind == "checkbox":
                        ef.checked = data.get(name) == "true"
                    if kind == "null":
                        ef.checked = data.get(f"{name}-null") == "null"
                form.fields.append(ef)
            self.items.append(form)
        self.body: dict | None = None

    def is_valid(self) -> bool:
        if not self.bound:
            return False
        if len(self.comment) > COMMENT_MAX_CHARS:
            # Also refused by validate_decision (the API's 422); said here in the page's words.
            n = len(self.comment)
            self.comment_error = f"A comment is limited to {COMMENT_MAX_CHARS} characters; this one has {n}."
        for form in self.items:
            if not form.action:
                form.errors.append("Choose an action for this item.")
            elif form.action not in form.actions:
                form.errors.append("This item does not offer that action.")
            if form.action == Action.EDIT:
                form.new_data = self._parse_edit(form)
        body = {
            "items": [self._item_body(form) for form in self.items],
            "comment": blank_to_none(self.comment),
        }
        if not self.comment_error and not any(f.errors or any(e.error for e in f.fields) for f in self.items):
            _, problems = validate_decision(body, asked=services.asked_items(self.hold, [f.item for f in self.items]))
            self._place(problems)
        invalid = bool(self.errors or self.comment_error) or any(
            f.errors or any(e.error for e in f.fields) for f in self.items
        )
        if not invalid:
            self.body = body
        return not invalid

    def _item_body(self, form: ItemForm) -> dict:
        out = {"id": form.item.item_id, "action": form.action or Action.APPROVE.value}
        if form.action == Action.EDIT:
            out["data"] = form.new_data if form.new_data is not None else form.item.data
        return out

    def _parse_edit(self, form: ItemForm) -> dict | None:
        new = {}
        for ef in form.fields:
            try:
                new[ef.key] = parse_typed(ef)
            except ValueError as exc:
                ef.error = str(exc)
        return None if any(ef.error for ef in form.fields) else new

    def _place(self, problems: list[dict]) -> None:
        """Puts each validation problem next to what it is about."""
        for problem in problems:
            where, message = problem["field"], problem["message"]
            if where.startswith("items[") and "]" in where:
                index = int(where[6 : where.index("]")])
                form = self.items[index]
                edit_field = self._field_at(form, where[where.index("]") + 1 :])
                if where.endswith(".comment"):
                    form.errors.append("Feedback needs a comment: write one in Comment.")
                    self.comment_error = "Feedback needs a comment."
                elif edit_field is not None:
                    edit_field.error = message
                elif ".data." in where:
                    # A key with no input here (one the schema requires that was not asked): name it.
                    form.errors.append(f"{where[where.index('.data.') + len('.data.') :]}: {message}")
                else:
                    form.errors.append(message)
            elif where == "comment":
                self.comment_error = message
            else:
                self.errors.append(message)

    @staticmethod
    def _field_at(form: ItemForm, rest: str) -> EditField | None:
        """The edit input that a problem at `.data.<key>...` is about (the longest key that fits, since
        a key may itself hold dots), or None."""
        if not rest.startswith(".data."):
            return None
        rest = rest[len(".data.") :]
        fits = [ef for ef in form.fields if rest == ef.key or rest.startswith((ef.key + ".", ef.key + "["))]
        return max(fits, key=lambda ef: len(ef.key), default=None)

    @property
    def problems(self) -> list[dict]:
        """Every error of a refused form, each with the id of the input it is about (the error
        summary links to it): {anchor, subject (agent-written item title), key, message}."""
        out = [{"anchor": "", "subject": "", "key": "", "message": e} for e in self.errors]
        for form in self.items:
            first = f"{form.prefix}-{form.actions[0]}" if form.actions else form.prefix
            out += [{"anchor": first, "subject": form.item.title, "key": "", "message": e} for e in form.errors]
            out += [
                {"anchor": ef.name, "subject": form.item.title, "key": ef.key, "message": ef.error}
                for ef in form.fields
                if ef.error
            ]
        if self.comment_error:
            out.append({"anchor": "comment", "subject": "", "key": "Comment", "message": self.comment_error})
        return out

    @property
    def offers_approve_all(self) -> bool:
        """The approve-all shortcut is offered when at least one item offers approve."""
        return any(Action.APPROVE in form.actions for form in self.items)

    @property
    def every_item_approves(self) -> bool:
        return all(Action.APPROVE in form.actions for form in self.items)

    @property
    def summary(self) -> dict:
        counts = {}
        for form in self.items:
            counts[form.action] = counts.get(form.action, 0) + 1
        return counts

    def decision_json(self) -> str:
        # ASCII only: form posts rewrite line breaks, and \\uXXXX escapes carry every character intact.
        return json.dumps(self.body, ensure_ascii=True)


def parse_typed(ef: EditField):
    """The posted text of one edit input, as a value of the field's JSON type (ValueError: why not)."""
    text = ef.text
    if ef.kind in ("text", "textarea"):
        return text
    if ef.kind == "checkbox":
        return ef.checked
    if ef.kind == "select":
        for option in ef.options:
            if text == option_text(option):
                return option
        raise ValueError("Choose one of the options.")
    if ef.kind in ("integer", "number"):
        # A whole number stays an integer in either (21, not 21.0). Without a schema any number fits
        # a number (SPEC's type rule); a schema's "integer" takes whole numbers only.
        stripped = text.strip()
        digits = stripped[1:] if stripped[:1] in "+-" else stripped
        if digits.isdigit() and digits.isascii():
            return int(stripped)
        if ef.whole:
            raise ValueError("Enter a whole number, such as 21.")
        try:
            if not JSON_NUMBER.fullmatch(stripped):
                raise ValueError(stripped)
            return finite_float(stripped)
        except ValueError:
            example = "12 or 12.5" if ef.kind == "integer" else "12.5"
            raise ValueError(f"Enter a number, such as {example}.") from None
    if ef.kind == "null":
        # Plain text, as typed: a reviewer writes Acme, not "Acme". A typed number or true is text
        # too; a schema that wants a number or a boolean gets that input instead (schema_kinds).
        if ef.checked:
            return None
        if not text:
            raise ValueError("Type a value, or tick null.")
        return text
    return _json(text, "Enter valid JSON (an object or array, as shown).")


def _json(text: str, message: str):
    try:
        return parse_json(text.encode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{message} ({exc})") from None


def parse_confirmed(raw: str) -> dict | None:
    """The decision carried by the last look's hidden field (the write path validates it again)."""
    try:
        value = parse_json(raw.encode())
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None
