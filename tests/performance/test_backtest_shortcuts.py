"""The backtest's shortcuts (holds/backtest.py, issue 33 performance) give what the long way gives:
item.flags from the data's JSON text, and the per-character caches of the flag scan; and rules_shortcut.shortcut,
the rules evaluated in Python, against cel-expr-python itself on the same items."""

import json
import random

import pytest

from holds.rules import activation, compile_list, compile_when, first_true, item_context, item_flags, lowest_confidence
from holds.rules_shortcut import _U, shortcut, shortcut_may_read

DATA = [
    {"payee": "Acme", "amount": "12.50"},
    {"payee": "Acme\u200b", "amount": "12.50"},  # a hidden character, as itself in the text
    {"payee": "Acme\u0007"},  # a control character: escaped in JSON text
    {"note": "line\nbreak"},
    {"payee": "Аcme"},  # Cyrillic А with Latin
    {"Аcme": ["x", {"y": "ok"}]},  # in a key
    {"payee": "Café · Ünïcode"},
    {"quote": 'say "hi" \\ back'},
]


@pytest.mark.parametrize("data", DATA)
@pytest.mark.parametrize("title", ["Refund 12", "Acme · 12", "Pаypal"])
def test_flags_from_the_json_text_are_the_flags_from_the_data(data, title):
    for text in (json.dumps(data, ensure_ascii=False), json.dumps(data)):
        assert item_flags("item-1", title, data, text) == item_flags("item-1", title, data)


def test_the_flags_are_not_all_empty():
    """The cases above cover each flag (a comparison of two empty lists would prove nothing)."""
    flagged = [item_flags("i", "t", d, json.dumps(d, ensure_ascii=False)) for d in DATA]
    assert ["hidden_characters"] in flagged and ["mixed_scripts"] in flagged and [] in flagged


def test_lowest_confidence():
    assert lowest_confidence({"a": 0.9, "b": 0.4, "c": True, "d": "0.1"}) == 0.4
    assert lowest_confidence({"a": "x"}) is None and lowest_confidence({}) is None


# --- rules_shortcut.shortcut: the backtest's Python evaluation gives what CEL gives, or says it cannot ------------


ITEMS = [
    {"payee": "Acme", "amount": "12.50", "n": 5, "f": 0.5, "ok": True, "tags": ["a"], "m": {"k": "v"}},
    {"payee": "Vendor 3", "amount": "1000001", "n": 2**53 + 1, "f": 2.0**53, "ok": False, "tags": [], "m": {}},
    {"payee": 5, "amount": 7, "n": -3, "f": -0.0, "ok": 1, "tags": ["a", 1], "m": {"k": None}},
    {"payee": None, "amount": " 1", "n": 2**63, "f": 1e308, "ok": None, "m": "text"},
    {"payee": "", "amount": "1e999", "n": 2**64, "f": 3, "ok": "true", "tags": "abc"},
    {"payee": "Acme", "amount": "1e-400", "n": 0, "f": 0.95, "ok": True, "tags": ["x", "y"], "m": [1]},
    {"payee": "Acme", "amount": "-0", "n": 1, "f": 0.5, "ok": True, "tags": ["x"], "m": {"k": "v"}},
    {"payee": "Acme", "amount": "1e+3", "n": 2, "f": 1.0, "ok": True, "m": {"k": "v"}},
    {"payee": "Acme", "amount": "1e-320", "n": 3, "f": 2.5},
    {"amount": "nan", "n": 1.0, "f": "0.5"},
    {"payee": "Refund Acme", "amount": "-0.25", "n": 9007199254740992, "f": 9007199254740993.0},
    {"payee": "Acme", "amount": True, "n": [1], "f": {"x": 1}, "ok": {"x": True}},
    {"payee": "Aç", "amount": "0.4", "n": 1, "f": 0.4, "ok": True, "tags": ["Refund"], "m": {"k": "Refund 1"}},
    {"payee": "Acme", "amount": "1E3", "n": 9007199254740993, "f": -1e-3},
    {"payee": "Acme", "amount": "007.5", "n": -0, "f": 1e-320},
    {"payee": "Acme", "amount": "9007199254740993", "f": 0.1, "ok": False, "tags": ["Refund", "x"]},
    {},
]
CONTEXTS = [
    {"item_id": f"INV-{n}", "title": title, "data": data, "lowest": lowest, "run_input": run_input}
    for n, (data, title, lowest, run_input) in enumerate(
        (data, title, lowest, run_input)
        for data in ITEMS
        for title, lowest, run_input in [
            ("Refund 12", 0.95, None),
            ("Acme · 12", None, {"trusted": True}),
            ("Pаypal", 0.3, {"trusted": "yes", "n": 1}),
        ]
    )
]

