"""The shop app; its ``ready()`` switches on optional tracing (see example_project/otel.py)."""

from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "example_project.shop"
    label = "shop"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from example_project.otel import setup_tracing

        setup_tracing()
