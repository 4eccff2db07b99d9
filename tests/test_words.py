"""The domain's words are defined once (holds/words.py): no quoted action, audit kind or delivery result
anywhere else in holds/ or the templates, and what is built from them agrees with them."""

import ast
import pathlib
import re

import pytest

from holds import schemas
from holds.templatetags.review import action_label
from holds.words import Action, AuditKind, DeliveryResult, OutcomeKind

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Words that mean one thing only. The delivery words shared with a status ("answered", "failed",
# "undeliverable", "parked": Invocation.Status) and "answer"/"gone" (also field names and a
# notification's result) are left to review.
ONLY_WORDS = (
    set(Action.values)
    | set(AuditKind.values)
    | {DeliveryResult.RETRY, DeliveryResult.STALE, DeliveryResult.DEFERRED, DeliveryResult.NOT_DUE}
    | {OutcomeKind.FATAL}
)


def _docstrings(tree) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(node.body[0].value) for node in ast.walk(tree) if isinstance(node, kinds) and ast.get_docstring(node)}


def quoted_words(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    return [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in ONLY_WORDS and id(node) not in docs
    ]


def test_no_module_of_holds_quotes_an_action_audit_kind_or_delivery_result():
    found = []
    for path in sorted((ROOT / "holds").rglob("*.py")):
        if "migrations" not in path.parts and path.name != "words.py":
            found += quoted_words(path)
    assert found == []


def test_no_template_compares_with_a_quoted_action():
    pattern = re.compile(r"\{%[^%]*[\"'](" + "|".join(Action.values) + r")[\"'][^%]*%\}")
    found = [str(p.relative_to(ROOT)) for p in (ROOT / "templates").rglob("*.html") if pattern.search(p.read_text())]
    assert found == []


def test_the_scan_finds_a_quoted_word(tmp_path):
    # The check above cannot pass by seeing nothing.
    sample = ROOT / "holds" / "_words_sample.py"
    try:
        sample.write_text('"""Docstrings may say "edit"."""\nRESULT = "stale"\nKIND = "hold.decided"\n')
        assert [line.split(": ")[1] for line in quoted_words(sample)] == ["'stale'", "'hold.decided'"]
    finally:
        sample.unlink()


def test_the_wire_and_the_labels_take_the_actions_from_the_enum():
    assert schemas.DecisionItemIn.model_json_schema()["properties"]["action"]["enum"] == list(Action.values)
    assert [action_label(a) for a in Action.values] == [a.label for a in Action]


@pytest.mark.parametrize("result", list(DeliveryResult))
def test_delivery_results_are_plain_words_sql_can_carry(result):
    assert re.fullmatch(r"[a-z-]+", result.value)
