"""Sets or clears a person's out-of-office window and delegate: the same service (services.person_set_away)
and checks as the out-of-office page and PUT /v0/me/away."""

from datetime import datetime

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from holds import services
from holds.auth import SYSTEM
from holds.errors import Forbidden, Invalid


def _when(text: str | None) -> datetime | None:
    if text is None:
        return None
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
        person = get_user_model().objects.filter(username=username).first()
        if person is None:
            raise CommandError(f"no person {username!r}")
        if clear:
            services.person_set_away(actor=SYSTEM, person=person, clear=True)
            self.stdout.write(f"{username} is no longer away")
            return
        if not (away_from and away_until and delegate):
            raise CommandError("--from, --until and --delegate are required (or --clear)")
        try:
            services.person_set_away(
                actor=SYSTEM, person=person, away_from=_when(away_from), away_until=_when(away_until), delegate=delegate
            )
        except Invalid as exc:
            raise CommandError("nothing was changed: " + "; ".join(e["message"] for e in exc.errors)) from None
        except Forbidden as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{username} is away from {away_from} until {away_until}; {delegate} acts for them")
