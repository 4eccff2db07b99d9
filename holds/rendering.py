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
import xml.etree.ElementTree as etree
from dataclasses import dataclass, field
from functools import lru_cache

import bleach
import markdown
from bleach.linkifier import LinkifyFilter
from django.conf import settings
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from markdown.treeprocessors import Treeprocessor

# --- hidden characters and look-alikes ---------------------------------------------------------

# Layout characters that a reader expects to see as layout; every other control or format
# character (zero-width, bidi overrides, BOM, soft hyphen, tag characters...) is made visible.
LAYOUT = {"\n", "\t"}
# Named in SECURITY terms by the spec; all of them are Cf anyway, listed so the rule reads plainly.
ALWAYS_HIDDEN = set("\u200b\u200c\u200d\u2060\ufeff\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def is_hidden(ch: str) -> bool:
    if ch in LAYOUT:
        return False
    if ch in ALWAYS_HIDDEN:
        return True
    # Cc control, Cf format, Zl/Zp line and paragraph separators, Co private use, Cn unassigned.
    return unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Co", "Cn")


def mark_of(ch: str) -> str:
    return f"⟦U+{ord(ch):04X}⟧"


def reveal(text: str) -> str:
    """Plain text with every hidden character spelled out (for places that cannot hold markup)."""
    return "".join(mark_of(ch) if is_hidden(ch) else ch for ch in text)


def has_hidden(text: str) -> bool:
    return any(is_hidden(ch) for ch in text)


def _script(ch: str) -> str | None:
    if not ch.isalpha():
        return None
    name = unicodedata.name(ch, "")
    for script in ("LATIN", "CYRILLIC", "GREEK"):
        if name.startswith(script):
            return script
    return None


def mixed_scripts(text: str) -> list[str]:
    """The look-alike scripts mixed with Latin in `text` (empty when it is not mixed)."""
    scripts = {s for s in map(_script, text) if s}
    if "LATIN" not in scripts:
        return []
    return sorted(s.capitalize() for s in scripts - {"LATIN"})


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

ALLOWED_TAGS = {
    "p",
    "br",
    "hr",
    "strong",
    "em",
    "b",
    "i",
    "code",
    "pre",
    "blockquote",
    "ul",
    "ol",
    "li",
    "a",
    "span",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "del",
}
ALLOWED_ATTRIBUTES = {"a": ["href", "title", "rel"], "span": ["class"], "p": ["class"]}
ALLOWED_CLASSES = {"md-heading", "md-image"}
ALLOWED_PROTOCOLS = ["http", "https", "mailto"]
LINK_REL = "noopener noreferrer nofollow"


class _Defang(Treeprocessor):
    """Agent headings do not join the page outline, and no image loads from anywhere."""

    def run(self, root):
        for parent in root.iter():
            for index, child in enumerate(list(parent)):
                if child.tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
                    child.tag = "p"
                    child.attrib.clear()
                    child.set("class", "md-heading")
                elif child.tag == "img":
                    alt, src = child.get("alt", ""), child.get("src", "")
                    span = etree.Element("span")
                    span.set("class", "md-image")
                    span.text = f"[image: {alt}] {src}".strip() if alt else f"[image] {src}".strip()
                    span.tail = child.tail
                    parent.remove(child)
                    parent.insert(index, span)


class _DefangExtension(markdown.Extension):
    def extendMarkdown(self, md):  # noqa: N802 (the library's name)
        # No raw HTML: "<b>" in agent text is text, escaped by the serializer like any other.
        md.preprocessors.deregister("html_block")
        md.inlinePatterns.deregister("html")
        md.treeprocessors.register(_Defang(md), "rq_defang", 0)


def _set_rel(attrs, new=False):
    href_key = (None, "href")
    if href_key not in attrs:
        return attrs
    attrs[(None, "rel")] = LINK_REL
    return attrs


def _allow_attribute(tag: str, name: str, value: str) -> bool:
    if name == "class":
        return value in ALLOWED_CLASSES
    return name in ALLOWED_ATTRIBUTES.get(tag, [])


@lru_cache(maxsize=1)
def _cleaner() -> bleach.Cleaner:
    return bleach.Cleaner(
        tags=ALLOWED_TAGS,
        attributes=_allow_attribute,
        protocols=ALLOWED_PROTOCOLS,
        strip=False,
        strip_comments=True,
        filters=[lambda source: LinkifyFilter(source, callbacks=[_set_rel], skip_tags={"pre", "code"})],
    )


def render_markdown(text: str) -> SafeString:
    """Agent markdown -> HTML that is safe to put in a page. The only `mark_safe` of agent text.

    Markdown runs with raw HTML turned into text, then bleach keeps only an allowlist of tags and
    attributes (no style, no event handlers, no hx-*), links only to http/https/mailto with a
    rel that leaks nothing, and images become their alt text and URL as plain text.
    """
    if not text:
        return mark_safe("")
    html = markdown.markdown(reveal(text), extensions=["fenced_code", "tables", "sane_lists", _DefangExtension()])
    return mark_safe(_cleaner().clean(html))  # noqa: S308 (sanitised by the allowlist above)


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
