"""CSV cells that a spreadsheet shows as text, whatever separator it splits on (issue 30.10).

A spreadsheet runs a cell that starts with `=`, `+`, `-`, `@` (or a tab or carriage return) as a
formula. A CSV field is one cell only for a reader that splits on our comma: one that splits on `;`,
a tab or `|` makes `x;=1+1;` three cells, the second a formula. So every field is written in double
quotes (csv.QUOTE_ALL: no separator inside it splits it for a reader that honours quotes), and every
piece of agent text that would start a cell after any separator is led by a quote mark (for one that
does not).
"""

import csv
import re

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# A separator a spreadsheet may split on, then a formula's first character (spaces may come between).
_PIECE = re.compile(r"([,;|\t\r\n]\s*)([=+\-@])")


def safe_cell(value) -> str:
    text = "" if value is None else str(value)
    text = _PIECE.sub(r"\1'\2", text)
    return "'" + text if text.lstrip(" ").startswith(FORMULA_START) else text


def writer(out):
    return csv.writer(out, quoting=csv.QUOTE_ALL)
