"""The one seeding command.

manage.py seed_holds --demo        people, the demo capability, the agent's secret (once)
manage.py seed_holds --demo-runs   start the demo runs (once), through the real agent, and record the
                                   demo dataset from two extra runs it decides (once)
manage.py seed_holds --holds N     a month of history for benchmarks (bench/seeding.py; PostgreSQL)
"""

import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from holds import demo


class Command(BaseCommand):
    help = "Seed data: the demo (--demo, --demo-runs) or a benchmark history (--holds N)."

    def add_arguments(self, parser):
        parser.add_argument("--demo", action="store_true", help="demo people, capability and agent secret")
        parser.add_argument("--demo-runs", action="store_true", help="start the demo runs if none exist")
        parser.add_argument(
            "--demo-wait", type=float, default=60.0, help="seconds to wait for the demo agent (the demo dataset)"
        )
        parser.add_argument("--config", default=str(settings.BASE_DIR / "agentos.yaml"))
        parser.add_argument("--holds", type=int, help="bulk: how many holds")
        parser.add_argument("--capabilities", type=int, default=5)
        parser.add_argument("--items", type=int, default=2)
        parser.add_argument("--due", action="store_true", help="bulk: every pending hold is past its expiry")

    def handle(self, *args, **options):
        if options["demo"]:
            demo.people_and_capability(Path(options["config"]), stdout=self.stdout)
        elif options["demo_runs"]:
            demo.runs(stdout=self.stdout)
            demo.dataset(stdout=self.stdout, wait=options["demo_wait"])
        elif options["holds"]:
            self.bulk(options["holds"], options["capabilities"], options["items"], options["due"])
        else:
            raise CommandError("say what to seed: --demo, --demo-runs or --holds N")

    def bulk(self, holds: int, capability_count: int, items: int, due: bool) -> None:
        if not 1 <= items <= 100 or holds < 1 or capability_count < 1:
            raise CommandError("--holds and --capabilities at least 1, --items from 1 to 100")
        try:
            # The benchmarks' seeder lives with them, outside the app; a deployment may leave it out.
            from bench import seeding
        except ImportError:
            raise CommandError("--holds needs bench/seeding.py, which is not here") from None
        start = time.monotonic()
        counts = seeding.seed(
            holds=holds,
            capability_count=capability_count,
            items=items,
            due=due,
            progress=lambda n: self.stderr.write(f"  {n} holds"),
        )
        elapsed = time.monotonic() - start
        self.stdout.write(f"seeded {holds} holds in {elapsed:.1f}s ({holds / elapsed:.0f}/s): {counts}")
