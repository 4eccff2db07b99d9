from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from holds import api, login, openapi

v0 = [
    path("holds", api.holds, name="api-holds"),
    path("holds/<str:hold_id>", api.hold_detail, name="api-hold"),
    path("holds/<str:hold_id>/decision", api.hold_decision, name="api-hold-decision"),
    path("holds/<str:hold_id>/extend", api.hold_extend, name="api-hold-extend"),
    path("runs", api.runs, name="api-runs"),
    path("runs/<str:run_id>", api.run_detail, name="api-run"),
    path("runs/<str:run_id>/fail", api.run_fail, name="api-run-fail"),
    path("a2a/runs/<str:run_id>/push", api.a2a_push, name="api-a2a-push"),
    path("runs/<str:run_id>/state/<path:key>", api.run_state, name="api-run-state"),
    path("files", api.files, name="api-files"),
    path("files/<str:file_id>", api.file_download, name="api-file"),
    path("invocations/<str:invocation_id>/retry", api.invocation_retry, name="api-invocation-retry"),
    path("datasets", api.datasets, name="api-datasets"),
    path("datasets/<str:dataset_id>", api.dataset_detail, name="api-dataset"),
    path("datasets/<str:dataset_id>/items", api.dataset_items, name="api-dataset-items"),
    path("datasets/<str:dataset_id>/items/<str:item_id>", api.dataset_item, name="api-dataset-item"),
    path("experiments", api.experiments_list, name="api-experiments"),
    path("experiments/<str:experiment_id>", api.experiment_detail, name="api-experiment"),
    path("openapi.json", openapi.openapi_json, name="api-openapi"),
    path("docs", openapi.docs, name="api-docs"),
]

urlpatterns = [
    path("v0/", include(v0)),
    # The admin's own sign-in form would skip RQ_RATE_LOGIN: every sign-in goes through /login/.
    path("admin/login/", login.admin_login),
    path("admin/", admin.site.urls),
    path("", include("holds.ops_urls")),
    path("", include("holds.urls")),
]

if settings.RQ_BENCH_VIEWS:
    # Baselines measured beside the real views by bench/ask.py; never on in production.
    urlpatterns.insert(0, path("bench/", include("bench.urls")))
