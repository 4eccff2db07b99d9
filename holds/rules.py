"""Rules and grants as expressions: checking a rule list, compiling `when` once, evaluating it per item.

CEL (Common Expression Language) through `cel-expr-python` (the cel-cpp binding; docs/decisions.md says
why). Its one trap: an evaluation error is *returned* as an ERROR value whose `.value()` is a non-empty
string, so a rule matches only when the result is the boolean `true`; anything else (an error, a
missing field, a non-boolean) is false, and counted as an error for the rule's page.

No database here: services/rules.py stores versions and grants and applies them at the ask.
"""

import functools
import re
from dataclasses import dataclass, field

from cel_expr_python import cel

from .markup import is_hidden, mixed_scripts
from .models import Action, Role

# Bounds on save (SPEC: bounded cost). The parser's own recursion limit (32) is the backstop.
MAX_WHEN_LENGTH = 2000
MAX_WHEN_DEPTH = 12
MAX_RULES = 50
MAX_ID_LENGTH = 100
ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
THEN_WORDS = (Action.APPROVE.value, Action.REJECT.value, "ask")
# cel-cpp reports `<input>:LINE:COLUMN: message` (both counted from 1).
_POSITION = re.compile(r"<input>:(\d+):(\d+): (.*)")


@functools.cache
def _env():
    dyn_map = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
    # Declared variables: a misspelt `itm` fails on save, not at every ask.
    return cel.NewEnv(variables={"item": dyn_map, "run": dyn_map, "capability": cel.Type.STRING})


