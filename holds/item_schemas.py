"""Item schemas (SPEC "Settled": `schema`): checked under their draft, compiled at a bounded cost, once.

Compiling a pattern is what costs: Rust's `regex` (RE2's design, so matching is linear) builds an
automaton whose size grows with counted repetition, and `.{10000}` took 0.1-6 s to build. So an ask's
schemas are bounded before anything is compiled (at most MAX_PATTERNS patterns of MAX_PATTERN_CHARS,
MAX_ASK_SCHEMA_BYTES of distinct schemas), and each pattern is compiled with a size limit that the
engine checks while it builds (PATTERN_SIZE_LIMIT: past it the pattern is refused, having cost about
2 ms of CPU at most). A compiled schema is kept by its SHA-256 in a small LRU cache, so the asks of
one agent and every edit decision on its items compile nothing again.
"""

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any

import jsonschema_rs

from .canonical import canonical_json

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
DRAFT_07 = "http://json-schema.org/draft-07/schema"
# `$schema` as written -> the validator of that draft (an absent `$schema` means 2020-12).
DRAFTS = {
    DRAFT_2020_12: jsonschema_rs.Draft202012Validator,
    DRAFT_2020_12 + "#": jsonschema_rs.Draft202012Validator,
    DRAFT_07: jsonschema_rs.Draft7Validator,
    DRAFT_07 + "#": jsonschema_rs.Draft7Validator,
}
# SPEC "Per-item actions, details and schema": each at most 64 KiB (the schema as compact JSON).
MAX_ITEM_SCHEMA_BYTES = 64 * 1024
# The whole ask (its distinct schemas): compile time grows with the size of what is compiled.
MAX_ASK_SCHEMA_BYTES = 256 * 1024
MAX_PATTERNS = 32  # `pattern` values and `patternProperties` keys, in all of an ask's distinct schemas
MAX_PATTERN_CHARS = 1000
# Bytes of one compiled pattern. `^.{1,100}$`, `^\p{L}+$` or a UUID fit; `.{300}` does not.
PATTERN_SIZE_LIMIT = 256 * 1024
CACHE_SIZE = 256


