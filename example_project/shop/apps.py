"""The shop app; its ``ready()`` switches on optional tracing and metrics (see
example_project/otel.py and example_project/metrics.py)."""

from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "example_project.shop"
    label = "shop"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from example_project.metrics import setup_metrics
        from example_project.otel import setup_tracing

        setup_tracing()
        setup_metrics()
