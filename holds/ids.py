"""The public ids: `h_7` (hold), `r_501` (run), `f_12` (file), `ds_1`, `di_1`, `ex_1` (evals) name rows
by primary key; invocation ids are `inv_…` strings of their own (models.new_invocation_id)."""

HOLD, RUN, FILE = "h", "r", "f"
# Evals: datasets, their items, experiments.
DATASET, DATASET_ITEM, EXPERIMENT = "ds", "di", "ex"
# Standing grants.
GRANT = "grt"


def public_id(prefix: str, pk: int) -> str:
    return f"{prefix}_{pk}"


def parse_public_id(text, prefix: str) -> int | None:
    """The primary key that `h_7`-style text names, or None for anything else (no 500s on odd input)."""
    head, _, tail = (text if isinstance(text, str) else "").partition("_")
    if head != prefix or not tail.isdigit() or not tail.isascii() or len(tail) > 18:
        return None
    return int(tail)
