"""The management commands the README documents: sync_capabilities, add_person,
create_service_account, sweep_expired (tested in test_task_sweep.py) and seed_holds (its bulk history is
bench.seed, tested in test_seeding.py)."""

import datetime as dt
import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from holds.auth import account_for_key, role_of_user
from holds.models import AuditEvent, Capability, ServiceAccount

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def write(tmp_path, text: str, schemas: dict | None = None):
    for name, schema in (schemas or {}).items():
        (tmp_path / name).write_text(json.dumps(schema))
    path = tmp_path / "agentos.yaml"
    path.write_text(text)
    return path


GOOD = """
capabilities:
  pay_invoices:
    endpoint: http://127.0.0.1:8080
    version: "3"
    input: pay-input.json
    timeout: 45s
    approvers: [admin]
    notify: {email: true, webhook: "https://chat.example/hook"}
  refunds:
    endpoint: https://agents.example/refunds/
    self_approval: false
"""


def test_sync_creates_capabilities_and_prints_a_generated_secret_once(tmp_path):
    path = write(tmp_path, GOOD, {"pay-input.json": {"type": "object"}})
    first = run("sync_capabilities", str(path))
    assert first.count("generated secret") == 2 and "created pay_invoices" in first
    pay = Capability.objects.get(name="pay_invoices")
    assert (pay.version, pay.timeout_seconds, pay.approvers) == ("3", 45.0, ["admin"])
    assert pay.input_schema == {"type": "object"} and pay.secret.startswith("whsec_")
    assert pay.secret in first
    refunds = Capability.objects.get(name="refunds")
    assert refunds.endpoint == "https://agents.example/refunds" and refunds.self_approval is False
    assert refunds.approvers == ["admin", "member"]  # the default
    second = run("sync_capabilities", str(path))
    assert "generated secret" not in second and "updated pay_invoices" in second
    assert Capability.objects.get(name="pay_invoices").secret == pay.secret  # kept, not regenerated
    assert Capability.objects.count() == 2


def test_sync_keeps_a_secret_given_in_the_file(tmp_path):
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    path = write(tmp_path, f"capabilities:\n  a:\n    endpoint: http://x.example\n    secret: {secret}\n")
    assert "generated secret" not in run("sync_capabilities", str(path))
    assert Capability.objects.get(name="a").secret == secret


@pytest.mark.parametrize(
    "yaml_text, expected",
    [
        ("capabilities:\n  pay:\n    endpoint: http://x.example\n    colour: red\n", "capability 'pay': key 'colour'"),
        (
            "capabilities:\n  pay:\n    endpoint: http://x.example\n    timeout: soon\n",
            "capability 'pay': key 'timeout'",
        ),
        (
            "capabilities:\n  pay:\n    endpoint: http://x.example\n    input: missing.json\n",
            "capability 'pay': key 'input': cannot read missing.json",
        ),
        ("capabilities:\n  pay:\n    endpoint: ftp://x.example\n", "capability 'pay': key 'endpoint'"),
        (
            "capabilities:\n  pay:\n    endpoint: http://x.example\n    approvers: [viewer]\n",
            "capability 'pay': key 'approvers'",
        ),
        ("capabilities:\n  pay:\n    endpoint: http://x.example\n    secret: nope\n", "capability 'pay': key 'secret'"),
        ("nothing: here\n", "the top-level key 'capabilities'"),
        ("capabilities: [\n", "not valid YAML"),
    ],
)
def test_bad_configuration_stops_the_sync_naming_capability_and_key(tmp_path, yaml_text, expected):
    good = "  fine:\n    endpoint: http://ok.example\n"
    text = yaml_text.replace("capabilities:\n", "capabilities:\n" + good, 1) if "  pay:" in yaml_text else yaml_text
    path = write(tmp_path, text)
    with pytest.raises(CommandError) as refused:
        run("sync_capabilities", str(path))
    assert expected in str(refused.value) and "nothing was changed" in str(refused.value)
    assert not Capability.objects.exists()  # the good capability beside it was not applied either


