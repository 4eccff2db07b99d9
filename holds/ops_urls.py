"""Routes of the admin and ops pages, /metrics and /healthz (issue 7)."""

urlpatterns = []