def _walk(node: Any, path: str, patterns: list, remote: list) -> None:
    """Collects, in one pass over a schema, every regular expression (`pattern` values and
    `patternProperties` keys) and where it points outside itself (only `#...` references resolve:
    nothing is fetched)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern":
                patterns.append(value)
            elif key == "patternProperties" and isinstance(value, dict):
                patterns.extend(value)
            elif key in ("$ref", "$dynamicRef", "$recursiveRef") and isinstance(value, str):
                if not value.startswith("#"):
                    remote.append(f"{path}/{key}" if path else key)
            if isinstance(value, dict | list):
                _walk(value, f"{path}/{key}", patterns, remote)
    else:
        for n, value in enumerate(node):
            if isinstance(value, dict | list):
                _walk(value, f"{path}/{n}", patterns, remote)


def bound_problems(schemas: list[tuple[str, dict]]) -> list[dict]:
    """What makes an ask's schemas (`(field, schema)` pairs) too costly to compile, checked without
    compiling anything: sizes, the number and length of patterns, references and the draft."""
    errors, seen, total, patterns = [], set(), 0, 0
    for where, schema in schemas:
        text = canonical_json(schema)
        size = len(text.encode())
        if size > MAX_ITEM_SCHEMA_BYTES:
            errors.append({"field": where, "message": f"a schema is limited to {MAX_ITEM_SCHEMA_BYTES} bytes"})
            continue
        draft = schema.get("$schema", DRAFT_2020_12)
        if not isinstance(draft, str) or draft not in DRAFTS:
            message = f"$schema must name draft 2020-12 ({DRAFT_2020_12}) or draft-07 ({DRAFT_07})"
            errors.append({"field": where, "message": message})
            continue
        found, remote = [], []
        _walk(schema, "", found, remote)
        if remote:
            message = f"only local references (#...) are allowed; found one at {remote[0]}"
            errors.append({"field": where, "message": message})
            continue
        if text in seen:
            continue  # the same schema again compiles once
        seen.add(text)
        total += size
        patterns += len(found)
        long = [p for p in found if isinstance(p, str) and len(p) > MAX_PATTERN_CHARS]
        if long:
            message = f"a pattern is limited to {MAX_PATTERN_CHARS} characters"
            errors.append({"field": where, "message": message})
    if total > MAX_ASK_SCHEMA_BYTES:
        message = f"the schemas of one ask are limited to {MAX_ASK_SCHEMA_BYTES} bytes together"
        errors.append({"field": "items", "message": message})
    if patterns > MAX_PATTERNS:
        message = f"the schemas of one ask may hold at most {MAX_PATTERNS} patterns together"
        errors.append({"field": "items", "message": message})
    return errors


_cache: OrderedDict = OrderedDict()
_lock = threading.Lock()


def item_validator(schema: dict, *, bounded: bool = False):
    """The compiled validator of a schema, from the cache when it was compiled before. Raises
    ValueError (why) for a schema that is not valid (also cached). `bounded`: the caller found no
    bound_problems for it (an ask's whole set is bounded together); else they are checked first."""
    text = canonical_json(schema)
    key = hashlib.sha256(text.encode()).digest()
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
    if found is None:
        problems = [] if bounded else bound_problems([("schema", schema)])
        found = problems[0]["message"] if problems else _compile(schema)
        with _lock:
            _cache[key] = found
            while len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
    if isinstance(found, str):
        raise ValueError(found)
    return found


def _compile(schema: dict):
    """The validator, or why the schema is not valid. Patterns run on the linear-time engine with a
    size limit (RegexOptions); formats are not checked and nothing is fetched."""
    validator_class = DRAFTS[schema.get("$schema", DRAFT_2020_12)]
    try:
        return validator_class(
            schema,
            pattern_options=jsonschema_rs.RegexOptions(size_limit=PATTERN_SIZE_LIMIT),
            offline=True,
            validate_formats=False,
        )
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as exc:
        # The first line says what is wrong; the rest repeats the schema.
        first = str(exc).splitlines()[0]
        if 'is not a "regex"' in first:
            first += f" (or its compiled form is over {PATTERN_SIZE_LIMIT} bytes)"
        return f"not a valid JSON Schema: {first}"


def compile_problems(schemas: list[tuple[str, dict]]) -> list[dict]:
    """Each schema compiled (or found in the cache): why any is not valid. Call only after
    bound_problems found nothing, and only for a caller whose token is live."""
    errors = []
    for where, schema in schemas:
        try:
            item_validator(schema, bounded=True)
        except ValueError as exc:
            errors.append({"field": where, "message": str(exc)})
    return errors


def item_schema_problems(schema: dict) -> list[str]:
    """Why one schema may not be an item's (bounded, then compiled): for callers with a single schema
    (the MCP gateway's elicitations and tool inputs)."""
    problems = bound_problems([("schema", schema)]) or compile_problems([("schema", schema)])
    return [problem["message"] for problem in problems]


# --- an edit's schema errors in plain words --------------------------------------------------------

TYPE_WORDS = {
    "integer": "a whole number",
    "number": "a number",
    "string": "text",
    "boolean": "true or false",
    "object": "an object",
    "array": "a list",
    "null": "null",
}
ENUM_SHOWN = 12  # options named in a message; the select on the page offers them all


def _shown(value: Any, limit: int = 60) -> str:
    """A value as JSON, cut short: messages quote what was sent, not a page of it."""
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _count(n: Any, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def plain_problem(err) -> tuple[list, str]:
    """One item schema error (jsonschema_rs) as (the data path it is about, a sentence a reviewer can
    act on). The engine's own words quote the schema ('"ABCDE" does not match "^[0-9]{5}$"'); these
    say what the field must be, and still name the pattern, which is the only exact statement of a
    format. A missing required key is about that key, not the object that lacks it."""
    path, facts = list(err.instance_path), err.kind.as_dict()
    limit = facts.get("limit")
    words = {
        "pattern": lambda: f"{_shown(err.instance)} is not in the expected format (pattern {facts.get('pattern')})",
        "type": lambda: "must be " + " or ".join(TYPE_WORDS.get(t, t) for t in facts.get("types", [])),
        "enum": lambda: (
            "must be one of: "
            + ", ".join(_shown(o, 40) for o in facts.get("options", [])[:ENUM_SHOWN])
            + (", …" if len(facts.get("options", [])) > ENUM_SHOWN else "")
        ),
        "const": lambda: f"must be {_shown(facts.get('expected_value'))}",
        "minimum": lambda: f"must be at least {limit}",
        "maximum": lambda: f"must be at most {limit}",
        "exclusiveMinimum": lambda: f"must be more than {limit}",
        "exclusiveMaximum": lambda: f"must be less than {limit}",
        "multipleOf": lambda: f"must be a multiple of {facts.get('multiple_of')}",
        "minLength": lambda: f"must be at least {_count(limit, 'character')} long",
        "maxLength": lambda: f"must be at most {_count(limit, 'character')} long",
        "minItems": lambda: f"must have at least {_count(limit, 'item')}",
        "maxItems": lambda: f"must have at most {_count(limit, 'item')}",
        "uniqueItems": lambda: "must not list the same value twice",
        "minProperties": lambda: f"must have at least {_count(limit, 'field')}",
        "maxProperties": lambda: f"must have at most {_count(limit, 'field')}",
        "additionalProperties": lambda: (
            "has fields the schema does not allow: " + ", ".join(_shown(k, 40) for k in facts.get("unexpected", []))
        ),
    }
    kind = err.kind.name
    if kind == "required":
        return path + [facts.get("property")], "is required"
    return path, words[kind]() if kind in words else err.message
