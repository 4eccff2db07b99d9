"""Routes of the admin and ops pages, /metrics and /healthz (issue 7)."""

from django.urls import path

from . import health, metrics
from .web import audit, away, ops, team

urlpatterns = [
    path("team", team.team, name="team"),
    path("team/people", team.person_add, name="team-person-add"),
    path("team/people/<int:user_id>/role", team.person_role, name="team-person-role"),
    path("team/people/<int:user_id>/active", team.person_active, name="team-person-active"),
    path("team/people/<int:user_id>/slack", team.person_slack, name="team-person-slack"),
    path("team/people/<int:user_id>/away", away.person_away, name="team-person-away"),
    path("team/accounts", team.account_add, name="team-account-add"),
    path("team/accounts/<int:account_id>/role", team.account_role, name="team-account-role"),
    path("team/accounts/<int:account_id>/revoke", team.account_revoke, name="team-account-revoke"),
    path("team/capabilities/<int:capability_id>", team.capability_approvers, name="team-capability"),
    path("team/set-password/<uidb64>/<token>", team.SetPasswordView.as_view(), name="team-set-password"),
    path("team/password-set", team.password_set, name="team-password-set"),
    path("audit", audit.audit, name="audit"),
    path("audit.csv", audit.audit_csv, name="audit-csv"),
    path("ops", ops.ops_page, name="ops"),
    path("ops/fragment", ops.ops_fragment, name="ops-fragment"),
    path("ops/invocations/<str:invocation_id>/retry", ops.ops_retry, name="ops-retry"),
    path("ops/capabilities/<int:capability_id>/enable", ops.ops_enable, name="ops-enable"),
    path("metrics", metrics.metrics, name="metrics"),
    path("healthz", health.healthz, name="healthz"),
]
