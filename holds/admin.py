"""Django admin for every model, read-only. Every change goes through services.py, which audits it:
holds, runs and invocations change by their own rules, people, service accounts, capabilities and
approvers on the team page, and the audit log never. No lookup may touch a secret field, so
`?secret__regex=^a` cannot read a signing secret out of a changelist one character at a time.

The app's own admins (policy.may_administer: an admin membership, which the team service makes
staff, or a superuser) see every model here without Django's per-model permissions, which nothing
grants; django-axes' sign-in records are read-only too."""

from axes.admin import AccessAttemptAdmin, AccessFailureLogAdmin, AccessLogAdmin
from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db.models.constants import LOOKUP_SEP

from . import models
from .auth import actor_for_user
from .policy import may_administer

# Fields whose value, or anything derived from it, is never shown: signing secrets, hashes of keys,
# tokens and passwords.
SECRET_FIELDS = {"secret", "key_hash", "token_hash", "password"}


class ReadOnlyAdmin(admin.ModelAdmin):
    # Changing nothing, no bulk action applies (Django's delete, axes' clean-up).
    actions = None

    def has_view_permission(self, request, obj=None):
        return _app_admin(request) or super().has_view_permission(request, obj)

    def has_module_permission(self, request):
        return _app_admin(request) or super().has_module_permission(request)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def lookup_allowed(self, lookup, value, request):
        if SECRET_FIELDS.intersection(lookup.split(LOOKUP_SEP)):
            return False  # the changelist answers 400
        return super().lookup_allowed(lookup, value, request)


@admin.register(models.Capability)
class CapabilityAdmin(ReadOnlyAdmin):
    list_display = ("name", "endpoint", "version", "approvers", "endpoint_disabled_at")
    exclude = ("secret",)


@admin.register(models.Membership)
class MembershipAdmin(ReadOnlyAdmin):
    list_display = ("user", "role")


@admin.register(models.ServiceAccount)
class ServiceAccountAdmin(ReadOnlyAdmin):
    list_display = ("name", "role", "key_prefix", "revoked_at", "created_at")
    exclude = ("key_hash",)


@admin.register(models.Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("public_id", "capability", "status", "seq", "created_at")
    list_filter = ("status", "capability")


@admin.register(models.Invocation)
class InvocationAdmin(ReadOnlyAdmin):
    list_display = ("id", "run", "kind", "seq", "status", "attempts", "next_attempt_at")
    list_filter = ("status", "kind")
    exclude = ("token_hash",)


@admin.register(models.Hold)
class HoldAdmin(ReadOnlyAdmin):
    list_display = ("public_id", "capability", "status", "intent", "created_at", "expires_at")
    list_filter = ("status", "capability")
    search_fields = ("search_text",)


@admin.register(models.HoldItem)
class HoldItemAdmin(ReadOnlyAdmin):
    list_display = ("hold", "item_id", "title", "action")


@admin.register(models.DeliveryAttempt)
class DeliveryAttemptAdmin(ReadOnlyAdmin):
    list_display = ("invocation", "number", "started_at", "status_code", "outcome", "latency_ms")


@admin.register(models.AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("at", "actor", "kind", "run_id_ref", "hold_id_ref", "invocation_id_ref")
    list_filter = ("kind",)


@admin.register(models.IdempotencyKey)
class IdempotencyKeyAdmin(ReadOnlyAdmin):
    list_display = ("caller", "key", "run", "created_at")


@admin.register(models.RunFile)
class RunFileAdmin(ReadOnlyAdmin):
    list_display = ("public_id", "run", "name", "content_type", "size")


@admin.register(models.RunState)
class RunStateAdmin(ReadOnlyAdmin):
    list_display = ("run", "key", "updated_at")


def _app_admin(request) -> bool:
    return may_administer(actor_for_user(request.user), "read the admin") is None


# Sign-in attempts and lockouts are evidence, kept as django-axes wrote them; a lockout ends by its
# cool-off (RQ_LOGIN_COOLOFF_MINUTES) or `manage.py axes_reset`, not by deleting its row here.
for model, axes_admin in (
    (AccessAttempt, AccessAttemptAdmin),
    (AccessLog, AccessLogAdmin),
    (AccessFailureLog, AccessFailureLogAdmin),
):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, type(axes_admin.__name__, (ReadOnlyAdmin, axes_admin), {}))


# People change on the team page (role, active, password), where each change is audited; a superuser
# flag set here would make an admin with no audit event.
class PersonAdmin(ReadOnlyAdmin, UserAdmin):
    pass


admin.site.unregister(get_user_model())
admin.site.register(get_user_model(), PersonAdmin)
