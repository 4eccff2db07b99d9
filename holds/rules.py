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


# --- a shortcut for simple expressions (the backtest) --------------------------------------------
#
# The backtest replays a rule list over up to 100,000 items; cel-expr-python costs about 25 µs per item
# for 20 rules, most of it crossing into C++ and back. Rules are mostly comparisons of an item's fields
# with literals, so a list whose every `when` is within a small part of CEL (below) is also compiled to
# one Python function. That function answers only when it is sure: for each rule, in order, the boolean
# CEL would give, or "don't know" (`_U`) for anything else: an error (a missing key, a value of the wrong
# type, an integer CEL could not hold), a value other than a boolean, a case whose CEL semantics it
# does not model. When every rule up to the first true one is a sure false, the answer (that index, no
# errors) is exactly what `first_true` gives; on "don't know" the caller evaluates that item with CEL as
# before. `_U` propagates like a CEL error: `false && _U` is false and `true || _U` is true (CEL's
# logical operators are commutative over errors), so a sure answer never hides an error CEL would count.
#
# The part of CEL: literals (decimal ints, doubles, strings without escapes, true, false, null); `item`,
# `run` and `capability` followed by field selections (`.name` or `['name']`); `has(x.name)`; `size(x)`
# and `x.size()`; `double(x)`; `x.startsWith(s)`, `endsWith`, `contains`; `!`, unary minus on a number;
# `==`, `!=`, `<`, `<=`, `>`, `>=` (one per operand pair); `&&`, `||`; parentheses. Anything else (a
# macro, arithmetic, `in`, `?:`, a comment, an escape) makes the whole list go through CEL alone.


class _Unknown:
    __slots__ = ()

    def __repr__(self) -> str:
        return "_U"


_U = _Unknown()
_INT64 = (-(2**63), 2**63 - 1)
_EXACT = 2**53  # integers a double holds exactly: an int and a double compare the same in CEL and Python
_NUMBER = (int, float)
_DECIMAL = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")
_INF = float("inf")
_SMALLEST = 2.2250738585072014e-308  # the smallest normal double
_NON_ZERO = re.compile("[1-9]")
_ITEM_KEYS = ("id", "title", "data", "confidence", "flags")  # item_context's keys


def _number(v) -> bool:
    """An int CEL holds as int64, or a double."""
    kind = type(v)
    return kind is float or (kind is int and _INT64[0] <= v <= _INT64[1])


def _comparable(a, b) -> bool:
    """Both numbers, and compared alike in CEL and Python (same kind, or an int a double holds exactly)."""
    if not (_number(a) and _number(b)):
        return False
    return type(a) is type(b) or -_EXACT <= (a if type(a) is int else b) <= _EXACT


def _sel(v, key):
    return v.get(key, _U) if type(v) is dict else _U


def _has(v, key):
    return (key in v) if type(v) is dict else _U


def _scalar(v) -> bool:
    """A value `_eq` compares: not a map, a list, or an int CEL cannot hold."""
    kind = type(v)
    return kind in (str, bool, float, type(None)) or (kind is int and _INT64[0] <= v <= _INT64[1])


def _eq(a, b):
    """CEL's `==` (heterogeneous: values of different kinds are not equal; numbers compare as numbers)."""
    if not (_scalar(a) and _scalar(b)):
        return _U
    ka, kb = type(a), type(b)
    if ka in _NUMBER and kb in _NUMBER:
        return a == b if _comparable(a, b) else _U
    return ka is kb and a == b


def _ne(a, b):
    equal = _eq(a, b)
    return _U if equal is _U else not equal


def _ordered(a, b) -> bool:
    return (type(a) is str and type(b) is str) or _comparable(a, b)


def _lt(a, b):
    return a < b if _ordered(a, b) else _U


def _le(a, b):
    return a <= b if _ordered(a, b) else _U


def _gt(a, b):
    return a > b if _ordered(a, b) else _U


def _ge(a, b):
    return a >= b if _ordered(a, b) else _U


