"""Backtest (SPEC Round 3): a rule list or a grant replayed over the capability's recorded human decisions
(the last 90 days, at most 100,000 items, newest first): how many items it would have decided, and of
those how many a person decided otherwise (edited, rejected, feedback, or approved what it rejects).

One statement: the capability's decided holds by the `hold_decided_by_capability` index, their items
by the items' (hold, position) key; the run's input is read only when an expression names `run`.
Items that a rule or grant decided are not people's decisions and are left out.

The rules are evaluated by rules_shortcut.shortcut (Python) where it is sure of CEL's answer, by CEL
otherwise: the same results either way (tests/performance/test_backtest_shortcuts.py), about 4x less
CPU (docs/benchmarks-notes.md). `plain=True` evaluates every item through CEL.
"""

import json
import re
from dataclasses import dataclass, field
from datetime import timedelta

from django.utils import timezone

from .ids import HOLD, public_id
from .models import Action, Capability
from .rules import (
    Rule,
    activation,
    compile_list,
    compile_when,
    first_true,
    item_context,
    item_flags,
    lowest_confidence,
    uses_flags,
)
from .rules_shortcut import shortcut, shortcut_may_read
from .services import gateway, sql

DAYS = 90
MAX_ITEMS = 100_000
MAX_LISTED = 200
_NAMES_RUN = re.compile(r"\brun\b")


@dataclass
class RuleOutcome:
    decided: int = 0
    differ: int = 0
    errors: int = 0
    first_error: str | None = None


@dataclass
class Difference:
    hold_id: str
    item_id: str
    title: str
    person: str
    would: str
    by: str


@dataclass
class Backtest:
    items: int = 0
    decided: int = 0
    differ: int = 0
    since: object = None
    capped: bool = False
    by_rule: dict[str, RuleOutcome] = field(default_factory=dict)
    differences: list[Difference] = field(default_factory=list)

    def as_json(self) -> dict:
        return {
            "items": self.items,
            "would_decide": self.decided,
            "decided_otherwise": self.differ,
            "since": self.since.isoformat() if self.since else None,
            "capped": self.capped,
            "by_rule": {
                rule: {
                    "would_decide": o.decided,
                    "decided_otherwise": o.differ,
                    "errors": o.errors,
                    "error": o.first_error,
                }
                for rule, o in self.by_rule.items()
            },
            "differences": [
                {
                    "hold_id": d.hold_id,
                    "item_id": d.item_id,
                    "title": d.title,
                    "person": d.person,
                    "would": d.would,
                    "by": d.by,
                    "url": f"/holds/{d.hold_id}",
                }
                for d in self.differences
            ],
        }


def _rows(capability: Capability, since, with_input: bool):
    """(hold id, item id, title, data, data's JSON text, lowest confidence, offers approve, person's
    action, run input, whether rules_shortcut may read it) per item, by services.sql.backtest_rows's
    one statement."""
    rows = gateway.fetch(sql.backtest_rows(with_input), [capability.pk, since, MAX_ITEMS])
    loads = json.loads  # as HoldItem.data and the run's input are read (ExactJSONField, JSONField)
    lowest_of: dict[str, float | None] = {}  # confidence objects repeat ({"amount": 0.93}): each read once
    for hold_id, item_id, title, raw, confidence, offers, action, run_raw in rows:
        try:
            lowest = lowest_of[confidence]
        except KeyError:
            lowest = lowest_confidence(loads(confidence))
            if lowest is not None:
                lowest = float(lowest)  # a double in CEL, whether the agent sent 1 or 1.0
            if len(lowest_of) < 10_000:
                lowest_of[confidence] = lowest
        run = loads(run_raw) if run_raw is not None else None
        sure = shortcut_may_read(raw) and shortcut_may_read(run_raw)
        yield hold_id, item_id, title, loads(raw), raw, lowest, offers, action, run, sure


def _by_cel(expressions, combined, item_id, title, data, data_text, lowest, run_input, capability, flags):
    """rules.first_true on one item's variables: what every item went through before the shortcut."""
    context = item_context(
        item_id=item_id,
        title=title,
        data=data,
        data_text=data_text,
        confidence=None,
        lowest=lowest,
        run_input=run_input,
        capability=capability,
        flags=flags,
    )
    return first_true(expressions, combined, activation(context))


def backtest(
    capability: Capability, *, rules: list[Rule] = (), grant_when: str | None = None, plain: bool = False
) -> Backtest:
    """Replays `rules` (first match wins, as at the ask) or one grant's `grant_when` (approve; a text
    that compiles, as rules.compile_when checked)."""
    now = timezone.now()
    result = Backtest(since=now - timedelta(days=DAYS))
    sources = [r.when for r in rules]
    candidates = [(r.id, r.expression, r.then, r.comment) for r in rules]
    if grant_when is not None:
        candidates, sources = [("grant", compile_when(grant_when), Action.APPROVE.value, None)], [grant_when]
    with_input = any(_NAMES_RUN.search(s) for s in sources)
    for rule_id, *_ in candidates:
        result.by_rule[rule_id] = RuleOutcome()
    expressions = [expression for _, expression, _, _ in candidates]
    combined = compile_list(tuple(sources)) if rules else None
    flags = uses_flags(sources)
    # The rules as one Python function when each is within the part of CEL it models (rules_shortcut):
    # an item it is sure of skips CEL; one it is not sure of goes through CEL as before.
    fast = None if plain else shortcut(tuple(sources))
    name = capability.name
    for hold_id, item_id, title, data, data_text, lowest, offers_approve, person, run_input, sure in _rows(
        capability, result.since, with_input
    ):
        result.items += 1
        found = None
        if fast is not None and sure:
            found = fast(
                item_id,
                title,
                data,
                lowest,
                item_flags(item_id, title, data, data_text) if flags else [],
                run_input if run_input is not None else {},
                name,
            )
        if found is None:  # CEL: no shortcut, or one not sure of this item
            index, errors = _by_cel(
                expressions, combined, item_id, title, data, data_text, lowest, run_input, name, flags
            )
        else:
            index, errors = (found if found >= 0 else None), {}
        for n, error in errors.items():
            outcome = result.by_rule[candidates[n][0]]
            outcome.errors += 1
            outcome.first_error = outcome.first_error or error
        if index is None:
            continue
        rule_id, _, then, _ = candidates[index]
        would = then if then in (Action.APPROVE, Action.REJECT) else ""
        if would == Action.APPROVE and not offers_approve:
            would = ""  # never approves an item that does not offer approve: it would ask
        if not would:
            continue
        outcome = result.by_rule[rule_id]
        outcome.decided += 1
        result.decided += 1
        if person != would:
            outcome.differ += 1
            result.differ += 1
            if len(result.differences) < MAX_LISTED:
                result.differences.append(Difference(public_id(HOLD, hold_id), item_id, title, person, would, rule_id))
    result.capped = result.items >= MAX_ITEMS
    return result
