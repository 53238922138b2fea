"""The package's own URLs: ``path("jobs/", include("django_ultjobs.urls"))`` serves the stats
view at ``/jobs/stats/`` (docs/deployment.md)."""

from django.urls import path

from .views import stats_view

app_name = "django_ultjobs"
urlpatterns = [path("stats/", stats_view, name="stats")]
