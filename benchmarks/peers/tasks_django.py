"""django-tasks-db's tasks for the peer benchmark (Django 6.1's ``django.tasks`` API)."""

from django.tasks import task

from benchmarks.peers.common import send_started


@task
def peers_noop() -> None:
    return None


@task
def peers_ping(seq: int, port: int) -> None:
    send_started(seq, port)


@task
def peers_django(seq: int) -> None:
    """The Django-shaped job: one ORM insert, one ORM read."""
    from benchmarks.peers.models import django_job_body

    django_job_body(seq)
