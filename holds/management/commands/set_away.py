"""Sets or clears a person's out-of-office window and delegate (services.person_set_away)."""

from datetime import datetime

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from holds import services
from holds.auth import SYSTEM
from holds.errors import Forbidden, Invalid


def _when(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"{text!r} is not a date and time like 2026-12-24T00:00+00:00") from None
    if value.tzinfo is None:
        raise CommandError(f"{text!r} needs a time zone (+00:00 for UTC)")
    return value


class Command(BaseCommand):
    help = "Out of office: `set_away ann --from … --until … --delegate bob`, or `set_away ann --clear`."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--from", dest="away_from")
        parser.add_argument("--until", dest="away_until")
        parser.add_argument("--delegate")
        parser.add_argument("--clear", action="store_true")

    def handle(self, *args, username, away_from, away_until, delegate, clear, **options):
        people = get_user_model().objects
        person = people.filter(username=username).first()
        if person is None:
            raise CommandError(f"no person {username!r}")
        if clear:
            services.person_set_away(actor=SYSTEM, person=person, away_from=None, away_until=None, delegate=None)
            self.stdout.write(f"{username} is no longer away")
            return
        if not (away_from and away_until and delegate):
            raise CommandError("--from, --until and --delegate are required (or --clear)")
        stand_in = people.filter(username=delegate).first()
        try:
            services.person_set_away(
                actor=SYSTEM, person=person, away_from=_when(away_from), away_until=_when(away_until), delegate=stand_in
            )
        except (Forbidden, Invalid) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{username} is away from {away_from} until {away_until}; {delegate} acts for them")
