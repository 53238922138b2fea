from django.urls import path

from . import views

urlpatterns = [
    path("checkout/", views.checkout, name="checkout"),
    path("jobs/<int:job_id>/", views.job_status, name="job-status"),
]
