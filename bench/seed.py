"""python -m bench.seed --holds N: a month of history for benchmarks and load tests (bench/seeding.py).

A bench command, not a manage.py one: the product never imports bench/ (a deployment may leave it
out). Uses the database of DATABASE_URL, as manage.py does.
"""

import argparse
import os
import sys
import time


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench.seed", description=__doc__.splitlines()[0])
    parser.add_argument("--holds", type=int, required=True, help="how many holds")
    parser.add_argument("--capabilities", type=int, default=5)
    parser.add_argument("--items", type=int, default=2)
    parser.add_argument("--due", action="store_true", help="every pending hold is past its expiry")
    parser.add_argument("--decided", action="store_true", help="every hold decided (the backtest's history)")
    options = parser.parse_args(argv)
    if not 1 <= options.items <= 100 or options.holds < 1 or options.capabilities < 1:
        parser.error("--holds and --capabilities at least 1, --items from 1 to 100")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewqueue.settings")
    import django

    django.setup()
    from bench import seeding

    start = time.monotonic()
    counts = seeding.seed(
        holds=options.holds,
        capability_count=options.capabilities,
        items=options.items,
        due=options.due,
        **({"mix": (0.0, 1.0, 0.0)} if options.decided else {}),
        progress=lambda n: print(f"  {n} holds", file=sys.stderr),
    )
    elapsed = time.monotonic() - start
    print(f"seeded {options.holds} holds in {elapsed:.1f}s ({options.holds / elapsed:.0f}/s): {counts}")
    return counts


if __name__ == "__main__":
    main()
