from django.core.management.base import BaseCommand

from holds import services
from holds.auth import SYSTEM
from holds.models import Role


class Command(BaseCommand):
    help = "Add a person (or change their role and password)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", choices=Role.values, required=True)
        parser.add_argument("--password", required=True)
        parser.add_argument("--email", default="")

    def handle(self, *args, username, role, password, email, **options):
        services.person_add(username=username, role=role, password=password, email=email, actor=SYSTEM)
        self.stdout.write(f"{username} is {role}")