class WhenError(ValueError):
    """A `when` refused on save; `line` and `column` (from 1) say where, when known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.message, self.line, self.column = message, line, column
        where = f" at line {line}, column {column}" if line else ""
        super().__init__(f"{message}{where}")


def _depth(source: str) -> tuple[int, int, int]:
    """The deepest nesting of (), [] and {} outside string literals, and where (line, column) it
    first went past MAX_WHEN_DEPTH (0, 0 when it never did)."""
    depth = deepest = 0
    line, column, quote, escaped = 1, 0, None, False
    where = (0, 0)
    for ch in source:
        column += 1
        if ch == "\n":
            line, column = line + 1, 0
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if depth == MAX_WHEN_DEPTH + 1:
                    where = (line, column)
        elif ch in ")]}":
            depth -= 1
    return deepest, *where


@functools.lru_cache(maxsize=4096)
def compile_when(source: str):
    """The compiled expression, once per distinct text in this process (a version's rules never
    change, so this is "once per version"). Raises WhenError with the position of the fault."""
    if not isinstance(source, str) or not source.strip():
        raise WhenError("`when` is required: an expression such as item.data.amount < 100")
    if len(source) > MAX_WHEN_LENGTH:
        line = source[:MAX_WHEN_LENGTH].count("\n") + 1
        column = MAX_WHEN_LENGTH - source[:MAX_WHEN_LENGTH].rfind("\n") - 1
        raise WhenError(f"`when` is longer than {MAX_WHEN_LENGTH} characters", line, column + 1)
    deepest, line, column = _depth(source)
    if deepest > MAX_WHEN_DEPTH:
        raise WhenError(f"`when` nests deeper than {MAX_WHEN_DEPTH} levels", line, column)
    try:
        expression = _env().compile(source)
    except RuntimeError as exc:
        text = str(exc)
        found = _POSITION.search(text)
        if found:
            raise WhenError(found.group(3).strip(), int(found.group(1)), int(found.group(2))) from None
        raise WhenError(text.split(" [", 1)[0].removeprefix("CANCELLED: ").strip()) from None
    if expression.return_type() not in (cel.Type.BOOL, cel.Type.DYN):
        raise WhenError(f"`when` must be true or false, not {expression.return_type().name()}", 1, 1)
    return expression


def activation(context: dict):
    """One item's variables converted for CEL once, for every rule and grant evaluated on it (the
    conversion is half the cost of an evaluation)."""
    return _env().Activation(data=context)


def matches(expression, bound) -> tuple[bool, str | None]:
    """(matched, error) of `expression` on an item's `activation`: matched only for the boolean true; an
    error value or a non-boolean is false."""
    try:
        value = expression.eval(activation=bound)
    except Exception as exc:  # noqa: BLE001 (cel-cpp raises for values it cannot convert)
        return False, str(exc)[:300]
    kind = value.type()
    if kind == cel.Type.BOOL:
        return value.value() is True, None
    if kind == cel.Type.ERROR:
        return False, str(value.value())[:300]
    return False, f"`when` gave {kind.name()}, not true or false"


@functools.lru_cache(maxsize=1024)
def compile_list(sources: tuple[str, ...]):
    """Every one of `sources` (each already compiled alone) as one list expression, so that an item costs
    one evaluation instead of one per rule; None for fewer than two."""
    if len(sources) < 2:
        return None
    try:
        # Each on its own lines: a `//` comment at the end of one cannot swallow what follows.
        return _env().compile("[" + ", ".join(f"(\n{source}\n)" for source in sources) + "]")
    except RuntimeError:
        return None


def first_true(expressions: list, combined, bound) -> tuple[int | None, dict[int, str]]:
    """The index of the first of `expressions` that is true on an item's activation (None: none is),
    and the errors of those evaluated up to it. One evaluation of `combined` (compile_list) when none
    of them errors; when one does, the list is an error as a whole, so they are evaluated one by one,
    in order, and the failing one alone counts as false."""
    if combined is not None:
        try:
            value = combined.eval(activation=bound)
        except Exception:  # noqa: BLE001 (one by one below says what failed)
            value = None
        if value is not None and value.type() != cel.Type.ERROR:
            errors = {}
            for n, element in enumerate(value.value()):
                result = element.value()
                if result is True:
                    return n, errors
                if result is not False:
                    errors[n] = f"`when` gave {result!r}, not true or false"
            return None, errors
    errors = {}
    for n, expression in enumerate(expressions):
        matched, error = matches(expression, bound)
        if error:
            errors[n] = error
        if matched:
            return n, errors
    return None, errors


# --- rule lists ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    id: str
    when: str
    then: str  # approve | reject | ask | quorum
    comment: str | None = None
    quorum: dict | None = None  # {"approvals": N, "from": [roles]} when then == "quorum"
    expression: object = field(default=None, compare=False, repr=False)

    def as_json(self) -> dict:
        then = {"quorum": self.quorum["approvals"], "from": self.quorum["from"]} if self.then == "quorum" else self.then
        out = {"id": self.id, "when": self.when, "then": then}
        if self.comment:
            out["comment"] = self.comment
        return out


@dataclass
class Problem:
    """One refusal of a rule list: which rule (index from 0), which key, what, and where in `when`."""

    rule: int | None
    key: str
    message: str
    line: int | None = None
    column: int | None = None

    def as_json(self) -> dict:
        out = {"key": self.key, "message": self.message}
        if self.rule is not None:
            out["rule"] = self.rule
        if self.line:
            out["line"], out["column"] = self.line, self.column
        return out

    def __str__(self) -> str:
        where = f"rule {self.rule + 1}: " if self.rule is not None else ""
        at = f" (line {self.line}, column {self.column})" if self.line else ""
        return f"{where}{self.key}: {self.message}{at}"


def check_rules(raw) -> tuple[list[Rule], list[Problem]]:
    """A rule list as agentos.yaml, the page or the API give it: every rule checked and compiled."""
    if not isinstance(raw, list):
        return [], [Problem(None, "rules", "a list of rules, each {id, when, then, comment?}")]
    if len(raw) > MAX_RULES:
        return [], [Problem(None, "rules", f"at most {MAX_RULES} rules")]
    rules, problems, seen = [], [], set()
    for n, entry in enumerate(raw):
        if not isinstance(entry, dict):
            problems.append(Problem(n, "rule", "a mapping {id, when, then, comment?}"))
            continue
        unknown = sorted(set(entry) - {"id", "when", "then", "comment"})
        if unknown:
            problems.append(Problem(n, unknown[0], "unknown key (known: id, when, then, comment)"))
        rule_id = entry.get("id")
        if not isinstance(rule_id, str) or not ID.match(rule_id):
            problems.append(Problem(n, "id", "required: letters, digits, '_', '.' and '-' (1-100 characters)"))
        elif rule_id in seen:
            problems.append(Problem(n, "id", f"'{rule_id}' is used twice"))
        seen.add(rule_id)
        when = entry.get("when")
        expression = None
        try:
            expression = compile_when(when if isinstance(when, str) else "")
        except WhenError as exc:
            problems.append(Problem(n, "when", exc.message, exc.line, exc.column))
        comment = entry.get("comment")
        if comment is not None and (not isinstance(comment, str) or len(comment) > 2000):
            problems.append(Problem(n, "comment", "text of at most 2000 characters"))
            comment = None
        then, quorum, problem = _then(entry.get("then", "ask"), comment)
        if problem:
            problems.append(Problem(n, "then", problem))
        if not problems:
            rules.append(Rule(rule_id, when, then, comment or None, quorum, expression))
    return (rules if not problems else []), problems


def _then(then, comment) -> tuple[str, dict | None, str | None]:
    if isinstance(then, str) and then in THEN_WORDS:
        if then == Action.REJECT and not (comment or "").strip():
            return then, None, "a reject rule needs a comment (the agent reads it)"
        return then, None, None
    if isinstance(then, dict) and set(then) == {"quorum", "from"}:
        n, roles = then["quorum"], then["from"]
        if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 10:
            if isinstance(roles, list) and roles and all(r in (Role.ADMIN, Role.MEMBER) for r in roles):
                return "quorum", {"approvals": n, "from": list(dict.fromkeys(roles))}, None
    return "ask", None, "approve, reject, ask, or {quorum: N, from: [roles]} (N from 1 to 10; roles admin, member)"


def rules_from_json(stored: list[dict]) -> list[Rule]:
    """A stored version's rules (checked when saved), compiled."""
    rules, problems = check_rules(stored)
    if problems:  # a stored version was checked when saved; a library change could still refuse it
        raise ValueError("; ".join(map(str, problems)))
    return rules