def _and(a, b):
    """CEL's `&&` once `a` is known not to be false."""
    if b is False:
        return False
    return True if a is True and b is True else _U


def _or(a, b):
    """CEL's `||` once `a` is known not to be true."""
    if b is True:
        return True
    return False if a is False and b is False else _U


def _not(v):
    return (not v) if type(v) is bool else _U


def _size(v):
    if type(v) is str:
        return len(v)
    if type(v) is list and all(type(x) is str for x in v):
        return len(v)
    return _U


def _double(v):
    kind = type(v)
    if kind is float:
        return v
    if kind is int:
        return float(v) if _number(v) else _U
    if kind is str and _DECIMAL.match(v):
        value = float(v)
        # Beyond a double's range (inf), below it (0.0 from a non-zero text), or subnormal: left to CEL.
        if value in (_INF, -_INF) or (value == 0.0 and _NON_ZERO.search(v.partition("e")[0].partition("E")[0])):
            return _U
        if value != 0.0 and abs(value) < _SMALLEST:
            return _U
        return value
    return _U


def _starts(v, s):
    return v.startswith(s) if type(v) is str and type(s) is str else _U


def _ends(v, s):
    return v.endswith(s) if type(v) is str and type(s) is str else _U


def _contains(v, s):
    return (s in v) if type(v) is str and type(s) is str else _U


class _NotInPart(Exception):
    """The expression uses CEL beyond the part the shortcut models."""


_TOKENS = re.compile(
    r"\s*(?:(?P<num>[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)(?![A-Za-z0-9_.])"
    r"|(?P<str>'[^'\\\n\r]*'|\"[^\"\\\n\r]*\")"
    r"|(?P<id>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>&&|\|\||==|!=|<=|>=|[<>!().,\[\]-]))"
)
_RELATIONS = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
_METHODS = {"startsWith": "starts", "endsWith": "ends", "contains": "contains", "size": "size"}


def _tokens(source: str) -> list[tuple[str, object]]:
    out, at = [], 0
    while at < len(source):
        if source[at:].strip() == "":
            break
        found = _TOKENS.match(source, at)
        if not found or found.end() == at:
            raise _NotInPart(source[at:])
        at = found.end()
        kind = found.lastgroup
        text = found.group(kind)
        if kind == "num":
            if "." in text or "e" in text or "E" in text:
                value = float(text)
                if value in (_INF, -_INF):
                    raise _NotInPart(text)
                out.append(("lit", value))
            else:
                value = int(text)
                if value > _INT64[1]:
                    raise _NotInPart(text)
                out.append(("lit", value))
        elif kind == "str":
            out.append(("lit", text[1:-1]))
        elif kind == "id":
            words = {"true": True, "false": False, "null": None}
            out.append(("lit", words[text]) if text in words else ("id", text))
        else:
            out.append(("op", text))
    return out


def _literal(value) -> tuple:
    """A literal's node, its repr beside it: 1, 1.0 and true (equal in Python) are three subtrees."""
    return ("lit", value, repr(value))


