"""How agent-written text reaches a reviewer's eyes: safely, and exactly as it will run.

Everything here treats its input as hostile (a prompt-injected agent may have written it):
- `render_markdown` is the ONE place where agent text becomes HTML that templates mark safe;
- `visible` escapes text and turns invisible or bidirectional characters into `⟦U+202E⟧` marks,
  so what a person reads is what the agent will receive;
- `show_value` describes a JSON value with its type, flags and confidence for the item tables.
"""

import json
import math
import unicodedata
from dataclasses import dataclass, field

from django.conf import settings
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from .markup import ALWAYS_HIDDEN, LAYOUT, is_hidden, mark_of, mixed_scripts, reveal  # noqa: F401 (used by templates and tests)

# --- hidden characters and look-alikes ---------------------------------------------------------


def has_hidden(text: str) -> bool:
    return any(is_hidden(ch) for ch in text)


def visible(text) -> SafeString:
    """Escaped HTML of `text` in which each hidden character is a highlighted ⟦U+XXXX⟧ mark."""
    text = "" if text is None else str(text)
    if not has_hidden(text):
        return escape(text)
    out = []
    run = []
    for ch in text:
        if is_hidden(ch):
            if run:
                out.append(escape("".join(run)))
                run = []
            name = unicodedata.name(ch, "unnamed character").lower()
            out.append(f'<mark class="hidden-char" title="hidden character: {escape(name)}">{mark_of(ch)}</mark>')
        else:
            run.append(ch)
    if run:
        out.append(escape("".join(run)))
    # Every agent-written piece above went through escape(); the marks are ours.
    return mark_safe("".join(out))  # noqa: S308


def text_flags(text: str) -> list[str]:
    """Warnings for a piece of agent text shown outside the item tables (intent, titles, ids)."""
    flags = []
    if has_hidden(text):
        flags.append("hidden characters")
    mixed = mixed_scripts(text)
    if mixed:
        flags.append("mixed scripts: Latin with " + " and ".join(mixed))
    return flags


# --- values "exactly as sent" -----------------------------------------------------------------


def json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _strings_in(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from _strings_in(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings_in(v)


def json_text(value) -> str:
    """The value as it goes on the wire (numbers in their shortest form, nesting indented)."""
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, indent=2, allow_nan=False)
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def confidence_level(confidence) -> str:
    """'red' below the red threshold, 'amber' below the amber one, else ''."""
    if not isinstance(confidence, int | float) or isinstance(confidence, bool) or math.isnan(confidence):
        return ""
    if confidence < settings.RQ_CONFIDENCE_RED:
        return "red"
    if confidence < settings.RQ_CONFIDENCE_AMBER:
        return "amber"
    return ""


@dataclass
class Shown:
    """One value as the item table shows it."""

    type: str
    html: SafeString  # escaped; hidden characters marked
    flags: list[str] = field(default_factory=list)
    edge_spaces: str = ""  # "leading", "trailing", "leading and trailing"
    multiline: bool = False


def show_value(value) -> Shown:
    kind = json_type(value)
    if kind == "string":
        # The string itself, not its JSON escape: newlines read as newlines; quotes in the page mark its ends.
        html = visible(value)
        edges = [name for name, hit in (("leading", value[:1].isspace()), ("trailing", value[-1:].isspace())) if hit]
        shown = Shown(kind, html, edge_spaces=" and ".join(edges), multiline="\n" in value)
    else:
        text = json_text(value)
        shown = Shown(kind, visible(text), multiline="\n" in text)
    strings = list(_strings_in(value))
    if any(has_hidden(s) for s in strings):
        shown.flags.append("hidden characters")
    mixed = sorted({m for s in strings for m in mixed_scripts(s)})
    if mixed:
        shown.flags.append("mixed scripts: Latin with " + " and ".join(mixed))
    return shown


@dataclass
class FieldRow:
    key: str
    key_html: SafeString
    key_flags: list[str]
    shown: Shown
    confidence: float | None
    level: str  # "", "amber", "red"

    @property
    def flagged(self) -> bool:
        return bool(self.key_flags or self.shown.flags)


def field_rows(data: dict, confidence: dict | None) -> list[FieldRow]:
    confidence = confidence or {}
    rows = []
    for key, value in data.items():
        conf = confidence.get(key)
        rows.append(
            FieldRow(
                key=key,
                key_html=visible(key),
                key_flags=text_flags(key),
                shown=show_value(value),
                confidence=conf,
                level=confidence_level(conf),
            )
        )
    return rows


def item_rank(rows: list[FieldRow], title_flags: list[str], id_flags: list[str]) -> int:
    """Sort key: flagged or red items first, then amber, then the rest (asked order within)."""
    if title_flags or id_flags or any(r.flagged for r in rows) or any(r.level == "red" for r in rows):
        return 0
    if any(r.level == "amber" for r in rows):
        return 1
    return 2


# --- markdown ------------------------------------------------------------------------------------


def markdown_html(html: str | None) -> SafeString | None:
    """The sanitised HTML that markup.render stored at the ask, as safe markup (None: over budget)."""
    return None if html is None else mark_safe(html)  # noqa: S308 (markup.render's allowlist output)


def span(seconds: float | None) -> str:
    """A short duration for people: 45s, 12m, 3h 05m, 2d 4h ("—" when unknown)."""
    if seconds is None:
        return "—"
    seconds = int(round(abs(seconds)))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m"
    return f"{secs}s"
