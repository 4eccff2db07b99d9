from django.core.management.base import BaseCommand

from holds.services import receipts


class Command(BaseCommand):
    help = "Add a new current key for decision receipts; older public keys stay at /.well-known/jwks.json."

    def handle(self, *args, **options):
        row = receipts.rotate()
        self.stdout.write(f"receipt key {row.kid} is current; {receipts.key_count()} keys published")