# Each within the part of CEL the shortcut models; between them they meet every error it must leave to CEL.
WHENS = [
    "item.data.payee == 'Acme'",
    "item.data.payee != 'Acme'",
    "item.data.payee == 'Acme' && item.confidence > 0.9",
    "item.confidence > 0.9 && item.data.payee == 'Acme'",
    "item.data.missing > 1",
    "item.data.missing > 1 && false",
    "false && item.data.missing > 1",
    "item.data.missing > 1 || true",
    "item.data.missing > 1 || false",
    "true || item.data.missing",
    "double(item.data.amount) > 1000000.0",
    "double(item.data.amount) < 0.5 && item.confidence > 0.95",
    "double(item.data.amount) == 12.5",
    "double(item.data.n) >= 2.0",
    "item.data.n == 5",
    "item.data.n > 9007199254740992.0",
    "item.data.n == 9007199254740993.0",
    "item.data.n < 3",
    "item.data.n <= -3",
    "item.data.f == 0.0",
    "item.data.f == 3",
    "item.data.f > 9007199254740992",
    "item.data.ok == true",
    "item.data.ok != false",
    "item.data.ok == 1",
    "item.data.ok == null",
    "item.data.payee == null",
    "item.data.payee < 'B'",
    "item.data.payee >= ''",
    "!item.data.ok",
    "!(item.data.payee == 'Acme')",
    "has(item.data.payee)",
    "has(item.data.m.k)",
    "has(run.input.trusted) && run.input.trusted == true",
    "run.input.trusted == true",
    "has(item.nope)",
    "has(item.flags)",
    "item.nope == 1",
    "run.nope == 1",
    "size(item.flags) > 0",
    "size(item.data.tags) == 1",
    "item.data.tags.size() >= 2",
    "size(item.data.payee) == 4",
    "size(item.data.m) == 1",
    "item.title.startsWith('Refund ')",
    "item.title.endsWith('12')",
    "item.title.contains('·')",
    "item.data.payee.startsWith('Refund')",
    "item.data['payee'] == 'Acme'",
    "item['data']['m']['k'] == 'v'",
    "item.data.m.k == 'v'",
    "capability == 'pay_invoices'",
    "capability.startsWith('pay')",
    "item.id == 'INV-1'",
    "item.confidence == null",
    "item.confidence < 0.5 || item.confidence > 0.9",
    "item.data.n == 1 && (item.data.f == 0.4 || item.data.ok)",
    "-5 < item.data.n",
    "item.data.f > -0.5",
    "item.data.amount == '12.50'",
    "double(item.data.f) < 1.0",
    "item.data.payee",
    "item.data.n",
]


def _cel(sources, ctx) -> tuple[int | None, dict]:
    context = item_context(
        item_id=ctx["item_id"],
        title=ctx["title"],
        data=ctx["data"],
        confidence=None,
        lowest=ctx["lowest"],
        run_input=ctx["run_input"],
        capability="pay_invoices",
    )
    return first_true([compile_when(s) for s in sources], compile_list(tuple(sources)), activation(context))


