from django.apps import AppConfig


class HoldsConfig(AppConfig):
    name = "holds"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Registers what the write path hands out after commit (services.ports) and the tasks.
        from . import tasks  # noqa: F401