# --- what an expression sees ------------------------------------------------------------------


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def uses_flags(sources) -> bool:
    return any("flags" in source for source in sources)


_PLAIN_CHARACTERS: set[str] = set()  # characters seen by item_flags that can flag nothing


def _plain_character(ch: str) -> bool:
    """Neither hidden nor of a script mixed_scripts names beside Latin (so no text of such is flagged)."""
    return not is_hidden(ch) and not mixed_scripts("a" + ch)


def item_flags(item_id: str, title: str, data, data_text: str | None = None) -> list[str]:
    """`item.flags`: what the hold page warns about in an item's text. `data_text`: `data` as the JSON
    text it was read from, when the caller has it."""
    flags = []
    # Printable ASCII holds neither hidden characters nor other scripts: most text skips the scan.
    # JSON text escapes every control character with a backslash, so printable ASCII text without
    # one holds only printable ASCII keys and strings: the walk over `data` can be skipped.
    plain = data_text is not None and data_text.isascii() and data_text.isprintable() and "\\" not in data_text
    strings = () if plain else _strings(data)
    # A text of characters already seen to be neither hidden nor of a look-alike script flags nothing
    # (titles such as "Acme · 12.50"): one set comparison instead of a lookup per character.
    texts = [text for text in (item_id, title, *strings) if not (text.isascii() and text.isprintable())]
    texts = [text for text in texts if not _PLAIN_CHARACTERS.issuperset(text)]
    if texts and len(_PLAIN_CHARACTERS) < 4096:
        _PLAIN_CHARACTERS.update(ch for text in texts for ch in text if _plain_character(ch))
    if any(is_hidden(ch) for text in texts for ch in text):
        flags.append("hidden_characters")
    if any(mixed_scripts(text) for text in texts):
        flags.append("mixed_scripts")
    return flags


def lowest_confidence(confidence: dict):
    """`item.confidence`: the lowest of an item's numeric confidence values, None without one."""
    values = [v for v in confidence.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return min(values) if values else None


def item_context(
    *,
    item_id: str,
    title: str,
    data,
    confidence: dict | None,
    run_input,
    capability: str,
    flags: bool = True,
    lowest: float | None = None,
    data_text: str | None = None,
) -> dict:
    """The variables of one evaluation (SPEC: item.data, item.confidence as its lowest value or null,
    item.flags, item.title, run.input, capability). `lowest`: that value when the caller has it (and
    no `confidence`). `flags=False` when no expression reads them (`uses_flags`): an empty list then,
    without scanning the item's text. `data_text`: `data`'s JSON text when the caller has it (item_flags)."""
    if confidence is not None:
        lowest = lowest_confidence(confidence)
    return {
        "item": {
            "id": item_id,
            "title": title,
            "data": data,
            "confidence": lowest,
            "flags": item_flags(item_id, title, data, data_text) if flags else [],
        },
        "run": {"input": run_input if run_input is not None else {}},
        "capability": capability,
    }
