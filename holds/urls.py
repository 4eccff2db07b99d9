from django.contrib.auth import views as auth_views
from django.urls import path

from . import (
    calibration_views,
    confidence_views,
    eval_views,
    extend_views,
    grant_views,
    login,
    presence_views,
    rules_views,
    views,
)

urlpatterns = [
    path("login/", login.login, name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.queue, name="queue"),
    path("history", views.history, name="history"),
    path("holds/<str:hold_id>", views.hold_page, name="hold"),
    path("holds/<str:hold_id>/review", views.hold_review, name="hold-review"),
    path("holds/<str:hold_id>/decision", views.hold_decision, name="hold-decision"),
    path("holds/<str:hold_id>/extend", extend_views.hold_extend, name="hold-extend"),
    path("holds/<str:hold_id>/presence", presence_views.hold_presence, name="hold-presence"),
    path("holds/<str:hold_id>/claim", presence_views.hold_claim, name="hold-claim"),
    path("holds/<str:hold_id>/by-confidence", confidence_views.by_confidence_preview, name="hold-by-confidence"),
    path("holds/<str:hold_id>/grant", grant_views.grant_new, name="grant-new"),
    path("capabilities/<str:name>/rules", rules_views.capability_rules, name="capability-rules"),
    path(
        "capabilities/<str:name>/grants/<str:grant_id>/revoke",
        rules_views.grant_revoke,
        name="capability-grant-revoke",
    ),
    path("calibration", calibration_views.calibration_page, name="calibration"),
    path("calibration.csv", calibration_views.calibration_csv, name="calibration-csv"),
    path("files/<str:file_id>", views.file_download, name="file"),
    path("holds/<str:hold_id>/dataset", eval_views.hold_add_to_dataset, name="hold-add-to-dataset"),
    path("experiments", eval_views.experiment_list, name="experiments"),
    path("experiments/<str:experiment_id>", eval_views.experiment_page, name="experiment"),
    path("datasets", eval_views.dataset_list, name="datasets"),
    path("datasets/<str:dataset_id>", eval_views.dataset_page, name="dataset"),
    path("datasets/<str:dataset_id>/experiments", eval_views.experiment_start, name="dataset-experiment-start"),
    path(
        "datasets/<str:dataset_id>/items/<str:item_id>/delete",
        eval_views.dataset_item_delete,
        name="dataset-item-delete",
    ),
]
