"""The reviewer pages (HTMX), one module per area: queue (queue, history), hold (a hold, its last
look and decision, its files), claims, extend and confidence (the hold's controls), evals, calibration,
ops, team, audit, login; common.py is what they share. Thin: parse -> service -> render."""
