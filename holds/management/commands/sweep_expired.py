from django.core.management.base import BaseCommand

from holds.tasks import sweep_expired


class Command(BaseCommand):
    help = "Run one expiry sweep now and print how many holds it expired."

    def handle(self, *args, **options):
        self.stdout.write(f"expired {sweep_expired()} holds")
