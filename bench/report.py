"""Writes docs/benchmarks.md from the figures the benchmarks saved in var/bench/."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import RESULTS, ROOT  # noqa: E402

ORDER = ["ask", "resume", "pages", "sweep"]
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
