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


@dataclass(frozen=True)
class Resume:
    hold_id: str
    resolved_by: str
    decided_items: list[DecidedItem] = field(default_factory=list)
    comment: str | None = None

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> Resume:
        items = [
            DecidedItem(
                id=i["id"],
                action=i["action"],
                data=i.get("data") or {},
                comment=i.get("comment") or None,
            )
            for i in payload.get("items") or []
        ]
        return cls(
            hold_id=payload.get("hold_id", ""),
            resolved_by=payload.get("resolved_by", ""),
            decided_items=items,
            comment=payload.get("comment") or None,
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
