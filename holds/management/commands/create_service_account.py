from django.core.management.base import BaseCommand

from holds import services
from holds.auth import SYSTEM
from holds.models import Role


class Command(BaseCommand):
    help = "Create a service account. Its key is printed once, alone on the last line."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--role", choices=Role.values, required=True)

    def handle(self, *args, name, role, **options):
        account, key = services.service_account_create(name=name, role=role, actor=SYSTEM)
        self.stdout.write(f"service account {account.name} ({role}); only the key's hash is stored")
        self.stdout.write(key)
