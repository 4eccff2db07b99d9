"""Approve by confidence, scored on the server: which items a threshold approves and why.

The page's preview (confidence_views) and the decision that records which approvals the shortcut
set (hold.hold_decision, for calibration) both score here, so a crafted form field can name no
item that the threshold did not set. An item whose title, id, data or details the page flags
(hidden characters, mixed scripts) always stays undecided.
"""

from dataclasses import dataclass

from ..words import Action

THRESHOLDS = ("0.5", "0.7", "0.8", "0.9", "0.95", "1.0")
DEFAULT_THRESHOLD = "0.9"


@dataclass
class Scored:
    view: object  # hold.ItemView
    confidence: float | None
    approve: bool
    why: str


def offers_approve(item, hold) -> bool:
    """The item's effective actions: its own when it has them, else the hold's."""
    actions = getattr(item, "actions", None) or hold.actions
    return Action.APPROVE in actions


def score(hold, views: list, threshold: float) -> list[Scored]:
    default = hold.capability.confidence_default
    scored = []
    for view in views:
        values = [v for v in (view.item.confidence or {}).values() if isinstance(v, (int, float))]
        confidence = min(values) if values else default
        if not offers_approve(view.item, hold):
            scored.append(Scored(view, confidence, False, "does not offer approve"))
        elif view.flags or view.details_flags:
            flags = list(dict.fromkeys(view.flags + view.details_flags))
            scored.append(Scored(view, confidence, False, "flagged: " + ", ".join(flags) + "; always stays"))
        elif confidence is None:
            scored.append(Scored(view, None, False, "no confidence stated, and no confidence_default"))
        elif confidence < threshold:
            scored.append(Scored(view, confidence, False, f"lowest confidence {confidence:g} is below {threshold:g}"))
        else:
            source = "" if values else " (the capability's default)"
            scored.append(Scored(view, confidence, True, f"lowest confidence {confidence:g}{source}"))
    return scored


def threshold_of(text: str) -> float | None:
    return float(text) if text in THRESHOLDS else None


def set_by_threshold(hold, views: list, text: str) -> set[str]:
    """Ids of the items that approve-by-confidence at threshold `text` approves (none for another text)."""
    threshold = threshold_of(text)
    if threshold is None:
        return set()
    return {s.view.item.item_id for s in score(hold, views, threshold) if s.approve}
