"""Django admin for every model. Status changes go through services.py, so holds, runs and
invocations are read-only here, and the audit log can be neither changed nor deleted."""

from django.contrib import admin

from . import models


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(models.Capability)
class CapabilityAdmin(admin.ModelAdmin):
    list_display = ("name", "endpoint", "version", "approvers", "endpoint_disabled_at")
    exclude = ("secret",)


@admin.register(models.Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "role")


@admin.register(models.ServiceAccount)
class ServiceAccountAdmin(admin.ModelAdmin):
    list_display = ("name", "role", "key_prefix", "revoked_at", "created_at")
    readonly_fields = ("key_hash", "key_prefix")


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
