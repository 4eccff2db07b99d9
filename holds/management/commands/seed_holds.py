"""The one seeding command.

manage.py seed_holds --demo        people, the demo capability, the agent's secret (once)
manage.py seed_holds --demo-runs   start the demo runs (once), through the real agent, and record the
                                   demo dataset from two extra runs it decides (once)

A month of history for benchmarks is a bench command: python -m bench.seed --holds N.
"""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from holds import demo


class Command(BaseCommand):
    help = "Seed the demo: people, capability and agent secret (--demo), its runs and dataset (--demo-runs)."

    def add_arguments(self, parser):
        parser.add_argument("--demo", action="store_true", help="demo people, capability and agent secret")
        parser.add_argument("--demo-runs", action="store_true", help="start the demo runs if none exist")
        parser.add_argument(
            "--demo-wait", type=float, default=60.0, help="seconds to wait for the demo agent (the demo dataset)"
        )
        parser.add_argument("--config", default=str(settings.BASE_DIR / "agentos.yaml"))

    def handle(self, *args, **options):
        if options["demo"]:
            demo.people_and_capability(Path(options["config"]), stdout=self.stdout)
        elif options["demo_runs"]:
            demo.runs(stdout=self.stdout)
            demo.dataset(stdout=self.stdout, wait=options["demo_wait"])
        else:
            raise CommandError("say what to seed: --demo or --demo-runs (a benchmark history: python -m bench.seed)")
