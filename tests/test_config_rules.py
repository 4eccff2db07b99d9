"""`rules:` in agentos.yaml (issue 33): checked with the rest of the file, saved as a version on sync."""

import io

import pytest
from django.core.management import CommandError, call_command

from holds.models import AuditEvent, Capability, RuleSet
from tests import factories

pytestmark = pytest.mark.django_db

WITH_RULES = """
capabilities:
  pay:
    endpoint: http://127.0.0.1:8080
    rules:
      - id: small
        when: item.data.amount < 100
        then: approve
      - id: huge
        when: item.data.amount > 10000
        then: reject
        comment: too large
"""


def sync(tmp_path, text):
    path = tmp_path / "agentos.yaml"
    path.write_text(text)
    call_command("sync_capabilities", str(path), stdout=io.StringIO())


def test_rules_in_the_file_are_a_version_and_a_second_sync_adds_none(tmp_path):
    sync(tmp_path, WITH_RULES)
    sync(tmp_path, WITH_RULES)
    cap = Capability.objects.get(name="pay")
    assert cap.rules_version == 1
    assert RuleSet.objects.get(capability=cap).rules == [
        {"id": "small", "when": "item.data.amount < 100", "then": "approve"},
        {"id": "huge", "when": "item.data.amount > 10000", "then": "reject", "comment": "too large"},
    ]
    assert AuditEvent.objects.filter(kind="rules.saved").get().actor == "system"
    sync(tmp_path, WITH_RULES.replace("< 100", "< 50"))
    cap.refresh_from_db()
    assert cap.rules_version == 2


def test_a_bad_rule_stops_the_sync_naming_capability_rule_and_position(tmp_path):
    with pytest.raises(CommandError) as refused:
        sync(tmp_path, WITH_RULES.replace("item.data.amount < 100", "item.data.amount <"))
    text = str(refused.value)
    assert "capability 'pay': key 'rules': rule 1: when: Syntax error" in text and "(line 1, column 19)" in text
    assert "nothing was changed" in text
    assert not Capability.objects.exists() and not RuleSet.objects.exists()


def test_a_rule_quorum_more_than_who_may_decide_stops_the_sync(tmp_path):
    factories.person("ann", role="admin")
    factories.person("bob", role="member")
    quorum = WITH_RULES.replace("then: approve", "then: {quorum: 3, from: [admin, member]}")
    with pytest.raises(CommandError) as refused:
        sync(tmp_path, quorum)
    text = str(refused.value)
    assert "nothing was changed" in text
    assert "pay.rules[0].then: rule 1: then: needs 3 approvals but only 2 people or service accounts" in text
    assert not Capability.objects.exists() and not RuleSet.objects.exists()
    factories.person("carol", role="member")
    sync(tmp_path, quorum)
    assert RuleSet.objects.get().rules[0]["then"] == {"quorum": 3, "from": ["admin", "member"]}