class _Parser:
    """Recursive descent over the part of CEL above, to a tree of tuples."""

    def __init__(self, source: str):
        self.tokens, self.at = _tokens(source), 0

    def peek(self, *ops):
        if self.at < len(self.tokens) and self.tokens[self.at][0] == "op" and self.tokens[self.at][1] in ops:
            return self.tokens[self.at][1]
        return None

    def take(self, op: str) -> None:
        if not self.peek(op):
            raise _NotInPart(f"expected {op}")
        self.at += 1

    def parse(self):
        tree = self.disjunction()
        if self.at != len(self.tokens):
            raise _NotInPart("trailing input")
        return tree

    def disjunction(self):
        tree = self.conjunction()
        while self.peek("||"):
            self.at += 1
            tree = ("or", tree, self.conjunction())
        return tree

    def conjunction(self):
        tree = self.relation()
        while self.peek("&&"):
            self.at += 1
            tree = ("and", tree, self.relation())
        return tree

    def relation(self):
        tree = self.unary()
        op = self.peek(*_RELATIONS)
        if op:
            self.at += 1
            tree = (_RELATIONS[op], tree, self.unary())
            if self.peek(*_RELATIONS):
                raise _NotInPart("chained relation")
        return tree

    def unary(self):
        if self.peek("!"):
            self.at += 1
            return ("not", self.unary())
        if self.peek("-"):
            self.at += 1
            token = self.tokens[self.at] if self.at < len(self.tokens) else None
            if token and token[0] == "lit" and _number(token[1]) and not self.peek_after_literal():
                self.at += 1
                return _literal(-token[1])
            raise _NotInPart("minus")
        return self.member()

    def peek_after_literal(self) -> bool:
        """A literal followed by `.` or `[` (a member of it): not a plain negative number."""
        following = self.tokens[self.at + 1] if self.at + 1 < len(self.tokens) else None
        return following is not None and following in (("op", "."), ("op", "["))

    def member(self):
        tree = self.primary()
        while True:
            if self.peek("."):
                self.at += 1
                token = self.tokens[self.at] if self.at < len(self.tokens) else None
                if not token or token[0] != "id":
                    raise _NotInPart("selection")
                self.at += 1
                if self.peek("("):
                    if token[1] not in _METHODS:
                        raise _NotInPart(token[1])
                    args = self.arguments()
                    if len(args) != (0 if token[1] == "size" else 1):
                        raise _NotInPart("arguments")
                    tree = (_METHODS[token[1]], tree, *args)
                else:
                    tree = ("sel", tree, token[1])
            elif self.peek("["):
                self.at += 1
                token = self.tokens[self.at] if self.at < len(self.tokens) else None
                if not token or token[0] != "lit" or type(token[1]) is not str:
                    raise _NotInPart("index")
                self.at += 1
                self.take("]")
                tree = ("sel", tree, token[1])
            else:
                return tree

    def arguments(self) -> list:
        self.take("(")
        args = []
        if not self.peek(")"):
            args.append(self.disjunction())
            while self.peek(","):
                self.at += 1
                args.append(self.disjunction())
        self.take(")")
        return args

    def primary(self):
        if self.at >= len(self.tokens):
            raise _NotInPart("end")
        kind, value = self.tokens[self.at]
        self.at += 1
        if kind == "lit":
            return _literal(value)
        if kind == "op" and value == "(":
            tree = self.disjunction()
            self.take(")")
            return tree
        if kind == "id" and self.peek("("):
            args = self.arguments()
            if value in ("size", "double") and len(args) == 1:
                return (value, args[0])
            if value == "has" and len(args) == 1 and args[0][0] == "sel":
                return ("has", args[0][1], args[0][2])
            raise _NotInPart(value)
        if kind == "id" and value in ("item", "run", "capability"):
            return ("var", value)
        raise _NotInPart(str(value))


_INLINE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


