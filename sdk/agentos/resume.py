"""The decision a resume invocation carries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DecidedItem:
    id: str
    action: str
    data: dict[str, Any]
    comment: str | None = None
    # Which rule ({"type": "rule", "id", "version"}) or standing grant ({"type": "grant", "id"}) decided
    # the item at the ask; None when a person did.
    decided_by: dict[str, Any] | None = None


@dataclass(frozen=True)
class Resume:
    hold_id: str
    resolved_by: str
    decided_items: list[DecidedItem] = field(default_factory=list)
    comment: str | None = None
    # The decision receipt as sent (a compact JWS); `inv.receipt` verifies it.
    receipt: str | None = None

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> Resume:
        items = [
            DecidedItem(
                id=i["id"],
                action=i["action"],
                data=i.get("data") or {},
                comment=i.get("comment") or None,
                decided_by=i.get("decided_by") or None,
            )
            for i in payload.get("items") or []
        ]
        return cls(
            hold_id=payload.get("hold_id", ""),
            resolved_by=payload.get("resolved_by", ""),
            decided_items=items,
            comment=payload.get("comment") or None,
            receipt=payload.get("receipt"),
        )

    @property
    def expired(self) -> bool:
        return self.resolved_by == "expired"

    @property
    def approved(self) -> list[DecidedItem]:
        """Approved or edited items; `data` is as decided, so an edit carries the new values."""
        return [i for i in self.decided_items if i.action in ("approve", "edit")]

    @property
    def edited(self) -> list[DecidedItem]:
        return [i for i in self.decided_items if i.action == "edit"]

    @property
    def rejected(self) -> list[DecidedItem]:
        return [i for i in self.decided_items if i.action == "reject"]

    @property
    def feedback(self) -> list[DecidedItem]:
        return [i for i in self.decided_items if i.action == "feedback"]

    def item(self, item_id: str) -> DecidedItem:
        for i in self.decided_items:
            if i.id == item_id:
                return i
        raise KeyError(item_id)


@dataclass(frozen=True)
class RecordedHold:
    """One hold of the recorded run: the ask as the agent sent it, and the decision it was resumed
    with (a Resume like `inv.resume`; None when no resume was ever sent)."""

    ask: dict[str, Any]
    resume: Resume | None
    hold_id: str | None = None

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> RecordedHold:
        resume = payload.get("resume")
        return cls(
            ask=payload.get("ask") or {},
            resume=Resume.from_json(resume) if resume else None,
            hold_id=payload.get("hold_id"),
        )


@dataclass(frozen=True)
class Eval:
    """`inv.eval` inside an experiment (None outside): which experiment and dataset item this run
    replays, and the recorded holds in asking order. An eval run never reaches a person."""

    experiment_id: str
    dataset_item_id: str | None
    recorded_holds: list[RecordedHold] = field(default_factory=list)

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> Eval:
        return cls(
            experiment_id=payload.get("experiment_id", ""),
            dataset_item_id=payload.get("dataset_item_id"),
            recorded_holds=[RecordedHold.from_json(h) for h in payload.get("recorded_holds") or []],
        )
