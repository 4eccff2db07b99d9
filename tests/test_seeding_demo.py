"""`seed_holds --demo` and `--demo-runs` (holds/demo.py), what `make run` loads: two people, the
capability of agentos.yaml, the demo agent's secret, and three runs, each only once."""

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from holds.models import Capability, Run

pytestmark = pytest.mark.django_db


def seed(*args) -> str:
    out = io.StringIO()
    call_command("seed_holds", *args, stdout=out)
    return out.getvalue()


def test_the_demo_makes_its_people_capability_and_runs_once(settings, tmp_path):
    settings.RQ_VAR_DIR = tmp_path
    first = seed("--demo")
    credentials = json.loads((tmp_path / "demo-credentials.json").read_text())
    assert f"username admin  password {credentials['admin']}" in first
    users = get_user_model().objects
    assert users.get(username="admin").check_password(credentials["admin"])
    assert users.get(username="member").membership.role == "member"
    assert (tmp_path / "demo-agent.secret").read_text() == Capability.objects.get(name="pay_invoices").secret
    # Again: the same people and passwords, nobody new.
    assert f"password {credentials['member']}" in seed("--demo") and users.count() == 2
    # No agent answers here: the demo dataset's two extra runs start once, and wait for another try.
    assert "started r_" in seed("--demo-runs", "--demo-wait", "0") and Run.objects.count() == 5
    again = seed("--demo-runs", "--demo-wait", "0")
    assert again.startswith("demo runs exist already") and Run.objects.count() == 5
