"""Agent markdown -> sanitised HTML, rendered once when a hold is asked, under a time and size budget.

Python-Markdown takes quadratic time on some inputs (runs of `[`: 12 KB took 21.8 s; 62 items of
`*a` took 5.7-8.4 s) and recurses on deep nesting (about 300 list levels raise RecursionError), so
agent text is never rendered on a page view. At the ask, the whole ask's text renders in the web
process only when it is small in every way that costs (IN_PROCESS_*: about 10 ms of CPU at worst);
anything else renders in a child process (`python -m holds.markup`, at the lowest CPU priority)
that is killed at the time budget. Children are bounded service-wide (on one host) by CHILD_SLOTS
lock files: an ask that finds no free slot within its budget is over it. Past the budget, or over
the size budget, nothing is stored and the page shows the text escaped, as plain text, with a note.
This module imports no Django, so the child starts fast.
"""

import fcntl
import functools
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
import xml.etree.ElementTree as etree
from contextlib import contextmanager
from functools import lru_cache

import bleach
import markdown
from bleach.linkifier import LinkifyFilter
from markdown.treeprocessors import Treeprocessor

# The whole ask's markdown (the hold's details and every item's) is rendered under these budgets.
MAX_BYTES = 256 * 1024
MAX_SECONDS = 2.0
# In process only when the whole ask, as it is rendered (hidden characters spelled out), is within
# all of these. Each bounds one way a text costs more than linear time; within them the worst inputs
# found take about 10 ms of CPU (a test in test_security_costs.py grows hostile texts to these bounds
# and holds each to half of the 40 ms budget).
IN_PROCESS_CHARS = 4096
# Characters that open or close markup, or that the cleaner and linkifier work hardest on (4,096 `&`
# took 25 ms; runs of `(`, below, 197 ms).
IN_PROCESS_MARKUP = 64
IN_PROCESS_LINES = 64  # and so at most 64 texts: each costs a converter and a cleaner run
IN_PROCESS_BRACKETS = 8  # each `[` makes the link parser scan the rest of its text (128: 104 ms)
IN_PROCESS_WORD = 256  # the linkifier backtracks along a run without whitespace (4,096 of `-a`: 66 ms)
# Quote and list markers that open one line: each nests a block that parses the rest of its text
# again (64 of `- ` before 4 KB took 12 ms; 1,000 raised RecursionError).
IN_PROCESS_DEPTH = 16
MARKUP_CHARS = frozenset("*_[]`<>\\!~|()&")
LINE_OPENERS = re.compile(r"^(?:[ \t]*(?:>|(?:[-+*]|\d+\.)(?=[ \t])))+", re.MULTILINE)
OPENER = re.compile(r">|[-+*]|\d+\.")
# The child lowers its CPU priority before it imports anything: the cores go to requests first.
CHILD = [sys.executable, "-c", "import os, runpy; os.nice(19); runpy.run_module('holds.markup', run_name='__main__')"]
# Child processes rendering at once on this host, whatever the number of web processes and threads.
CHILD_SLOTS = int(os.environ.get("RQ_MARKDOWN_CHILDREN", "2"))
SLOT_DIR = os.environ.get("RQ_MARKDOWN_SLOT_DIR") or os.path.join(tempfile.gettempdir(), f"rq-markdown-{os.getuid()}")

# --- hidden characters ----------------------------------------------------------------------------

