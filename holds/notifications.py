"""Telling reviewers about new holds (filled in by the notifications work of issue 7)."""


def hold_asked(hold_id: int) -> None:
    """Called after an ask commits. Must never raise into the ask."""
