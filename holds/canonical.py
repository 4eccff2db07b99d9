"""Canonical JSON: one text per value (keys sorted, no spaces), for fingerprints, hashes and comparisons."""

import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
