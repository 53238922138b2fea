"""Paused queues in the admin: the list of paused queues, and the pause/resume buttons of the
summary's queue table (rule 75 (paused-queue)). Both act through
``operations.pause_queue``/``resume_queue``, with Job's change permission, like cancel and retry."""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ..conf import jobs_database
from ..exceptions import OperationInputError
from ..models import Job, QueuePause
from ..operations import pause_queue, resume_queue
from .base import JobsAdmin, actor


@admin.action(permissions=["change"], description=_("Resume selected queues"))
def resume_selected(modeladmin: admin.ModelAdmin, request: HttpRequest,
                    queryset: QuerySet[QueuePause]) -> None:
    """Resume each selected queue: workers claim from it again at once (or within a poll)."""
    names = list(queryset.values_list("queue", flat=True))
    resumed = [name for name in names
               if resume_queue(name, by=actor(request), using=jobs_database())]
    modeladmin.message_user(request, gettext("Resumed %(queues)s.") % {
        "queues": ", ".join(resumed) or gettext("nothing")}, messages.SUCCESS)


@admin.register(QueuePause)
class QueuePauseAdmin(JobsAdmin):
    """The paused queues: since when, by whom, why; resumed with the action or the summary."""

    permission_model = Job
    rows_have_pages = False
    list_display = ("queue", "paused_at", "paused_by", "reason")
    list_display_links = None
    ordering = ("paused_at", "queue")
    actions = (resume_selected,)

    def get_urls(self) -> list[URLPattern]:
        """The summary's pause/resume buttons post to ``toggle/``."""
        toggle = path("toggle/", self.admin_site.admin_view(self.toggle_view),
                      name="django_ultjobs_queuepause_toggle")
        return [toggle, *super().get_urls()]

    def toggle_view(self, request: HttpRequest) -> HttpResponse:
        """Pause or resume the posted queue, then go back to the jobs app's index."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_change_permission(request):
            raise PermissionDenied
        queue, verb = request.POST.get("queue", ""), request.POST.get("do", "")
        if verb not in ("pause", "resume"):
            return HttpResponseNotAllowed(["POST"])
        try:
            if verb == "pause":
                changed = pause_queue(queue, by=actor(request), using=jobs_database(),
                                      reason=request.POST.get("reason", "")[:1000])
            else:
                changed = resume_queue(queue, by=actor(request), using=jobs_database())
        except OperationInputError as exc:
            self.message_user(request, str(exc), messages.ERROR)
        else:
            self.message_user(request, _message(verb, queue, changed),
                              messages.SUCCESS if changed else messages.WARNING)
        return HttpResponseRedirect(reverse("admin:app_list", args=["django_ultjobs"]))


def _message(verb: str, queue: str, changed: bool) -> str:
    if verb == "pause":
        return (gettext("Paused queue %(queue)s: workers stop claiming from it at their next "
                        "claim; runs in flight finish.") if changed
                else gettext("Queue %(queue)s was paused already.")) % {"queue": queue}
    return (gettext("Resumed queue %(queue)s: workers claim from it again.") if changed
            else gettext("Queue %(queue)s was not paused.")) % {"queue": queue}