def _fast(function, ctx):
    if not shortcut_may_read(json.dumps(ctx["data"])) or not shortcut_may_read(json.dumps(ctx["run_input"])):
        return None  # as holds/backtest.py: CEL alone for those
    flags = item_flags(ctx["item_id"], ctx["title"], ctx["data"])
    run_input = ctx["run_input"] if ctx["run_input"] is not None else {}
    return function(ctx["item_id"], ctx["title"], ctx["data"], ctx["lowest"], flags, run_input, "pay_invoices")


def _agrees(sources, counts) -> None:
    function = shortcut(tuple(sources))
    assert function is not None, sources
    for ctx in CONTEXTS:
        index, errors = _cel(sources, ctx)
        found = _fast(function, ctx)
        if found is None:
            counts["unsure"] += 1
            continue
        counts["sure"] += 1
        # Sure: exactly what CEL gives, no error hidden.
        assert (found if found >= 0 else None, {}) == (index, errors), (sources, ctx, function.text)
        counts["true" if found >= 0 else "false"] += 1


def test_each_when_alone_gives_what_cel_gives_or_is_left_to_cel():
    counts = {"sure": 0, "unsure": 0, "true": 0, "false": 0}
    for when in WHENS:
        _agrees([when], counts)
    # Not vacuous: many sure answers of both kinds, and the errors left to CEL.
    assert counts["true"] > 50 and counts["false"] > 300 and counts["unsure"] > 200, counts


def test_lists_give_the_first_true_rule_cel_gives():
    counts = {"sure": 0, "unsure": 0, "true": 0, "false": 0}
    rng = random.Random(33)
    for _ in range(60):
        _agrees(rng.sample(WHENS, rng.randrange(2, 8)), counts)
    assert counts["true"] > 100 and counts["false"] > 20 and counts["unsure"] > 100, counts


def test_a_rule_that_errors_is_left_to_cel_which_counts_it_false_with_its_error():
    """The items CEL gives an error for are the ones the shortcut is unsure of (never a sure false)."""
    function = shortcut(("item.data.missing > 1", "item.data.payee == 'Acme'"))
    for ctx in CONTEXTS:
        index, errors = _cel(("item.data.missing > 1", "item.data.payee == 'Acme'"), ctx)
        assert 0 in errors and index in (None, 1)
        assert _fast(function, ctx) is None


# A random walk over the modelled part of CEL: whatever it writes that CEL compiles, both must agree on.
PATHS = [
    "item.data.payee",
    "item.data.amount",
    "item.data.n",
    "item.data.f",
    "item.data.ok",
    "item.data.tags",
    "item.data.m",
    "item.data.m.k",
    "item.confidence",
    "item.title",
    "item.flags",
    "run.input.trusted",
    "capability",
    "item.data.nope",
]
LITERALS = ["'Acme'", "''", "'Refund'", "0", "1", "-3", "5", "0.5", "0.0", "-0.5", "1e3", "true", "false", "null"]


def _random_value(rng, depth):
    roll = rng.random()
    if roll < 0.45:
        return rng.choice(PATHS)
    if roll < 0.7:
        return rng.choice(LITERALS)
    if roll < 0.8:
        return f"double({rng.choice(PATHS)})"
    if roll < 0.9:
        return f"size({rng.choice(PATHS)})"
    return f"{rng.choice(PATHS)}.{rng.choice(['startsWith', 'endsWith', 'contains'])}({rng.choice(LITERALS)})"


def _random_bool(rng, depth):
    roll = rng.random()
    if depth > 2 or roll < 0.45:
        op = rng.choice(["==", "!=", "<", "<=", ">", ">="])
        return f"{_random_value(rng, depth)} {op} {_random_value(rng, depth)}"
    if roll < 0.6:
        return f"has({rng.choice(PATHS[:-2])}.{rng.choice(['payee', 'k', 'x'])})"
    if roll < 0.7:
        return f"!({_random_bool(rng, depth + 1)})"
    if roll < 0.75:
        return _random_value(rng, depth)  # a non-boolean, or an error, most of the time
    op = rng.choice(["&&", "||"])
    return f"({_random_bool(rng, depth + 1)}) {op} ({_random_bool(rng, depth + 1)})"


