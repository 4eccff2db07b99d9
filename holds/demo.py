"""The demo that `make run` loads (`manage.py seed_holds --demo`, then `--demo-runs`): two people, the
`pay_invoices` capability from agentos.yaml, three runs that the demo agent turns into holds through
the real API, and a dataset recorded from two extra runs that the seeder decides itself. Everything
goes through services; each step is safe to run again."""

import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command

from . import services
from .auth import SYSTEM, actor_for_user
from .models import Capability, Dataset, Hold, Run
from .words import Action

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


DEMO_DATASET = "Demo: decided invoices"
# Two extra runs, decided by the seeder (an edit, and an approve with a reject), then recorded.
DATASET_INPUTS = (
    {"invoices": [{"id": "INV-21", "payee": "Hooli", "amount": "410.00", "confidence": 0.55}]},
    {
        "invoices": [
            {"id": "INV-22", "payee": "Wayne Enterprises", "amount": "88.00"},
            {"id": "INV-23", "payee": "Cyberdyne", "amount": "19999.99"},
        ]
    },
)
DATASET_DECISIONS = (
    {"items": [{"id": "INV-21", "action": Action.EDIT, "data": {"payee": "Hooli XYZ", "amount": "410.00"}}]},
    {
        "items": [{"id": "INV-22", "action": Action.APPROVE}, {"id": "INV-23", "action": Action.REJECT}],
        "comment": "INV-23 is a duplicate",
    },
)


def wait_for(check: Callable[[], bool], seconds: float = 60.0) -> bool:
    """Polls until `check()` holds (the worker and the demo agent do the work meanwhile)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.5)
    return check()


def dataset(*, stdout, wait: float = 60.0, settle: Callable | None = None) -> Dataset | None:
    """The demo dataset, once: two extra runs of the demo agent, decided here as the demo admin, recorded
    when they complete. Needs the worker and the agent running (`make run` starts them first)."""
    settle = settle or (lambda check: wait_for(check, wait))
    existing = Dataset.objects.filter(name=DEMO_DATASET).first()
    if existing is not None:
        stdout.write(f"demo dataset {existing.public_id} exists already")
        return existing
    admin = actor_for_user(get_user_model().objects.get(username="admin"))
    # The extra runs of an earlier attempt (whose agent was slow) are taken up again, not started twice.
    runs = [
        Run.objects.filter(input=data, parent=None).order_by("pk").first()
        or services.run_start(capability_name="pay_invoices", input=data, actor=SYSTEM)[0]
        for data in DATASET_INPUTS
    ]
    pks = [run.pk for run in runs]

    def asked() -> bool:
        return Hold.objects.filter(run_id__in=pks).values("run_id").distinct().count() == len(pks)

    if not settle(asked):
        stdout.write("the demo agent did not ask in time; no demo dataset yet (`seed_holds --demo-runs` again)")
        return None
    for run, decision in zip(runs, DATASET_DECISIONS, strict=True):
        hold = Hold.objects.filter(run=run, status=Hold.Status.PENDING).first()
        if hold is not None:
            services.hold_decide(hold_id=hold.pk, actor=admin, body=decision)

    def completed() -> bool:
        return Run.objects.filter(pk__in=pks, status=Run.Status.COMPLETED).count() == len(pks)

    if not settle(completed):
        stdout.write("the demo runs did not complete in time; no demo dataset")
        return None
    recorded = services.dataset_create(name=DEMO_DATASET, capability_name="pay_invoices", actor=admin)
    for run in runs:
        services.dataset_item_from_run(dataset=recorded, run_pk=run.pk, actor=admin)
    stdout.write(f"recorded {len(runs)} decided runs into dataset {recorded.public_id} ({DEMO_DATASET})")
    return recorded
