"""URLs: the shop (``/checkout/``, ``/jobs/<id>/``), the admin, where the job tables show,
``/metrics`` for Prometheus and ``/ultjobs/stats/`` for an autoscaler."""

from django.contrib import admin
from django.urls import include, path

from example_project.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    # Prometheus scrapes this web process here (docs/operations.md); 404 while metrics are off.
    path("metrics", metrics_view, name="metrics"),
    # The queues' figures as JSON for an autoscaler (docs/deployment.md): staff with the view
    # permission, or ULTJOBS["STATS_TOKEN"] as a bearer token (ULTJOBS_STATS_TOKEN here).
    path("ultjobs/", include("django_ultjobs.urls")),
    path("", include("example_project.shop.urls")),
]
