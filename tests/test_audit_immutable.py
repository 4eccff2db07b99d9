"""The audit log is append-only through every path: the model, querysets and raw SQL (PostgreSQL's
trigger), and the Django admin."""

import pytest
from django.db import DatabaseError, transaction

from holds.models import AuditEvent
from holds.services import gateway
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def event(db):
    factories.capability()  # capability.synced is audited
    return AuditEvent.objects.get(kind="capability.synced")


def test_it_refuses_to_save_an_existing_event(event):
    event.actor = "mallory"
    with pytest.raises(PermissionError):
        event.save()
    assert AuditEvent.objects.get(pk=event.pk).actor == "system"


def test_it_refuses_to_delete_an_event_through_the_model(event):
    with pytest.raises(PermissionError):
        event.delete()
    assert AuditEvent.objects.filter(pk=event.pk).exists()


def test_it_refuses_a_queryset_update_in_postgresql(event):
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).update(actor="mallory")
    assert AuditEvent.objects.get(pk=event.pk).actor == "system"


def test_it_refuses_a_queryset_delete_in_postgresql(event):
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.all().delete()
    assert AuditEvent.objects.filter(pk=event.pk).exists()


def test_it_refuses_raw_sql_in_postgresql(event):
    for sql in ("UPDATE holds_auditevent SET kind = 'x'", "DELETE FROM holds_auditevent"):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            gateway.fetch(sql)
    assert AuditEvent.objects.get(pk=event.pk).kind == "capability.synced"


def test_it_still_appends_in_postgresql(event):
    AuditEvent.objects.create(kind="test.appended", actor="system")
    assert AuditEvent.objects.filter(kind="test.appended").count() == 1


def test_it_gives_the_admin_no_add_change_or_delete(client, event):
    superuser = factories.person("root", role="admin")
    superuser.is_superuser = True
    superuser.save()
    client.force_login(superuser)
    base = "/admin/holds/auditevent/"
    listing = client.get(base)
    assert listing.status_code == 200
    assert "delete_selected" not in listing.content.decode()
    page = client.get(f"{base}{event.pk}/change/")
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()  # view only
    assert client.post(f"{base}{event.pk}/change/", {"actor": "mallory", "kind": "x"}).status_code == 403
    assert client.get(f"{base}{event.pk}/delete/").status_code == 403
    assert client.post(f"{base}{event.pk}/delete/", {"post": "yes"}).status_code == 403
    assert client.post(base, {"action": "delete_selected", "_selected_action": [event.pk]}).status_code in (200, 302)
    assert client.get(f"{base}add/").status_code == 403
    event.refresh_from_db()
    assert event.actor == "system" and AuditEvent.objects.filter(pk=event.pk).exists()
