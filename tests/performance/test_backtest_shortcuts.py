"""The backtest's shortcuts (holds/backtest.py, issue 33 performance) give what the long way gives:
item.flags from the data's JSON text, and the per-character caches of the flag scan."""

import json

import pytest

from holds.rules import item_flags, lowest_confidence

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
