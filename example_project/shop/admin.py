"""Orders in the admin (the job tables are the package's own to show)."""

from django.contrib import admin

from .models import Order


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ("id", "email", "total_cents", "status", "created_at")
    list_filter = ("status",)
    search_fields = ("email",)
