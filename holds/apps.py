from django.apps import AppConfig


class HoldsConfig(AppConfig):
    name = "holds"
    default_auto_field = "django.db.models.BigAutoField"
