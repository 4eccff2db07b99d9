"""The one seeding command.

manage.py seed_holds --demo        people, the demo capability, the agent's secret (once)
manage.py seed_holds --demo-runs   start the demo runs (once), through the real agent
"""

import json
import secrets
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from holds import seeding, services
from holds.auth import SYSTEM
from holds.models import Capability, Run

DEMO_PEOPLE = (("admin", "admin"), ("member", "member"))
DEMO_INPUTS = (
    {},
    {
        "invoices": [
            {"id": "INV-7", "payee": "Initech", "amount": "930.00"},
            {"id": "INV-8", "payee": "Umbrella Corp", "amount": "12000.00", "confidence": 0.42},
        ]
    },
    {"invoices": [{"id": "INV-9", "payee": "Stark Industries", "amount": "77.10", "confidence": 0.91}]},
)


class Command(BaseCommand):
    help = "Seed data: the demo (--demo, --demo-runs)."

    def add_arguments(self, parser):
        parser.add_argument("--demo", action="store_true", help="demo people, capability and agent secret")
        parser.add_argument("--demo-runs", action="store_true", help="start the demo runs if none exist")
        parser.add_argument("--config", default=str(settings.BASE_DIR / "agentos.yaml"))
        parser.add_argument("--holds", type=int, help="bulk: how many holds")
        parser.add_argument("--capabilities", type=int, default=5)
        parser.add_argument("--items", type=int, default=2)
        parser.add_argument("--due", action="store_true", help="bulk: every pending hold is past its expiry")

    def handle(self, *args, **options):
        if options["demo"]:
            self.demo(Path(options["config"]))
        elif options["demo_runs"]:
            self.demo_runs()
        elif options["holds"]:
            self.bulk(options["holds"], options["capabilities"], options["items"], options["due"])
        else:
            raise CommandError("say what to seed: --demo, --demo-runs or --holds N")

    def bulk(self, holds: int, capability_count: int, items: int, due: bool) -> None:
        if not 1 <= items <= 100 or holds < 1 or capability_count < 1:
            raise CommandError("--holds and --capabilities at least 1, --items from 1 to 100")
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

    def demo(self, config: Path) -> None:
        credentials_file = settings.RQ_VAR_DIR / "demo-credentials.json"
        credentials = json.loads(credentials_file.read_text()) if credentials_file.exists() else {}
        user_model = get_user_model()
        for username, role in DEMO_PEOPLE:
            if username not in credentials or not user_model.objects.filter(username=username).exists():
                credentials[username] = secrets.token_urlsafe(9)
                services.person_add(username=username, role=role, password=credentials[username], actor=SYSTEM)
        credentials_file.write_text(json.dumps(credentials))
        credentials_file.chmod(0o600)
        call_command("sync_capabilities", str(config), stdout=self.stdout)
        secret_file = settings.RQ_VAR_DIR / "demo-agent.secret"
        secret_file.write_text(Capability.objects.get(name="pay_invoices").secret)
        secret_file.chmod(0o600)
        for username, role in DEMO_PEOPLE:
            self.stdout.write(f"demo {role}: username {username}  password {credentials[username]}")

    def demo_runs(self) -> None:
        if Run.objects.exists():
            self.stdout.write("demo runs exist already")
            return
        for data in DEMO_INPUTS:
            run, _ = services.run_start(capability_name="pay_invoices", input=data, actor=SYSTEM)
            self.stdout.write(f"started {run.public_id}; the demo agent will ask for a decision")