def test_a_bad_schema_file_is_named(tmp_path):
    path = write(
        tmp_path,
        "capabilities:\n  pay:\n    endpoint: http://x.example\n    output: out.json\n",
        {"out.json": {"type": "nonsense"}},
    )
    with pytest.raises(CommandError, match="key 'output': out.json is not a valid JSON Schema"):
        run("sync_capabilities", str(path))


def test_add_person_sets_the_role_and_password_and_is_audited():
    run("add_person", "alice", "--role", "admin", "--password", "correct horse battery")
    user = get_user_model().objects.get(username="alice")
    assert user.check_password("correct horse battery") and role_of_user(user) == "admin"
    run("add_person", "alice", "--role", "viewer", "--password", "another pass 123")
    user.refresh_from_db()
    assert role_of_user(user) == "viewer" and user.check_password("another pass 123")
    assert AuditEvent.objects.filter(kind__in=["person.added", "person.changed"]).count() == 2


def test_create_service_account_prints_the_key_alone_on_the_last_line_and_stores_its_hash():
    out = run("create_service_account", "ci-bot", "--role", "member")
    key = out.strip().splitlines()[-1]
    assert key.startswith("rqk_") and " " not in key
    account = ServiceAccount.objects.get(name="ci-bot")
    assert account.key_hash != key and key not in account.key_hash and account.role == "member"
    assert account_for_key(key) == account


def test_seed_holds_says_what_it_seeds():
    with pytest.raises(CommandError):
        call_command("seed_holds")


def test_sync_reads_remind_before_as_a_duration_and_its_absence_as_none(tmp_path):
    text = "capabilities:\n  pay:\n    endpoint: http://x.example\n    remind_before: 4h\n  refunds:\n    endpoint: http://y.example\n"
    run("sync_capabilities", str(write(tmp_path, text)))
    assert Capability.objects.get(name="pay").remind_before == dt.timedelta(hours=4)
    assert Capability.objects.get(name="refunds").remind_before is None
    run("sync_capabilities", str(write(tmp_path, text.replace("    remind_before: 4h\n", ""))))
    assert Capability.objects.get(name="pay").remind_before is None  # left out: the default rule again


@pytest.mark.parametrize("value", ["soon", "0s", "31d", "true"])
def test_a_bad_remind_before_stops_the_sync(tmp_path, value):
    path = write(tmp_path, f"capabilities:\n  pay:\n    endpoint: http://x.example\n    remind_before: {value}\n")
    with pytest.raises(CommandError) as refused:
        run("sync_capabilities", str(path))
    assert "capability 'pay': key 'remind_before'" in str(refused.value)


def test_sync_reads_confidence_default_from_0_to_1(tmp_path):
    text = "capabilities:\n  pay:\n    endpoint: http://x.example\n    confidence_default: 1\n"
    run("sync_capabilities", str(write(tmp_path, text)))
    assert Capability.objects.get(name="pay").confidence_default == 1.0
    for bad in ("1.5", "-0.1", "true", "high"):
        path = write(tmp_path, text.replace("confidence_default: 1", f"confidence_default: {bad}"))
        with pytest.raises(CommandError) as refused:
            run("sync_capabilities", str(path))
        assert "capability 'pay': key 'confidence_default'" in str(refused.value)


def test_sync_reads_the_protocol_and_its_absence_as_agentos(tmp_path):
    text = "capabilities:\n  pay:\n    endpoint: http://x.example/agent\n    protocol: ag-ui\n"
    text += "  refunds:\n    endpoint: http://y.example\n    protocol: a2a\n  plain:\n    endpoint: http://z.example\n"
    run("sync_capabilities", str(write(tmp_path, text)))
    protocols = dict(Capability.objects.values_list("name", "protocol"))
    assert protocols == {"pay": "ag-ui", "refunds": "a2a", "plain": "agentos"}
    run("sync_capabilities", str(write(tmp_path, text.replace("    protocol: ag-ui\n", ""))))
    assert Capability.objects.get(name="pay").protocol == "agentos"  # left out: the default again
    for bad in ("agui", "mcp", "true"):
        path = write(tmp_path, text.replace("protocol: ag-ui", f"protocol: {bad}"))
        with pytest.raises(CommandError) as refused:
            run("sync_capabilities", str(path))
        assert "capability 'pay': key 'protocol': one of agentos, ag-ui, a2a" in str(refused.value)
