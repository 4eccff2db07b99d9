"""The demo that `make run` loads (`manage.py seed_holds --demo`, then `--demo-runs`): two people, the
`pay_invoices` capability from agentos.yaml, and three runs that the demo agent turns into holds
through the real API. Everything goes through services; each step is safe to run again."""

import json
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command

from . import services
from .auth import SYSTEM
from .models import Capability, Run

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


def people_and_capability(config: Path, *, stdout) -> None:
    """The demo people (passwords kept in var/ and printed), the capabilities of `config`, and the
    demo agent's secret in var/. A person is made again only when missing."""
    credentials_file = settings.RQ_VAR_DIR / "demo-credentials.json"
    credentials = json.loads(credentials_file.read_text()) if credentials_file.exists() else {}
    user_model = get_user_model()
    for username, role in DEMO_PEOPLE:
        if username not in credentials or not user_model.objects.filter(username=username).exists():
            credentials[username] = secrets.token_urlsafe(9)
            services.person_add(username=username, role=role, password=credentials[username], actor=SYSTEM)
    credentials_file.write_text(json.dumps(credentials))
    credentials_file.chmod(0o600)
    call_command("sync_capabilities", str(config), stdout=stdout)
    secret_file = settings.RQ_VAR_DIR / "demo-agent.secret"
    secret_file.write_text(Capability.objects.get(name="pay_invoices").secret)
    secret_file.chmod(0o600)
    for username, role in DEMO_PEOPLE:
        stdout.write(f"demo {role}: username {username}  password {credentials[username]}")


def runs(*, stdout) -> None:
    """Starts the demo runs, once: the demo agent asks a hold in each."""
    if Run.objects.exists():
        stdout.write("demo runs exist already")
        return
    for data in DEMO_INPUTS:
        run, _ = services.run_start(capability_name="pay_invoices", input=data, actor=SYSTEM)
        stdout.write(f"started {run.public_id}; the demo agent will ask for a decision")
