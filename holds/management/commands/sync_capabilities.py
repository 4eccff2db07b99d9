from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from holds import services
from holds.auth import SYSTEM
from holds.config import ConfigError, load_capabilities
from holds.errors import Invalid


class Command(BaseCommand):
    help = "Create or update capabilities from an agentos.yaml file (all or nothing)."

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)

    def handle(self, *args, file: Path, **options):
        try:
            specs = load_capabilities(file)
        except ConfigError as exc:
            raise CommandError("nothing was changed:\n  " + "\n  ".join(exc.problems)) from None
        try:
            results = services.capabilities_sync(specs=specs, actor=SYSTEM)
        except Invalid as exc:  # a quorum (the capability's or a rule's) that who may decide cannot meet
            lines = [f"{e['field']}: {e['message']}" if e.get("field") else e["message"] for e in exc.errors]
            raise CommandError("nothing was changed:\n  " + "\n  ".join(lines)) from None
        for name, created, secret in results:
            self.stdout.write(f"{'created' if created else 'updated'} {name}")
            if secret:
                self.stdout.write(f"  generated secret for {name} (shown once; give it to the agent): {secret}")
