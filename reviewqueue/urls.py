from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from holds import openapi
from holds.api import agent, evals, jwks, people, pushes, rules
from holds.web import login

v0 = [
    path("holds", agent.holds, name="api-holds"),
    path("holds/<str:hold_id>", agent.hold_detail, name="api-hold"),
    path("holds/<str:hold_id>/decision", agent.hold_decision, name="api-hold-decision"),
    path("holds/<str:hold_id>/extend", agent.hold_extend, name="api-hold-extend"),
    path("runs", agent.runs, name="api-runs"),
    path("runs/<str:run_id>", agent.run_detail, name="api-run"),
    path("runs/<str:run_id>/fail", agent.run_fail, name="api-run-fail"),
    path("a2a/runs/<str:run_id>/push", pushes.a2a_push, name="api-a2a-push"),
    path("runs/<str:run_id>/state/<path:key>", agent.run_state, name="api-run-state"),
    path("files", agent.files, name="api-files"),
    path("files/<str:file_id>", agent.file_download, name="api-file"),
    path("invocations/<str:invocation_id>/retry", agent.invocation_retry, name="api-invocation-retry"),
    path("datasets", evals.datasets, name="api-datasets"),
    path("datasets/<str:dataset_id>", evals.dataset_detail, name="api-dataset"),
    path("datasets/<str:dataset_id>/items", evals.dataset_items, name="api-dataset-items"),
    path("datasets/<str:dataset_id>/items/<str:item_id>", evals.dataset_item, name="api-dataset-item"),
    path("experiments", evals.experiments_list, name="api-experiments"),
    path("experiments/<str:experiment_id>", evals.experiment_detail, name="api-experiment"),
    path("capabilities/<str:name>/rules", rules.capability_rules, name="api-capability-rules"),
    path("capabilities/<str:name>/backtest", rules.capability_backtest, name="api-capability-backtest"),
    path("capabilities/<str:name>/grants", rules.capability_grants, name="api-capability-grants"),
    path("grants/<str:grant_id>", rules.grant_detail, name="api-grant"),
    path("grants/<str:grant_id>/revoke", rules.grant_revoke, name="api-grant-revoke"),
    path("me/away", people.me_away, name="api-me-away"),
    path("openapi.json", openapi.openapi_json, name="api-openapi"),
    path("docs", openapi.docs, name="api-docs"),
]

urlpatterns = [
    path("v0/", include(v0)),
    path(".well-known/jwks.json", jwks.jwks, name="jwks"),
    # The admin's own sign-in form would skip RQ_RATE_LOGIN: every sign-in goes through /login/.
    path("admin/login/", login.admin_login),
    path("admin/", admin.site.urls),
    path("", include("holds.ops_urls")),
    path("", include("holds.urls")),
]

if settings.RQ_BENCH_VIEWS:
    # Baselines measured beside the real views by bench/ask.py; never on in production.
    urlpatterns.insert(0, path("bench/", include("bench.urls")))
