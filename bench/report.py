"""Writes docs/benchmarks.md from the figures the benchmarks saved in var/bench/."""

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import RESULTS, ROOT  # noqa: E402

ORDER = ["ask", "resume", "pages", "rules", "quorum", "sweep"]
NOTES = ROOT / "docs" / "benchmarks-notes.md"


def main():
    runs = [json.loads((RESULTS / f"{name}.json").read_text()) for name in ORDER if (RESULTS / f"{name}.json").exists()]
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (scripts/bench → bench/*.py → bench/report.py). Every figure is a ratio or",
        "a rate measured against a baseline in the same run, because this machine is shared and absolute",
        "times move by half from run to run.",
        "",
        "| figure | goal | measured | met | date | machine |",
        "|---|---|---|---|---|---|",
    ]
    if started := os.environ.get("RQ_BENCH_STARTED"):
        minutes, seconds = divmod(round(time.time() - int(started)), 60)
        runs.append(
            {
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "machine": runs[-1]["machine"] if runs else "",
                "rows": [
                    {
                        "figure": "make bench: every benchmark above, its seeding and set-up included",
                        "goal": "<= 15 min",
                        "measured": f"{minutes} min {seconds} s",
                        "ok": minutes * 60 + seconds <= 15 * 60,
                    }
                ],
            }
        )
    for run in runs:
        for row in run["rows"]:
            met = {True: "yes", False: "**no**", None: "—"}[row["ok"]]
            lines.append(
                f"| {row['figure']} | {row['goal']} | {row['measured']} | {met} | {run['date']} | {run['machine']} |"
            )
    if NOTES.exists():
        lines += ["", NOTES.read_text().strip()]
    out = ROOT / "docs" / "benchmarks.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