def test_random_expressions_give_what_cel_gives():
    rng = random.Random(20261205)
    counts = {"sure": 0, "unsure": 0, "true": 0, "false": 0}
    checked = 0
    while checked < 600:
        when = _random_bool(rng, 0)
        try:
            compile_when(when)
        except ValueError:
            continue  # CEL refuses it (a type error its checker sees): never a saved rule
        checked += 1
        _agrees([when], counts)
    assert counts["true"] > 500 and counts["false"] > 700 and counts["unsure"] > 5000, counts


@pytest.mark.parametrize(
    "when",
    [
        "item.data.tags.exists(t, t == 'a')",
        "item.data.n + 1 > 2",
        "item.data.payee in ['Acme']",
        "item.data.ok ? true : false",
        "item.data.payee == 'Acme' // a comment",
        "item.data.payee == 'Ac\\u006de'",
        "item.data.payee == r'Acme'",
        "item.data.payee == '''Acme'''",
        "item.data.n == 1u",
        "item.data.n == 0x1",
        "int(item.data.amount) > 1",
        "item.data.payee.matches('^A')",
        "item == {}",
        "size(item) > 0",
        "item.data.n < 3 == true",
        "-item.data.n < 0",
        "item.data.n == .5",
        "item.data.tags[0] == 'a'",
    ],
)
def test_what_it_does_not_model_goes_through_cel_alone(when):
    compile_when(when)  # a rule CEL accepts
    assert shortcut((when,)) is None
    assert shortcut(("item.data.payee == 'Acme'", when)) is None


def test_the_unknown_value_reads_as_nothing():
    assert repr(_U) == "_U"


# --- the backtest with the shortcut and without: the same counts, errors and lists ------------------------

ITEMS_ASKED = [
    # (data, title, confidence, item actions or None)
    ({"payee": "Acme", "amount": "12.50"}, "Acme · 12.50", {"amount": 0.95}, None),
    ({"payee": "Acme", "amount": 7}, "Acme · 7", {"amount": 0.99, "payee": 0.97}, None),
    ({"amount": "0.25"}, "No payee", {"amount": 0.97}, None),  # a field the rules name is missing
    ({"payee": 5, "amount": "x"}, "Odd kinds", {"amount": 0.5}, None),
    ({"payee": "Acme", "amount": "1", "big": 18446744073709551616}, "Too big for CEL", {"amount": 0.99}, None),
    ({"payee": "Acme", "amount": "0.5"}, "Ac\u200bme", {"amount": 0.99}, None),  # flagged
    ({"payee": "Acme", "amount": "0.75"}, "Reject only", {"amount": 0.99}, ["reject", "feedback"]),
    ({"payee": "Acme", "amount": "3"}, "No confidence", {}, None),
]
RULES = [
    {"id": "flagged", "when": "size(item.flags) > 0", "then": "ask"},
    {"id": "odd", "when": "item.data.missing > 1", "then": "approve"},  # an error on every item: false
    {"id": "acme", "when": "item.data.payee == 'Acme' && item.confidence > 0.9", "then": "approve"},
    {"id": "cheap", "when": "double(item.data.amount) < 1.0", "then": "reject", "comment": "too small"},
    {"id": "trusted", "when": "has(run.input.trusted) && run.input.trusted == true", "then": "approve"},
]


