from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("jobs/", include("django_ultjobs.urls")),
    path("shop/", include("example_project.shop.urls")),
]
