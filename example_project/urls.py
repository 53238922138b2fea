"""URLs: the shop (``/checkout/``, ``/jobs/<id>/``), the admin, where the job tables show, and
``/metrics`` for Prometheus."""

from django.contrib import admin
from django.urls import include, path

from example_project.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    # Prometheus scrapes this web process here (docs/operations.md); 404 while metrics are off.
    path("metrics", metrics_view, name="metrics"),
    path("", include("example_project.shop.urls")),
]