# Layout characters that a reader expects to see as layout; every other control or format
# character (zero-width, bidi overrides, BOM, soft hyphen, tag characters...) is made visible.
LAYOUT = {"\n", "\t"}
# Named in SECURITY terms by the spec; all of them are Cf anyway, listed so the rule reads plainly.
ALWAYS_HIDDEN = set("\u200b\u200c\u200d\u2060\ufeff\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


@functools.lru_cache(maxsize=4096)
def is_hidden(ch: str) -> bool:
    if ch in LAYOUT:
        return False
    if ch in ALWAYS_HIDDEN:
        return True
    # Cc control, Cf format, Zl/Zp line and paragraph separators, Co private use, Cn unassigned.
    return unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Co", "Cn")


# Both cached per character: unicodedata was most of rules' item.flags over a backtest's 100,000 items.
@functools.lru_cache(maxsize=4096)
def _script(ch: str) -> str | None:
    if not ch.isalpha():
        return None
    if ch.isascii():
        return "LATIN"
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


def mark_of(ch: str) -> str:
    return f"⟦U+{ord(ch):04X}⟧"


def reveal(text: str) -> str:
    """Plain text with every hidden character spelled out (for places that cannot hold markup)."""
    return "".join(mark_of(ch) if is_hidden(ch) else ch for ch in text)


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


_local = threading.local()  # one markdown converter and one cleaner per thread


def _cleaner() -> bleach.Cleaner:
    # One per thread: a Cleaner keeps its parser's state while it cleans, so two threads sharing one
    # raised (IndexError, ValueError) and, worse, returned one text's HTML cut short or mixed.
    if not hasattr(_local, "cleaner"):
        _local.cleaner = _new_cleaner()
    return _local.cleaner


def _new_cleaner() -> bleach.Cleaner:
    return bleach.Cleaner(
        tags=ALLOWED_TAGS,
        attributes=_allow_attribute,
        protocols=ALLOWED_PROTOCOLS,
        strip=False,
        strip_comments=True,
        filters=[lambda source: LinkifyFilter(source, callbacks=[_set_rel], skip_tags={"pre", "code"})],
    )


def _markdown() -> markdown.Markdown:
    # One converter per thread, reset for each text: building one loads every extension again.
    if not hasattr(_local, "md"):
        _local.md = markdown.Markdown(extensions=["fenced_code", "tables", "sane_lists", _DefangExtension()])
    return _local.md.reset()


@lru_cache(maxsize=512)
def to_html(text: str) -> str:
    """Agent markdown -> HTML that is safe to put in a page: the one sanitiser of agent text.

    Markdown runs with raw HTML turned into text, then bleach keeps only an allowlist of tags and
    attributes (no style, no event handlers, no hx-*), links only to http/https/mailto with a
    rel that leaks nothing, and images become their alt text and URL as plain text. Cached: an agent
    asks with the same details text again and again.
    """
    if not text:
        return ""
    return _cleaner().clean(_markdown().convert(reveal(text)))


def in_process(texts: list[str]) -> bool:
    """Whether the whole ask's text is cheap enough to render in the web process."""
    if sum(len(t) for t in texts) > IN_PROCESS_CHARS:  # spelling out hidden characters only adds
        return False
    shown = [reveal(t) for t in texts if t]  # what to_html renders
    if sum(len(t) for t in shown) > IN_PROCESS_CHARS:
        return False
    return (
        sum(1 for t in shown for ch in t if ch in MARKUP_CHARS) <= IN_PROCESS_MARKUP
        and sum(t.count("\n") + 1 for t in shown) <= IN_PROCESS_LINES
        and sum(t.count("[") for t in shown) <= IN_PROCESS_BRACKETS
        and max((len(word) for t in shown for word in t.split()), default=0) <= IN_PROCESS_WORD
        and max((len(OPENER.findall(line)) for t in shown for line in LINE_OPENERS.findall(t)), default=0)
        <= IN_PROCESS_DEPTH
    )


@contextmanager
def child_slot(deadline: float):
    """One of CHILD_SLOTS lock files on this host, held while a child renders; yields False when none
    came free before `deadline` (time.monotonic). The kernel frees a slot if its holder dies."""
    os.makedirs(SLOT_DIR, mode=0o700, exist_ok=True)
    while True:
        for n in range(CHILD_SLOTS):
            fd = os.open(os.path.join(SLOT_DIR, f"slot-{n}"), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield True
            finally:
                os.close(fd)  # closing releases the lock
            return
        if time.monotonic() >= deadline:
            yield False
            return
        time.sleep(0.02)


def render_all(texts: list[str], *, seconds: float = MAX_SECONDS) -> list[str] | None:
    """Each text's sanitised HTML, or None when the texts together are over the size or time budget."""
    if sum(len(t.encode()) for t in texts) > MAX_BYTES:
        return None
    if in_process(texts):
        try:
            return [to_html(t) for t in texts]
        except RecursionError:
            return None
    deadline = time.monotonic() + seconds
    payload = "\0".join(texts).encode()
    with child_slot(deadline) as free:
        if not free:
            return None
        try:
            done = subprocess.run(
                CHILD,
                input=payload,
                capture_output=True,
                timeout=max(deadline - time.monotonic(), 0.01),
                check=True,
            )
        except (subprocess.TimeoutExpired, subprocess.CalledProcessError):
            return None
    return done.stdout.decode().split("\0")


def _main() -> None:
    texts = sys.stdin.buffer.read().decode().split("\0")
    sys.stdout.write("\0".join(to_html(t) for t in texts))


if __name__ == "__main__":
    _main()
