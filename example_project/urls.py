"""URLs: the shop (``/checkout/``, ``/jobs/<id>/``) and the admin, where the job tables show."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("example_project.shop.urls")),
]
