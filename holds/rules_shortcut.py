"""The backtest's shortcut: a rule list evaluated in Python where CEL's answer is certain (holds/rules.py
evaluates through cel-expr-python; holds/backtest.py asks this module first, item by item).

The backtest replays a rule list over up to 100,000 items; cel-expr-python costs about 25 µs per item
for 20 rules, most of it crossing into C++ and back. Rules are mostly comparisons of an item's fields
with literals, so a list whose every `when` is within a small part of CEL (below) is also compiled to
one Python function. That function answers only when it is sure: for each rule, in order, the boolean
CEL would give, or "don't know" (`_U`) for anything else: an error (a missing key, a value of the wrong
type, an integer CEL could not hold), a value other than a boolean, a case whose CEL semantics it
does not model. When every rule up to the first true one is a sure false, the answer (that index, no
errors) is exactly what `first_true` gives; on "don't know" the caller evaluates that item with CEL as
before. `_U` propagates like a CEL error: `false && _U` is false and `true || _U` is true (CEL's
logical operators are commutative over errors), so a sure answer never hides an error CEL would count.

The part of CEL: literals (decimal ints, doubles, strings without escapes, true, false, null); `item`,
`run` and `capability` followed by field selections (`.name` or `['name']`); `has(x.name)`; `size(x)`
and `x.size()`; `double(x)`; `x.startsWith(s)`, `endsWith`, `contains`; `!`, unary minus on a number;
`==`, `!=`, `<`, `<=`, `>`, `>=` (one per operand pair); `&&`, `||`; parentheses. Anything else (a
macro, arithmetic, `in`, `?:`, a comment, an escape) makes the whole list go through CEL alone.
"""

import functools
import re


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