def _seed_decided(cap):
    from holds import services
    from holds.auth import actor_for_user
    from tests import factories

    person = actor_for_user(factories.person("mona", role="member"))
    for n, (data, title, confidence, actions) in enumerate(ITEMS_ASKED * 2):
        run = factories.start_run(cap, input={"trusted": True} if n % 3 == 0 else {"n": 2})
        invocation, _ = factories.deliver_now(run)
        item = {"id": "INV-1", "title": title, "data": data, "confidence": confidence}
        if actions:
            item["actions"] = actions
        hold = services.hold_ask(invocation=invocation, body=factories.ask_body(1, items=[item]))
        factories.answer(invocation, {"status": "suspended", "hold_id": hold.public_id})
        action = "reject" if actions or n % 4 == 1 else "approve"
        services.hold_decide(hold_id=hold.pk, actor=person, body={"items": [{"id": "INV-1", "action": action}]})


def _both(cap, **kwargs) -> dict:
    from holds.backtest import backtest

    fast, plain = backtest(cap, **kwargs), backtest(cap, plain=True, **kwargs)
    out = [{k: v for k, v in r.as_json().items() if k != "since"} for r in (fast, plain)]
    assert out[0] == out[1]
    return out[1]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "rules",
    [
        RULES,
        RULES[2:] + RULES[:2],
        [{"id": "not-a-boolean", "when": "item.data.amount", "then": "approve"}, *RULES],
        [*RULES, {"id": "macro", "when": "item.data.exists(k, k == 'payee')", "then": "approve"}],  # CEL alone
        [RULES[3]],
    ],
)
def test_the_backtest_gives_the_same_with_the_shortcut_as_with_cel_alone(cap, rules):
    from holds.rules import check_rules

    _seed_decided(cap)
    checked, problems = check_rules(rules)
    assert not problems
    out = _both(cap, rules=checked)
    assert out["items"] == 2 * len(ITEMS_ASKED)
    # Not vacuous: something decided, something decided otherwise by people, errors counted.
    assert out["would_decide"] > 0 and out["decided_otherwise"] > 0, out
    if any(r["id"] == "odd" for r in rules):
        assert out["by_rule"]["odd"]["errors"] > 0 and out["by_rule"]["odd"]["would_decide"] == 0
    # A rule never approves an item that does not offer approve.
    assert not [d for d in out["differences"] if d["title"] == "Reject only" and d["would"] == "approve"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "when", ["item.data.payee == 'Acme'", "double(item.data.amount) < 5.0", "item.data.nope == 1", "item.data.payee"]
)
def test_a_grants_backtest_gives_the_same_with_the_shortcut(cap, when):
    _seed_decided(cap)
    out = _both(cap, grant_when=when)
    assert out["items"] == 2 * len(ITEMS_ASKED)


@pytest.mark.parametrize(
    "sources",
    [
        ("!" * 300 + "true",),  # valid CEL, deeper than Python's parser goes: CEL alone
        (" && ".join(["item.data.n == 1"] * 100),),
        ("double(1) == 1.0 && double(1.0) == 1.0", "size('ab') == 2 && double(item.data.n) == double(1)"),
        ("item.data.f < 1e300", "item.data.n == -0.0 || double(-0) == 0.0"),
    ],
)
def test_long_deep_and_look_alike_expressions(sources):
    """Never an exception, and equal-looking literals (1, 1.0, true) are not taken for one another."""
    for source in sources:
        compile_when(source)
    function = shortcut(sources)
    if sources[0].startswith("!!!"):
        assert function is None
        return
    assert function is not None
    _agrees(list(sources), {"sure": 0, "unsure": 0, "true": 0, "false": 0})


def test_characters_seen_plain_skip_the_scan_and_others_never_join_them():
    from holds.rules import _PLAIN_CHARACTERS

    for _ in range(2):  # the second time from what the first one learnt
        assert item_flags("i", "Acme · Café", {}) == []
        assert item_flags("i", "Pаypal · Café", {}) == ["mixed_scripts"]
        assert item_flags("i", "Acme\u200b · Café", {}) == ["hidden_characters"]
    assert {"·", "é"} <= _PLAIN_CHARACTERS and not {"а", "\u200b"} & _PLAIN_CHARACTERS
