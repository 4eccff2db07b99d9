from django.contrib.auth import views as auth_views
from django.urls import path

from .web import app, away, calibration, claims, confidence, evals, extend, grants, hold, login, queue, rules, slack

urlpatterns = [
    path("login/", login.login, name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", queue.queue, name="queue"),
    path("manifest.webmanifest", app.manifest, name="manifest"),
    path("sw.js", app.service_worker, name="service-worker"),
    path("favicon.ico", app.favicon, name="favicon"),
    path("push/subscriptions", app.push_subscriptions, name="push-subscriptions"),
    path("slack/interactions", slack.interactions, name="slack-interactions"),
    path("history", queue.history, name="history"),
    path("away", away.away, name="away"),
    path("holds/<str:hold_id>", hold.hold_page, name="hold"),
    path("holds/<str:hold_id>/review", hold.hold_review, name="hold-review"),
    path("holds/<str:hold_id>/decision", hold.hold_decision, name="hold-decision"),
    path("holds/<str:hold_id>/extend", extend.hold_extend, name="hold-extend"),
    path("holds/<str:hold_id>/presence", claims.hold_presence, name="hold-presence"),
    path("holds/<str:hold_id>/claim", claims.hold_claim, name="hold-claim"),
    path("holds/<str:hold_id>/by-confidence", confidence.by_confidence_preview, name="hold-by-confidence"),
    path("holds/<str:hold_id>/grant", grants.grant_new, name="grant-new"),
    path("capabilities/<str:name>/rules", rules.capability_rules, name="capability-rules"),
    path("capabilities/<str:name>/grants/<str:grant_id>/revoke", rules.grant_revoke, name="capability-grant-revoke"),
    path("calibration", calibration.calibration_page, name="calibration"),
    path("calibration.csv", calibration.calibration_csv, name="calibration-csv"),
    path("files/<str:file_id>", hold.file_download, name="file"),
    path("holds/<str:hold_id>/dataset", evals.hold_add_to_dataset, name="hold-add-to-dataset"),
    path("experiments", evals.experiment_list, name="experiments"),
    path("experiments/<str:experiment_id>", evals.experiment_page, name="experiment"),
    path("datasets", evals.dataset_list, name="datasets"),
    path("datasets/<str:dataset_id>", evals.dataset_page, name="dataset"),
    path("datasets/<str:dataset_id>/experiments", evals.experiment_start, name="dataset-experiment-start"),
    path(
        "datasets/<str:dataset_id>/items/<str:item_id>/delete",
        evals.dataset_item_delete,
        name="dataset-item-delete",
    ),
]