class _Writer:
    """Python text for trees: values or _U, never an exception."""

    def __init__(self):
        self.temps = 0
        self.hoisted: dict[tuple, str] = {}  # a pure subtree seen more than once: computed once per item

    def temp(self) -> str:
        self.temps += 1
        return f"t{self.temps}"

    def expression(self, tree) -> str:
        if tree in self.hoisted:
            return self.hoisted[tree]
        kind = tree[0]
        if kind == "lit":
            return repr(tree[1])
        if kind == "var":
            if tree[1] == "capability":
                return "capability"
            raise _NotInPart("a whole variable")  # `item` or `run` as a value
        if kind == "sel":
            base = tree[1]
            if base == ("var", "item"):
                return f"item_{tree[2]}" if tree[2] in _ITEM_KEYS else "_U"
            if base == ("var", "run"):
                return "run_input" if tree[2] == "input" else "_U"
            return f"_sel({self.expression(base)}, {tree[2]!r})"
        if kind == "has":
            base = tree[1]
            if base == ("var", "item"):
                return repr(tree[2] in _ITEM_KEYS)
            if base == ("var", "run"):
                return repr(tree[2] == "input")
            return f"_has({self.expression(base)}, {tree[2]!r})"
        if kind == "and":
            t = self.temp()
            return f"(False if ({t} := {self.expression(tree[1])}) is False else _and({t}, {self.expression(tree[2])}))"
        if kind == "or":
            t = self.temp()
            return f"(True if ({t} := {self.expression(tree[1])}) is True else _or({t}, {self.expression(tree[2])}))"
        if kind in _INLINE and tree[2][0] == "lit" and type(tree[2][1]) in (str, float):
            # A comparison with a string or double literal, the common case: inline when the kinds match.
            literal, t = tree[2][1], self.temp()
            kind_name = type(literal).__name__
            return (
                f"({t} {_INLINE[kind]} {literal!r} if type({t} := {self.expression(tree[1])}) is {kind_name}"
                f" else _{kind}({t}, {literal!r}))"
            )
        if kind in ("eq", "ne", "lt", "le", "gt", "ge", "starts", "ends", "contains"):
            return f"_{kind}({self.expression(tree[1])}, {self.expression(tree[2])})"
        if kind in ("not", "size", "double"):
            return f"_{kind}({self.expression(tree[1])})"
        raise _NotInPart(kind)


def _subtrees(tree):
    yield tree
    for part in tree[1:]:
        if isinstance(part, tuple):
            yield from _subtrees(part)


_LONG_INTEGER = re.compile(r"[0-9]{19}")


def shortcut_may_read(json_text: str | None) -> bool:
    """Whether the shortcut may be asked about an item whose `item.data` (or `run.input`) is this JSON text:
    CEL converts a variable whole at its first use, and an integer beyond 64 bits anywhere in it makes
    every use of that variable an error. Nineteen digits in a row (an integer that may not fit, or merely
    a long number or string) leave the item to CEL."""
    return json_text is None or _LONG_INTEGER.search(json_text) is None


@functools.lru_cache(maxsize=256)
def shortcut(sources: tuple[str, ...]):
    """One Python function for a rule list (see above), or None when one `when` is beyond the part of
    CEL it models. Called with an item's variables (item_id, item_title, item_data, item_confidence,
    item_flags, run_input, capability), it returns the index of the first true rule, -1 when every rule
    is false, and None when it cannot be sure (the caller asks CEL). Only for items whose data and run
    input pass `shortcut_may_read`."""
    try:
        return _shortcut(sources)
    except (_NotInPart, SyntaxError, RecursionError, MemoryError, ValueError):
        # Beyond the modelled part, or deeper than Python's parser or stack go (`!!!…` 300 times is valid CEL).
        return None


def _shortcut(sources: tuple[str, ...]):
    trees = [_Parser(source).parse() for source in sources]
    writer = _Writer()
    seen: dict[tuple, int] = {}
    for tree in trees:
        for sub in _subtrees(tree):
            if sub[0] in ("sel", "has", "size", "double"):
                seen[sub] = seen.get(sub, 0) + 1
    lines = []
    # Pure and total subtrees used more than once, smallest first (a selection before its uses).
    for sub in sorted((s for s, n in seen.items() if n > 1), key=lambda s: len(repr(s))):
        text = writer.expression(sub)
        name = f"h{len(writer.hoisted)}"
        lines.append(f"    {name} = {text}")
        writer.hoisted[sub] = name
    for n, tree in enumerate(trees):
        lines.append(f"    r = {writer.expression(tree)}")
        lines.append(f"    if r is not False:\n        return {n} if r is True else None")
    arguments = "item_id, item_title, item_data, item_confidence, item_flags, run_input, capability"
    text = f"def evaluate({arguments}):\n" + "\n".join(lines) + "\n    return -1\n"
    namespace = {name: value for name, value in globals().items() if name.startswith("_")}
    exec(compile(text, "<rules shortcut>", "exec"), namespace)  # noqa: S102 (text written above from a parsed tree)
    function = namespace["evaluate"]
    function.text = text
    return function
